"""Task files from a Hugging Face dataset: ``hf://OWNER/NAME[@REVISION]`` (e.g. ``hf://ScaleAI/MCP-Atlas``).

The hub's HTTP API, as ``huggingface_hub`` uses it (no dependency on it):

* ``GET {endpoint}/api/datasets/{id}`` (default branch) or ``.../revision/{rev}``, with
  ``?blobs=true``: the commit ``sha`` and ``siblings`` (``rfilename``, ``size``, ``blobId``,
  ``lfs.sha256``). Errors carry ``X-Error-Code`` (``RepoNotFound``, ``RevisionNotFound``,
  ``GatedRepo``); a missing repository is 401 when unauthenticated.
* ``GET {endpoint}/datasets/{id}/resolve/{sha}/{path}``: a file (often a redirect to a CDN;
  httpx drops the Authorization header on a cross-origin redirect).

``REVISION`` is a branch, a tag or a full 40-hex commit sha. A commit sha is immutable: once
cached it is used without asking the hub. A branch or tag (or no revision: the default branch) is
resolved to its current sha on every load; the files are downloaded only when that sha is not
cached yet. When the hub cannot be reached, the last copy cached for that name is used, with a
one-line note on stderr.

Files loaded: the data files (``.parquet``, else ``.jsonl``, else ``.csv``) of the default split:
``train`` if any file's path names a split (``data/train-00000-of-00001.parquet``,
``default/train/0000.parquet``), else every data file, concatenated in path order.

Cache (``ATLAS_HUB_CACHE``, default ``~/.cache/atlasrun/hub``)::

    datasets--OWNER--NAME/snapshots/SHA/files/PATH   the downloaded files (verified, renamed into place)
    datasets--OWNER--NAME/snapshots/SHA/manifest.json  written last: the snapshot is complete
    datasets--OWNER--NAME/refs/REVISION               the sha a name resolved to last (offline use)

``HF_ENDPOINT`` selects the hub (default https://huggingface.co); ``HF_TOKEN`` (or the legacy
``HUGGING_FACE_HUB_TOKEN``) is sent as a Bearer token, and is never written to a message or file.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import os
import re
import sys
import tempfile
import time
import urllib.parse
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ValidationError

from atlasrun.errors import InputError

if TYPE_CHECKING:
    import httpx

SCHEME = "hf://"
ENDPOINT_ENV = "HF_ENDPOINT"
DEFAULT_ENDPOINT = "https://huggingface.co"
TOKEN_ENVS = ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN")
CACHE_ENV = "ATLAS_HUB_CACHE"
DATA_SUFFIXES = (".parquet", ".jsonl", ".csv")  # preferred first; the loader reads each
DEFAULT_SPLIT = "train"
# Path words that name a split, as the `datasets` library's default data-file patterns read them.
SPLIT_WORDS = {
    "train": ("train", "training"),
    "validation": ("validation", "valid", "val", "dev"),
    "test": ("test", "testing", "eval", "evaluation"),
}
CONNECT_TIMEOUT_S = 3.0
READ_TIMEOUT_S = 30.0
RETRY_DELAYS_S = (0.5, 1.0)  # 5xx/429 only; Retry-After is honoured up to MAX_RETRY_AFTER_S
MAX_RETRY_AFTER_S = 5.0
_REPO_ID = re.compile(r"(?:[A-Za-z0-9][\w.-]{0,95}/)?[A-Za-z0-9][\w.-]{0,95}")
_COMMIT_SHA = re.compile(r"[0-9a-f]{40}")


def is_hub_source(text: str) -> bool:
    """True for an ``hf://`` task source (a dataset id rather than a local path)."""
    return text.startswith(SCHEME)


def hub_source(dataset: str) -> str:
    """``spec.tasks.dataset`` (``OWNER/NAME[@REV]``, with or without ``hf://``) as an ``hf://`` source."""
    return dataset if is_hub_source(dataset) else SCHEME + dataset


