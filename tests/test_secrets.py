"""The sentinel test: secrets never reach any file a run writes, nor the command's output.

Every secret env var is set to a unique sentinel (one with ``"`` and ``\\``, one with URL/HTML
specials). The run goes through a provider 401 whose body echoes the key, a model that prints both
keys in its answer, a judge 401 echoing the judge key, then ``atlas diagnose`` (its judge 401s too)
and ``atlas report``. Every file under the results directory and everything the commands printed
is scanned for each sentinel's distinctive core (so any encoding, or half a key, is a hit).
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import json
import os
import re
import subprocess
import sys
import urllib.parse
from pathlib import Path
from typing import Any

import pytest

from atlasrun.redact import MASK, scrub, variants
from atlasrun.servers.catalog import load_catalog
from atlasrun.testing.scripted_provider import Reply, ScriptedProvider, tool_call
from conftest import SUM_TASK, write_run, write_tasks
from test_run_task import BUCKET, pod_env, run_task, s3, sidecar  # noqa: F401 - fixtures

# The cores contain no character any encoding changes: finding one means a leak in some form.
MODEL_CORE, JUDGE_CORE = "SNTLmodel7f3a9d2e", "SNTLjudge41c8e5a0"
MODEL_KEY = f'sk-{MODEL_CORE}"quote\\back'
JUDGE_KEY = f"jk-{JUDGE_CORE}&<b>%2F+ 100%"
# Names that do not look secret: they are masked because the run declares them.
MODEL_ENV, JUDGE_ENV = "ATLAS_SENTINEL_M", "ATLAS_SENTINEL_J"


def echo_401(key: str) -> Any:
    def script(body: dict[str, Any]) -> Reply:
        error = {"message": f"Incorrect API key provided: {key}", "type": "invalid_request_error", "key": key}
        return Reply(status=401, raw_body=json.dumps({"error": error}))

    return script


def leaky_answer(body: dict[str, Any]) -> Reply:
    return Reply(content=f"I cannot sum that. Keys I know: {MODEL_KEY} and {JUDGE_KEY}")


def test_redaction_masks_every_encoded_form(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SOME_API_KEY", MODEL_KEY)
    for form in variants(MODEL_KEY):
        assert scrub(f"x {form} y") == f"x {MASK} y", form
    double = json.dumps(json.dumps({"key": MODEL_KEY}))  # a JSON body quoted inside a JSON record
    assert MODEL_CORE not in scrub(double)


@pytest.mark.servers
def test_sentinel_secrets_appear_nowhere(tmp_path: Path, data_dir: Path) -> None:
    env = {**os.environ, MODEL_ENV: MODEL_KEY, JUDGE_ENV: JUDGE_KEY}
    out = tmp_path / "out"
    printed: list[str] = []

    def atlas(*args: str) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(
            [sys.executable, "-m", "atlasrun.cli", *args],
            capture_output=True,
            text=True,
            env=env,
            timeout=600,
        )
        printed.extend([done.stdout, done.stderr])
        assert "Traceback" not in done.stderr, done.stderr
        return done

    with (
        ScriptedProvider(echo_401(MODEL_KEY)) as rejecting,
        ScriptedProvider(leaky_answer) as leaky,
        ScriptedProvider(echo_401(JUDGE_KEY)) as judge,
    ):
        models = [
            {"name": name, "model": f"openai/{name}", "apiBase": provider.api_base, "apiKeyEnv": MODEL_ENV}
            for name, provider in (("rejecting", rejecting), ("leaky", leaky))
        ]
        judges = [
            {"name": "deterministic"},
            # the deterministic judge's fallback (its abstentions only); "llm" labels every claim
            {"name": "fallback", "model": "openai/judge", "apiBase": judge.api_base, "apiKeyEnv": JUDGE_ENV},
            {"name": "llm", "model": "openai/judge", "apiBase": judge.api_base, "apiKeyEnv": JUDGE_ENV},
        ]
        run_file = write_run(
            tmp_path / "run.yaml",
            write_tasks(tmp_path / "tasks.yaml", [SUM_TASK]),
            models,
            judges=judges,
            limits={"retryBackoffSeconds": 0, "judgeRetries": 0},
        )
        # the pre-flight would stop at the rejecting model: --no-preflight, so every writer is exercised
        atlas(
            "run", str(run_file), "--data-dir", str(data_dir), "--out", str(out), "--quiet", "--no-preflight"
        )
        diagnosed = atlas(
            "diagnose",
            str(out),
            "--judge",
            "openai/diag",
            "--judge-api-base",
            judge.api_base,
            "--judge-api-key-env",
            JUDGE_ENV,
            "--retries",
            "0",
        )
        assert diagnosed.returncode == 0, diagnosed.stderr
        assert atlas("report", str(out)).returncode == 0

    # The faults really happened, and their text (with the key masked) was written.
    results = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    by_model = {r["model"]: r for r in results}
    assert by_model["rejecting"]["status"] == "error"
    assert f"Incorrect API key provided: {MASK}" in by_model["rejecting"]["reason"]
    assert by_model["leaky"]["status"] == "scored" and by_model["leaky"]["passed"] is False
    assert "judge" in json.dumps(by_model["leaky"]["secondary"])
    assert "failed" in (out / "diagnoses.jsonl").read_text()
    assert len(judge.requests) >= 2  # the claims judge and the diagnostic judge both hit the 401
    written = {p: p.read_bytes().decode("utf-8", "replace") for p in out.rglob("*") if p.is_file()}
    assert {"results.jsonl", "summary.json", "diagnoses.jsonl", "report.html"} <= {p.name for p in written}
    assert any(MASK in text for text in written.values())

    leaks = [
        f"{where}: {core}"
        for where, text in [*((str(p), t) for p, t in written.items()), *(("output", t) for t in printed)]
        for core in (MODEL_CORE, JUDGE_CORE)
        if core in text
    ]
    assert leaks == []


@pytest.mark.servers
def test_sentinel_never_reaches_s3_objects_or_the_pod_summary(
    tmp_path: Path,
    s3: Any,  # noqa: F811
    sidecar: int,  # noqa: F811
) -> None:
    """``atlas run-task`` (cluster mode): the provider's 401 echoes the key; nothing stored or
    printed carries it (S3 objects, termination message, output, the pod's work dir)."""
    with ScriptedProvider(echo_401(MODEL_KEY)) as provider:
        env = pod_env(tmp_path, s3, provider, sidecar, SOLVER_KEY=MODEL_KEY)
        proc = run_task(env)
    assert provider.requests, proc.stderr
    client = s3.client()
    objects = {
        o["Key"]: client.get_object(Bucket=BUCKET, Key=o["Key"])["Body"].read().decode()
        for o in client.list_objects_v2(Bucket=BUCKET).get("Contents", [])
    }
    assert objects, proc.stderr  # the error result was stored
    assert any(f"Incorrect API key provided: {MASK}" in body for body in objects.values())
    texts = {
        **objects,
        "stdout": proc.stdout,
        "stderr": proc.stderr,
        "termination": Path(env["ATLAS_TERMINATION_PATH"]).read_text(),
        **{
            str(p): p.read_text("utf-8", "replace")
            for p in Path(env["ATLAS_WORK_DIR"]).rglob("*")
            if p.is_file()
        },
    }
    assert [where for where, text in texts.items() if MODEL_CORE in text] == []


# Task code's encodings of a secret (issue 24): the secret has only letters and digits, so a leak
# is found by decoding what was written, independently of how redact.py builds its patterns.
TASK_SECRET = "SNTLtask3e8b1f07c2d94a56"
TASK_ENV = "ATLAS_TASK_SENTINEL"  # a name that does not look secret: masked because it is declared
ENCODE_ALL = "\n".join(
    [
        f'export S="${TASK_ENV}"',
        'printf %s "$S" | base64 -w0; echo',
        'printf %s "$S" | basenc --base64url -w0; echo',
        'printf %s "$S" | od -An -tx1 | tr -d " \\n"; echo',
        'printf %s "$S" | od -An -tx1 | tr -d " \\n" | tr a-f A-F; echo',
        'printf %s "$S" | rev; echo',
        "python3 -c \"import os, urllib.parse as u; s = os.environ['S']; "
        "print(u.quote(s, safe='')); print(''.join('%%%02x' % b for b in s.encode()))\"",
        "for pad in '' a ab; do printf '%s' \"$pad\"; tr '\\0' '\\n' < /proc/self/environ; done | base64 -w0; echo",
        "tr '\\0' '\\n' < /proc/self/environ | basenc --base64url -w0; echo",
    ]
)


def decoded_texts(text: str) -> list[bytes]:
    """Every base64/base64url/hex run in ``text`` decoded at every alignment, and ``text`` reversed
    and URL-decoded: where an encoded secret would show."""
    found = [text[::-1].encode(), urllib.parse.unquote(text).encode()]
    for run in re.findall(r"[A-Za-z0-9+/_-]{8,}", text):
        for start in range(4):
            chunk = run[start:]
            chunk = chunk[: len(chunk) - len(chunk) % 4]
            for alphabet in (None, b"-_"):
                try:
                    found.append(base64.b64decode(chunk, altchars=alphabet))
                except (binascii.Error, ValueError):
                    pass
    for run in re.findall(r"[0-9A-Fa-f]{8,}", text):
        for start in (0, 1):
            with contextlib.suppress(ValueError):
                found.append(bytes.fromhex(run[start : len(run) - (len(run) - start) % 2]))
    return found


def test_redaction_masks_the_encodings_task_code_may_use(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SOME_API_KEY", TASK_SECRET)
    raw = TASK_SECRET.encode()
    forms = [
        base64.b64encode(raw).decode(),
        base64.urlsafe_b64encode(raw).decode().rstrip("="),
        raw.hex(),
        raw.hex().upper(),
        TASK_SECRET[::-1],
        "".join(f"%{b:02x}" for b in raw),
        json.dumps(base64.b64encode(raw).decode()),
    ]
    for pad in (b"", b"a", b"ab", b"abc"):  # inside a longer encoded text, at every alignment
        blob = pad + b"PATH=/usr/bin\nSOME_API_KEY=" + raw + b"\nLANG=C.UTF-8\n"
        forms += [base64.b64encode(blob).decode(), base64.urlsafe_b64encode(blob).decode()]
    for form in forms:
        masked = scrub(f"out: {form} :end")
        assert MASK in masked, form
        assert not any(raw in text for text in decoded_texts(masked)), (form, masked)
    assert scrub("an ordinary line of output") == "an ordinary line of output"


@pytest.mark.servers
def test_task_code_cannot_write_a_declared_secret_encoded(tmp_path: Path, data_dir: Path) -> None:
    """A server given the secret through ``secrets:`` runs task code that prints it base64,
    base64url, hex, reversed and URL-encoded, and its whole environment base64-encoded: no file
    of the run, nor its output, holds the secret in any of these forms."""
    entry = load_catalog().get("code-runner").model_dump(mode="json", exclude_defaults=True)
    task = {
        "id": "encode",
        "prompt": "Print the secret encoded.",
        "enabled_tools": ["code-runner_run-code"],
        "claims": ["The output is done"],
        "reference_trajectory": [
            {
                "calls": [
                    {
                        "name": "code-runner_run-code",
                        "arguments": {"code": ENCODE_ALL, "languageId": "shellscript"},
                    }
                ]
            }
        ],
    }

    def script(body: dict[str, Any]) -> Reply:
        results = [m for m in body["messages"] if m["role"] == "tool"]
        if not results:
            return Reply(
                tool_calls=[
                    tool_call("code-runner_run-code", {"code": ENCODE_ALL, "languageId": "shellscript"})
                ]
            )
        return Reply(content="The output is done.")

    out = tmp_path / "out"
    with ScriptedProvider(script) as provider:
        run = write_run(
            tmp_path / "run.yaml",
            write_tasks(tmp_path / "tasks.yaml", [task]),
            [{"name": "m", "model": "openai/m", "apiBase": provider.api_base}],
            servers={"inline": [{**entry, "secrets": [TASK_ENV]}]},
        )
        proc = subprocess.run(
            [sys.executable, "-m", "atlasrun.cli", "run", str(run), "--data-dir", str(data_dir), "--out", str(out),
             "--no-preflight"],
            capture_output=True, text=True, timeout=300, env={**os.environ, TASK_ENV: TASK_SECRET, "ATLAS_SERVER_SECRETS": TASK_ENV},  # the host grants it
        )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    seen = str(provider.requests[-1]["messages"])  # the model saw the encodings (masking is on write)
    assert base64.b64encode(TASK_SECRET.encode()).decode() in seen and TASK_SECRET[::-1] in seen
    written = {str(p): p.read_text("utf-8", "replace") for p in out.rglob("*") if p.is_file()}
    assert any(MASK in text for text in written.values())
    raw = TASK_SECRET.encode()
    leaks = [
        where
        for where, text in [*written.items(), ("stdout", proc.stdout), ("stderr", proc.stderr)]
        if any(raw in decoded for decoded in decoded_texts(text)) or TASK_SECRET in text
    ]
    assert leaks == []
