"""A small HTTP/1.1 client for JSON POSTs to plain-http endpoints, on asyncio streams.

The provider's direct path (provider.py) sends every model call of a run to one OpenAI-compatible
endpoint, usually on the same host or network (local model servers, scripted models). A general
client (httpx and its connection pool) spends more CPU per call than the whole rest of a
one-tool-call task; this one keeps idle keep-alive connections per host and port, writes one
request, reads one response (Content-Length, chunked, or until close), and nothing else. HTTPS and
proxies are left to httpx.
"""

from __future__ import annotations

import asyncio
import os
from urllib.parse import urlsplit

PROXY_VARIABLES = ("http_proxy", "HTTP_PROXY", "all_proxy", "ALL_PROXY")
MAX_HEADER_LINES = 200


class ResponseError(ConnectionError):
    """The server closed the connection or sent something that is not an HTTP/1.1 response."""


def usable_for(url: str) -> bool:
    """True for an ``http://`` URL with no proxy configured in the environment."""
    return url.startswith("http://") and not any(os.environ.get(v) for v in PROXY_VARIABLES)


Connection = tuple[asyncio.StreamReader, asyncio.StreamWriter]


class Response:
    __slots__ = ("body", "headers", "status")

    def __init__(self, status: int, headers: dict[str, str], body: bytes) -> None:
        self.status = status
        self.headers = headers  # names in lower case
        self.body = body


class Client:
    """Keep-alive connections per (host, port); one request at a time per connection."""

    def __init__(self) -> None:
        self._idle: dict[tuple[str, int], list[Connection]] = {}

    async def post(self, url: str, body: bytes, headers: dict[str, str], timeout_s: float) -> Response:
        """POST ``body``; raises TimeoutError after ``timeout_s``, OSError on connection trouble."""
        parts = urlsplit(url)
        host, port = parts.hostname or "", parts.port or 80
        target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        lines = [f"POST {target} HTTP/1.1", f"host: {parts.netloc}", f"content-length: {len(body)}"]
        lines += [f"{name}: {value}" for name, value in headers.items()]
        request = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body
        async with asyncio.timeout(timeout_s):
            while True:
                connection, reused = self._checkout((host, port))
                if connection is None:
                    connection = await asyncio.open_connection(host, port)
                reader, writer = connection
                try:
                    writer.write(request)
                    await writer.drain()
                    response, keep = await _read_response(reader)
                except BaseException as exc:
                    writer.close()
                    if reused and (_closed(exc) or isinstance(exc, BrokenPipeError | ConnectionResetError)):
                        continue  # the server had closed the idle connection: it never saw the request
                    raise
                if keep:
                    self._idle.setdefault((host, port), []).append(connection)
                else:
                    writer.close()
                return response

    def _checkout(self, key: tuple[str, int]) -> tuple[Connection | None, bool]:
        idle = self._idle.get(key) or []
        while idle:
            reader, writer = idle.pop()
            if not reader.at_eof() and not writer.is_closing():
                return (reader, writer), True
            writer.close()
        return None, False

    def close(self) -> None:
        for idle in self._idle.values():
            for _, writer in idle:
                writer.close()
        self._idle.clear()


def _closed(exc: BaseException) -> bool:
    return isinstance(exc, ResponseError) and exc.args == ("closed",)


async def _read_response(reader: asyncio.StreamReader) -> tuple[Response, bool]:
    status_line = await reader.readline()
    if not status_line:
        raise ResponseError("closed")
    version, _, rest = status_line.decode("latin-1").partition(" ")
    if not version.startswith("HTTP/1.") or not rest[:3].isdigit():
        raise ResponseError(f"not an HTTP/1.x response: {status_line[:80]!r}")
    headers: dict[str, str] = {}
    for _ in range(MAX_HEADER_LINES):
        line = await reader.readline()
        if line in (b"\r\n", b"\n"):
            break
        if not line:
            raise ResponseError("connection closed inside the response headers")
        name, _, value = line.decode("latin-1").partition(":")
        headers[name.strip().lower()] = value.strip()
    else:
        raise ResponseError("too many response header lines")
    connection = headers.get("connection", "").lower()
    keep = "close" not in connection and (version == "HTTP/1.1" or "keep-alive" in connection)
    if "chunked" in headers.get("transfer-encoding", "").lower():
        body = await _read_chunked(reader)
    elif headers.get("content-length", "").isdigit():
        body = await reader.readexactly(int(headers["content-length"]))
    else:
        body, keep = await reader.read(), False  # delimited by the end of the connection
    return Response(int(rest[:3]), headers, body), keep


async def _read_chunked(reader: asyncio.StreamReader) -> bytes:
    chunks: list[bytes] = []
    while True:
        line = (await reader.readline()).split(b";", 1)[0].strip()
        try:
            size = int(line, 16)
        except ValueError:
            raise ResponseError(f"bad chunk size line {line[:40]!r}") from None
        if size == 0:
            while (await reader.readline()) not in (b"\r\n", b"\n", b""):  # trailers
                pass
            return b"".join(chunks)
        chunks.append(await reader.readexactly(size))
        await reader.readexactly(2)