@dataclass(frozen=True)
class DatasetRef:
    repo_id: str
    revision: str | None  # None: the default branch

    @property
    def uri(self) -> str:
        return f"{SCHEME}{self.repo_id}" + (f"@{self.revision}" if self.revision else "")

    @property
    def pinned(self) -> bool:
        """A full commit sha: what it names never changes."""
        return self.revision is not None and _COMMIT_SHA.fullmatch(self.revision) is not None


def parse_source(source: str) -> DatasetRef:
    """``hf://OWNER/NAME[@REVISION]`` (also ``hf://datasets/OWNER/NAME``, the fsspec form)."""
    rest = source.removeprefix(SCHEME)
    repo_id, _, revision = rest.partition("@")
    repo_id = repo_id.removeprefix("datasets/")
    if (
        not _REPO_ID.fullmatch(repo_id)
        or "--" in repo_id
        or ".." in repo_id
        or (revision == "" and "@" in rest)
    ):
        raise InputError(
            "expected hf://OWNER/NAME or hf://OWNER/NAME@REVISION (a branch, tag or commit sha)", where=source
        )
    if revision and (any(ch.isspace() for ch in revision) or ".." in revision):
        raise InputError(f"not a revision name: {revision!r}", where=source)
    return DatasetRef(repo_id, revision or None)


def cache_root() -> Path:
    env = os.environ.get(CACHE_ENV)
    return Path(env).expanduser() if env else Path.home() / ".cache" / "atlasrun" / "hub"


class CachedFile(BaseModel):
    path: str  # in the repository
    size: int
    sha256: str


class CachedSnapshot(BaseModel):
    """``manifest.json`` of a complete cached snapshot (written after its files)."""

    dataset: str
    sha: str
    files: list[CachedFile]
    fetched_at: str


@dataclass(frozen=True)
class Snapshot:
    """The data files of one dataset commit, on local disk."""

    ref: DatasetRef
    sha: str
    files: list[tuple[str, Path]]  # (path in the repository, local copy), in load order
    fetched_at: str  # when it was downloaded (ISO 8601, UTC)

    @property
    def label(self) -> str:
        """How rows from it are named: ``hf://OWNER/NAME@SHA12``."""
        return f"{SCHEME}{self.ref.repo_id}@{self.sha[:12]}"


@dataclass(frozen=True)
class _Remote:
    path: str
    size: int | None
    sha256: str | None  # LFS files
    git_sha1: str | None  # other files: the git blob id


class _Unreachable(Exception):
    """The hub did not answer usefully (no connection, timeout, 5xx/429 after retries)."""


def _note(line: str) -> None:
    print(f"note: {line}", file=sys.stderr)


def fetch_dataset(source: str) -> Snapshot:
    """The dataset's data files, from the cache or downloaded into it. Raises ``InputError``."""
    ref = parse_source(source)
    store = _Store(cache_root(), ref)
    if ref.pinned:
        assert ref.revision is not None
        cached = store.snapshot(ref.revision)
        if cached is not None:
            return cached
    endpoint = os.environ.get(ENDPOINT_ENV, "").strip().rstrip("/") or DEFAULT_ENDPOINT
    token = next((os.environ[n].strip() for n in TOKEN_ENVS if os.environ.get(n, "").strip()), None)
    with _Hub(endpoint, token, ref) as hub:
        try:
            sha, siblings = hub.metadata()
        except _Unreachable as exc:
            fallback = None if ref.pinned else store.last_snapshot()
            if fallback is None:
                raise hub.error(
                    f"cannot reach the hub at {endpoint} ({exc}); set {ENDPOINT_ENV} to a reachable hub "
                    f"or mirror, or load it once while online (copies are cached under {store.root})"
                ) from exc
            _note(
                f"{ref.uri}: hub unreachable at {endpoint} ({exc}); using the cached copy of "
                f"{fallback.sha[:12]} (fetched {fallback.fetched_at})"
            )
            return fallback
        snapshot = store.snapshot(sha)
        if snapshot is None:
            remotes = _data_files(siblings, hub)
            total = sum(r.size or 0 for r in remotes)
            _note(f"{ref.uri}: downloading {len(remotes)} file(s) ({total / 1e6:.1f} MB) at {sha[:12]}")
            snapshot = store.save(
                sha, [(r, hub.download(sha, r, store.file_path(sha, r.path))) for r in remotes]
            )
    store.set_ref(sha)
    return snapshot


