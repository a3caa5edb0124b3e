"""The two provider paths (provider.py): litellm, and the direct path for OpenAI-compatible
endpoints serving models litellm does not know. Both against the same scripted server; every
figure the harness keeps must come out the same: request bodies, replies, tokens, price, error
kinds, retries, timeouts, and the scores of a whole run.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from atlasrun import provider as provider_module
from atlasrun.agent.litellm_agent import _assistant_message
from atlasrun.errors import ErrorKind
from atlasrun.provider import Endpoint, ProviderError, complete, goes_direct
from atlasrun.runner.local import run_local
from atlasrun.runspec.run import load_run_spec
from atlasrun.scoring.result import TaskResult
from atlasrun.scoring.store import task_record_name
from atlasrun.testing.scripted_provider import Reply, ScriptedProvider, tool_call
from conftest import SUM_TASK, write_run, write_tasks

PATHS = ["direct", "litellm"]
TOOLS = [{"type": "function", "function": {"name": "calc_add", "parameters": {"type": "object"}}}]


def test_which_calls_go_direct(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ATLAS_PROVIDER", raising=False)
    local = {"api_base": "http://127.0.0.1:1/v1", "api_key": "unused"}
    assert goes_direct("openai/instant", local | {"tools": TOOLS, "temperature": 0.0})
    assert not goes_direct("openai/gpt-4o-mini", local)  # litellm knows it: its own handling
    assert not goes_direct("openai/instant", {"api_key": "k"})  # no api_base: api.openai.com
    assert not goes_direct("anthropic/instant", local)
    assert not goes_direct("openai/instant", local | {"extra_body": {"x": 1}})  # litellm maps it
    monkeypatch.setenv("ATLAS_PROVIDER", "litellm")
    assert not goes_direct("openai/instant", local)


def _complete(api_base: str, model: str = "openai/instant", **extra: Any) -> Any:
    endpoint = Endpoint(model, api_base)
    messages = [{"role": "user", "content": "What is 2+3?"}]
    return asyncio.run(complete(endpoint, messages, retries=2, backoff_base_s=0.0, timeout_s=2, **extra))


def _outcome(path_: str, reply: Reply, model: str = "openai/instant", **extra: Any) -> dict[str, Any]:
    bodies: list[dict[str, Any]] = []

    def script(body: dict[str, Any]) -> Reply:
        bodies.append(body)
        return reply

    with ScriptedProvider(script) as provider:
        assert goes_direct(model, {"api_base": provider.api_base, **extra}) == (
            path_ == "direct" and model == "openai/instant"
        )
        try:
            done = _complete(provider.api_base, model, **extra)
        except ProviderError as exc:
            return {"kind": exc.kind, "retries": exc.retries, "timed_out": exc.timed_out, "requests": bodies}
    return {
        "message": _assistant_message(done.message),
        "content": done.message.get("content"),
        "tokens": (done.prompt_tokens, done.completion_tokens),
        "cost": (done.cost_usd, done.priced),
        "retries": done.retries,
        "requests": bodies,
    }


def _both(reply: Reply, model: str = "openai/instant", **extra: Any) -> dict[str, Any]:
    outcomes = {}
    with pytest.MonkeyPatch.context() as patch:
        for path_ in PATHS:
            if path_ == "litellm":
                patch.setenv("ATLAS_PROVIDER", "litellm")
            else:
                patch.delenv("ATLAS_PROVIDER", raising=False)
            outcomes[path_] = _outcome(path_, reply, model, **extra)
    assert outcomes["direct"] == outcomes["litellm"]
    return outcomes["direct"]


def test_same_request_and_reply_on_both_paths() -> None:
    reply = Reply(tool_calls=[tool_call("calc_add", {"a": 2, "b": 3}, "call_7")], prompt_tokens=31)
    found = _both(reply, tools=TOOLS, temperature=0.0, max_tokens=64)
    (request,) = found["requests"]
    assert request["model"] == "instant" and request["tools"] == TOOLS and request["max_tokens"] == 64
    assert found["message"]["tool_calls"][0]["function"] == {
        "name": "calc_add",
        "arguments": '{"a": 2, "b": 3}',
    }
    assert found["tokens"] == (31, 5) and found["cost"] == (0.0, False)  # no known price: n/a
    assert _both(Reply(content=""))["content"] == ""


def test_a_reply_naming_a_priced_model_is_priced_the_same() -> None:
    completion = {
        "id": "x",
        "object": "chat.completion",
        "created": 1,
        "model": "gpt-4o-mini",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "5"}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 1000, "completion_tokens": 500, "total_tokens": 1500},
    }
    found = _both(Reply(raw_body=json.dumps(completion)))
    assert found["cost"][1] is True and found["cost"][0] > 0


def test_a_reply_without_usage_counts_no_tokens() -> None:
    completion = {"choices": [{"index": 0, "message": {"role": "assistant", "content": "hi"}}], "model": "m"}
    assert _both(Reply(raw_body=json.dumps(completion)))["tokens"] == (0, 0)


@pytest.mark.parametrize(
    "status,kind,retried",
    [
        (400, ErrorKind.PROVIDER_REQUEST, False),
        (401, ErrorKind.PROVIDER_AUTH, False),
        (403, ErrorKind.PROVIDER_AUTH, False),
        (404, ErrorKind.PROVIDER_MODEL, False),
        (408, ErrorKind.PROVIDER_TIMEOUT, True),
        (409, ErrorKind.PROVIDER, False),
        (422, ErrorKind.PROVIDER_REQUEST, False),
        (429, ErrorKind.PROVIDER, True),
        (500, ErrorKind.PROVIDER, True),
        (502, ErrorKind.PROVIDER, True),
        (503, ErrorKind.PROVIDER, True),
        (504, ErrorKind.PROVIDER_TIMEOUT, True),
        (520, ErrorKind.PROVIDER, False),
    ],
)
def test_http_errors_are_typed_and_retried_alike(status: int, kind: ErrorKind, retried: bool) -> None:
    found = _both(Reply(status=status, raw_body=json.dumps({"error": {"message": f"failed with {status}"}})))
    assert found["kind"] == kind and len(found["requests"]) == (3 if retried else 1)


def test_a_missing_key_reported_as_a_server_error_is_not_retried() -> None:
    body = {"error": {"message": "Missing credentials. Please pass an `api_key`"}}
    found = _both(Reply(status=500, raw_body=json.dumps(body)))
    assert found["kind"] == ErrorKind.PROVIDER_AUTH and len(found["requests"]) == 1


@pytest.mark.heavy  # 13 s: real provider timeouts on both paths
def test_garbage_and_a_hang_are_retried_alike() -> None:
    assert len(_both(Reply(raw_body="this is not json"))["requests"]) == 3
    hung = _both(Reply(hang=True))
    assert hung["kind"] == ErrorKind.PROVIDER_TIMEOUT and hung["timed_out"] and len(hung["requests"]) == 3


def test_a_refused_connection_is_retried_alike(unused_tcp_port: int) -> None:
    outcomes = []
    for path_ in PATHS:
        with pytest.MonkeyPatch.context() as patch:
            if path_ == "litellm":
                patch.setenv("ATLAS_PROVIDER", "litellm")
            with pytest.raises(ProviderError) as failed:
                _complete(f"http://127.0.0.1:{unused_tcp_port}/v1")
            outcomes.append((failed.value.kind, failed.value.retries, failed.value.timed_out))
    assert outcomes[0] == outcomes[1] == (ErrorKind.PROVIDER, 2, False)


def test_the_direct_path_never_imports_litellm() -> None:
    code = """