def _split_of(path: str) -> str | None:
    words = set(re.split(r"[^a-z]+", path.lower()))
    return next((split for split, names in SPLIT_WORDS.items() if words.intersection(names)), None)


def _data_files(siblings: list[Any], hub: _Hub) -> list[_Remote]:
    """The files of the default split in the preferred format, in path order."""
    remotes = [r for r in (_remote(s) for s in siblings) if r is not None]
    visible = [r for r in remotes if not any(part.startswith(".") for part in r.path.split("/"))]
    for suffix in DATA_SUFFIXES:
        files = sorted((r for r in visible if r.path.lower().endswith(suffix)), key=lambda r: r.path)
        if not files:
            continue
        splits = {r.path: _split_of(r.path) for r in files}
        named = sorted({s for s in splits.values() if s})
        if not named:
            return files
        chosen = DEFAULT_SPLIT if DEFAULT_SPLIT in named else named[0] if len(named) == 1 else None
        if chosen is None:
            raise hub.error(
                f"its {suffix} files name the splits {', '.join(named)} but no {DEFAULT_SPLIT!r} split; "
                "download the file you want and pass its path"
            )
        return [r for r in files if splits[r.path] == chosen]
    shown = ", ".join(r.path for r in remotes[:8]) + (" ..." if len(remotes) > 8 else "")
    raise hub.error(
        f"no task data files ({', '.join(DATA_SUFFIXES)}) in this revision; it has: {shown or 'no files'}"
    )


def _remote(sibling: Any) -> _Remote | None:
    if not isinstance(sibling, dict) or not isinstance(sibling.get("rfilename"), str):
        return None
    found = sibling.get("lfs")
    lfs: dict[str, Any] = found if isinstance(found, dict) else {}
    size = lfs.get("size", sibling.get("size"))
    sha256 = lfs.get("sha256")
    blob = sibling.get("blobId")
    return _Remote(
        path=sibling["rfilename"],
        size=size if isinstance(size, int) and not isinstance(size, bool) else None,
        sha256=sha256 if isinstance(sha256, str) else None,
        git_sha1=blob if isinstance(blob, str) and not lfs else None,
    )


class _Hub:
    """One HTTP client for one dataset: metadata, downloads, and errors that name the dataset."""

    def __init__(self, endpoint: str, token: str | None, ref: DatasetRef) -> None:
        import httpx

        self.endpoint, self.ref, self._token = endpoint, ref, token
        headers = {"user-agent": "atlasrun"} | ({"authorization": f"Bearer {token}"} if token else {})
        self._client = httpx.Client(
            headers=headers,
            timeout=httpx.Timeout(READ_TIMEOUT_S, connect=CONNECT_TIMEOUT_S),
            follow_redirects=True,
        )

    def __enter__(self) -> _Hub:
        return self

    def __exit__(self, *exc: object) -> None:
        self._client.close()

    def error(self, message: str) -> InputError:
        """An InputError about this dataset, with the token masked if anything echoed it."""
        if self._token:
            message = message.replace(self._token, "[REDACTED]")
        return InputError(message, where=self.ref.uri)

    def metadata(self) -> tuple[str, list[Any]]:
        """(commit sha, siblings) of the requested revision."""
        base = f"{self.endpoint}/api/datasets/{self.ref.repo_id}"
        if self.ref.revision:
            base += "/revision/" + urllib.parse.quote(self.ref.revision, safe="")
        with self._request(base, params={"blobs": "true"}) as response:
            response.read()
            self._raise_for_status(response)
            try:
                info = response.json()
            except ValueError as exc:
                raise self.error(
                    f"the hub at {self.endpoint} answered with something that is not JSON"
                ) from exc
        sha, siblings = (info.get("sha"), info.get("siblings")) if isinstance(info, dict) else (None, None)
        if not isinstance(sha, str) or not _COMMIT_SHA.fullmatch(sha) or not isinstance(siblings, list):
            raise self.error(f"the hub at {self.endpoint} answered without a commit sha and file list")
        if self.ref.pinned and sha != self.ref.revision:
            raise self.error(f"the hub resolved commit {self.ref.revision} to another commit ({sha})")
        return sha, siblings

    def download(self, sha: str, remote: _Remote, dest: Path) -> CachedFile:
        """Stream one file to ``dest`` (a temp file renamed into place once verified)."""
        url = f"{self.endpoint}/datasets/{self.ref.repo_id}/resolve/{sha}/{urllib.parse.quote(remote.path)}"
        try:
            dest.parent.mkdir(parents=True, exist_ok=True)
            fd, temp = tempfile.mkstemp(prefix=".part-", dir=dest.parent)
        except OSError as exc:
            raise self.error(f"cannot write the dataset cache {dest.parent}: {exc.strerror or exc}") from exc
        try:
            digest, size = hashlib.sha256(), 0
            known = remote.git_sha1 and remote.size is not None
            git = hashlib.sha1(f"blob {remote.size}\0".encode(), usedforsecurity=False) if known else None
            with os.fdopen(fd, "wb") as out, self._request(url) as response:
                self._raise_for_status(response, remote.path)
                for chunk in response.iter_bytes():
                    out.write(chunk)
                    digest.update(chunk)
                    if git:
                        git.update(chunk)
                    size += len(chunk)
            self._verify(remote, size, digest.hexdigest(), git.hexdigest() if git else None)
            os.replace(temp, dest)
        except OSError as exc:
            raise self.error(f"cannot write {dest}: {exc.strerror or exc}") from exc
        except _Unreachable as exc:
            raise self.error(f"downloading {remote.path} from {self.endpoint} failed: {exc}") from exc
        finally:
            Path(temp).unlink(missing_ok=True)
        return CachedFile(path=remote.path, size=size, sha256=digest.hexdigest())

    def _verify(self, remote: _Remote, size: int, sha256: str, git_sha1: str | None) -> None:
        problem = ""
        if remote.size is not None and size != remote.size:
            problem = f"{size} bytes, the hub lists {remote.size}"
        elif remote.sha256 and sha256 != remote.sha256:
            problem = f"sha256 {sha256[:12]}..., the hub lists {remote.sha256[:12]}..."
        elif git_sha1 is not None and git_sha1 != remote.git_sha1:
            problem = f"git blob {git_sha1}, the hub lists {remote.git_sha1}"
        if problem:
            raise self.error(f"{remote.path} arrived corrupted ({problem}); nothing was cached, try again")

    @contextmanager
    def _request(self, url: str, params: dict[str, str] | None = None) -> Iterator[httpx.Response]:
        """GET, retried a little on 5xx/429; raises _Unreachable on transport errors."""
        import httpx

        for attempt in range(len(RETRY_DELAYS_S) + 1):
            try:
                with self._client.stream("GET", url, params=params) as response:
                    retry = response.status_code == 429 or response.status_code >= 500
                    if not retry:
                        yield response
                        return
                    wait = self._retry_wait(response, attempt)
                    status = f"HTTP {response.status_code}"
            except httpx.TransportError as exc:
                raise _Unreachable(_transport_reason(exc)) from exc
            if wait is None:
                raise _Unreachable(f"{status} after {attempt + 1} attempt(s)")
            time.sleep(wait)

    @staticmethod
    def _retry_wait(response: httpx.Response, attempt: int) -> float | None:
        if attempt >= len(RETRY_DELAYS_S):
            return None
        try:
            after = float(response.headers.get("retry-after", ""))
        except ValueError:
            after = 0.0
        return min(max(after, RETRY_DELAYS_S[attempt]), MAX_RETRY_AFTER_S)

    def _raise_for_status(self, response: httpx.Response, path: str | None = None) -> None:
        status = response.status_code
        if status < 400:
            return
        code = response.headers.get("x-error-code", "")
        hint = (
            f"set {TOKEN_ENVS[0]} to a token with access"
            if not self._token
            else (f"the token in {TOKEN_ENVS[0]}/{TOKEN_ENVS[1]} was refused or has no access")
        )
        if code == "RevisionNotFound" or (
            status in (400, 404) and self.ref.revision and not code and path is None
        ):
            raise self.error(
                f"revision {self.ref.revision!r} not found (use a branch, tag or full commit sha of the dataset)"
            )
        if code == "GatedRepo" or status == 403:
            raise self.error(
                f"the dataset is gated or forbidden on {self.endpoint}: accept its terms there; {hint}"
            )
        if path is not None and status == 404:
            raise self.error(f"{path} is listed but cannot be downloaded (HTTP 404)")
        if code == "RepoNotFound" or status in (401, 404):
            raise self.error(f"dataset not found on {self.endpoint} (or private/gated: {hint})")
        raise self.error(
            f"the hub at {self.endpoint} answered HTTP {status}" + (f" for {path}" if path else "")
        )