import asyncio, sys
from atlasrun.provider import Endpoint, complete
from atlasrun.testing.scripted_provider import ScriptedProvider, one_tool_call
with ScriptedProvider(one_tool_call) as p:
    done = asyncio.run(complete(Endpoint("openai/instant", p.api_base), [{"role": "user", "content": "q"}],
                                retries=0, backoff_base_s=0))
print(done.message["tool_calls"][0]["function"]["name"], "litellm" in sys.modules)
"""
    env = {k: v for k, v in os.environ.items() if k != "ATLAS_PROVIDER"}  # conftest routes via litellm
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env)
    assert out.stdout.split() == ["calculator_calculate", "False"], out.stderr


def _solver(body: dict[str, Any]) -> Reply:
    results = [str(m.get("content")) for m in body["messages"] if m["role"] == "tool"]
    if not results:
        return Reply(tool_calls=[tool_call("filesystem_read_text_file", {"path": "/data/numbers.txt"}, "c1")])
    if len(results) == 1:
        numbers = [n for n in results[0].split() if n.isdigit()]
        return Reply(tool_calls=[tool_call("calculator_calculate", {"expression": "+".join(numbers)}, "c2")])
    return Reply(content=f"The sum of the numbers is {results[-1].strip()}.")


def _run(tmp_path: Path, data_dir: Path) -> dict[str, tuple[Any, ...]]:
    wrong = {**SUM_TASK, "id": "wrong", "claims": ["The launch code name is REDBIRD"]}
    with ScriptedProvider(_solver) as provider:
        models = [{"name": "m", "model": "openai/solver", "apiBase": provider.api_base}]
        tasks = write_tasks(tmp_path / "tasks.yaml", [SUM_TASK, wrong])
        spec = load_run_spec(write_run(tmp_path / "run.yaml", tasks, models))
        outcome = run_local(spec, tmp_path / "out", data_dir, progress=False)
    found = {}
    for result in outcome.results:
        record = (tmp_path / "out" / task_record_name("m", result.task_id, 0)).read_text()
        transcript = TaskResult.model_validate_json(record).transcript
        assert transcript is not None
        found[result.task_id] = (
            result.status,
            result.passed,
            result.coverage,
            transcript.messages,
            transcript.final_answer,
            (transcript.prompt_tokens, transcript.completion_tokens, transcript.cost_known),
        )
    return found


@pytest.mark.servers
def test_a_run_scores_the_same_on_both_paths(tmp_path: Path, data_dir: Path) -> None:
    runs = {}
    for path_ in PATHS:
        with pytest.MonkeyPatch.context() as patch:
            if path_ == "litellm":
                patch.setenv("ATLAS_PROVIDER", "litellm")
            (tmp_path / path_).mkdir()
            runs[path_] = _run(tmp_path / path_, data_dir)
    assert runs["direct"] == runs["litellm"]
    status, passed, coverage, messages, answer, usage = runs["direct"]["sum-numbers"]
    assert (status, passed, coverage, answer) == ("scored", True, 1.0, "The sum of the numbers is 42.")
    assert [m["role"] for m in messages] == ["user", "assistant", "tool", "assistant", "tool", "assistant"]
    assert usage == (30, 15, False)  # 3 calls of 10 + 5 tokens; no known price
    assert runs["direct"]["wrong"][:3] == ("scored", False, 0.0)


def _completion_body(text: str) -> bytes:
    message = {"role": "assistant", "content": text}
    return json.dumps({"choices": [{"index": 0, "message": message}], "model": "m"}).encode()


async def _framing_server(modes: list[str], seen: list[str]) -> asyncio.Server:
    """Answers request i in the way ``modes[i]`` names: chunked, close-delimited, or with a
    Content-Length after which the server drops the connection (an idle keep-alive timeout)."""

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:
            head = await reader.readuntil(b"\r\n\r\n") if not reader.at_eof() else b""
            if not head:
                break
            length = int(
                next(h for h in head.split(b"\r\n") if h.lower().startswith(b"content-length")).split(b":")[1]
            )
            await reader.readexactly(length)
            mode = modes[len(seen)]
            seen.append(mode)
            payload = _completion_body(mode)
            if mode == "chunked":
                chunks = [payload[:10], payload[10:]]
                framed = (
                    b"".join(b"%x;ext=1\r\n%s\r\n" % (len(c), c) for c in chunks)
                    + b"0\r\nx-trailer: 1\r\n\r\n"
                )
                writer.write(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n" + framed)
            elif mode == "close":
                writer.write(b"HTTP/1.1 200 OK\r\nconnection: close\r\n\r\n" + payload)
                await writer.drain()
                writer.close()
                return
            else:
                writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n\r\n%s" % (len(payload), payload))
                if mode == "then-idle-close":
                    await writer.drain()
                    writer.close()
                    return
            await writer.drain()

    return await asyncio.start_server(handle, "127.0.0.1", 0)


async def test_the_direct_path_reads_every_framing_and_survives_dropped_keepalives(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("ATLAS_PROVIDER", raising=False)
    modes = ["chunked", "chunked", "then-idle-close", "length", "close", "length"]
    seen: list[str] = []
    server = await _framing_server(modes, seen)
    port = server.sockets[0].getsockname()[1]
    endpoint = Endpoint("openai/framed", f"http://127.0.0.1:{port}/v1")
    answers = []
    for _ in modes:
        done = await complete(endpoint, [{"role": "user", "content": "q"}], retries=0, backoff_base_s=0)
        answers.append(done.message["content"])  # no pause: the next call may find the dropped
    server.close()  # connection still pooled, and must try again on a new one
    assert answers == modes == seen
    clients = provider_module._CLIENTS[asyncio.get_running_loop()][0]
    assert (
        clients.plain._idle and clients._httpx is None
    )  # all through http1.py  # each answered once: no request lost or sent twice


async def test_a_proxy_in_the_environment_sends_direct_calls_through_httpx(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from atlasrun import http1

    monkeypatch.delenv("ATLAS_PROVIDER", raising=False)
    monkeypatch.setenv("http_proxy", "http://127.0.0.1:9")  # nothing listens there
    monkeypatch.setenv("no_proxy", "127.0.0.1")  # ... and 127.0.0.1 bypasses it, as httpx reads it
    with ScriptedProvider(lambda body: Reply(content="via httpx")) as provider:
        assert not http1.usable_for(provider.api_base + "/chat/completions")
        done = await complete(
            Endpoint("openai/x", provider.api_base),
            [{"role": "user", "content": "q"}],
            retries=0,
            backoff_base_s=0,
        )
    assert done.message["content"] == "via httpx"
    assert provider_module._CLIENTS[asyncio.get_running_loop()][0]._httpx is not None