def _transport_reason(exc: Exception) -> str:
    reason = str(exc) or type(exc).__name__
    return reason if len(reason) <= 160 else reason[:160] + "..."


class _Store:
    """The cache directory of one dataset."""

    def __init__(self, root: Path, ref: DatasetRef) -> None:
        self.ref = ref
        self.root = root / ("datasets--" + ref.repo_id.replace("/", "--"))

    def file_path(self, sha: str, path: str) -> Path:
        local = self.root / "snapshots" / sha / "files" / path
        if ".." in Path(path).parts or Path(path).is_absolute():
            raise InputError(f"the hub listed an unsafe file path {path!r}", where=self.ref.uri)
        return local

    def _manifest(self, sha: str) -> Path:
        return self.root / "snapshots" / sha / "manifest.json"

    def _ref_file(self) -> Path:
        return self.root / "refs" / urllib.parse.quote(self.ref.revision or "HEAD", safe="")

    def snapshot(self, sha: str) -> Snapshot | None:
        """The complete cached snapshot of ``sha`` (files present at their sizes), or None."""
        try:
            manifest = CachedSnapshot.model_validate_json(self._manifest(sha).read_bytes())
        except (OSError, ValidationError):
            return None
        files = [(f.path, self.file_path(sha, f.path)) for f in manifest.files]
        try:
            if any(
                local.stat().st_size != f.size for f, (_, local) in zip(manifest.files, files, strict=True)
            ):
                return None
        except OSError:
            return None
        return Snapshot(self.ref, sha, files, manifest.fetched_at)

    def last_snapshot(self) -> Snapshot | None:
        """The snapshot this dataset name (and revision) resolved to last time, for offline use."""
        try:
            sha = self._ref_file().read_text(encoding="utf-8").strip()
        except OSError:
            return None
        return self.snapshot(sha) if _COMMIT_SHA.fullmatch(sha) else None

    def save(self, sha: str, files: list[tuple[_Remote, CachedFile]]) -> Snapshot:
        manifest = CachedSnapshot(
            dataset=self.ref.repo_id,
            sha=sha,
            files=[cached for _, cached in files],
            fetched_at=dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        )
        self._write(self._manifest(sha), manifest.model_dump_json(indent=2))
        return Snapshot(
            self.ref, sha, [(c.path, self.file_path(sha, c.path)) for _, c in files], manifest.fetched_at
        )

    def set_ref(self, sha: str) -> None:
        if not self.ref.pinned:
            self._write(self._ref_file(), sha + "\n")

    def _write(self, path: Path, text: str) -> None:
        temp: str | None = None
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            fd, temp = tempfile.mkstemp(prefix=".part-", dir=path.parent)
            with os.fdopen(fd, "w", encoding="utf-8") as out:
                out.write(text)
            os.replace(temp, path)
            temp = None
        except OSError as exc:
            raise InputError(
                f"cannot write the dataset cache {path}: {exc.strerror or exc}", where=self.ref.uri
            ) from exc
        finally:
            if temp is not None:
                Path(temp).unlink(missing_ok=True)
