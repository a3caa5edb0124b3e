"""Task code stays in the sandbox; server processes and scratch files die with the runner.

The code-executing servers (code-runner, cli-mcp-server) are driven through the real
harness: ``atlas run`` in a subprocess whose environment holds a sentinel secret, a
scripted model on 127.0.0.1 asking the tools to read, write and connect where they
must not. The same probe run with the sandbox off (``ATLAS_BWRAP=`` plus
``--unsafe-host-exec``) does reach the secrets, so the probe is known to work.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from atlasrun.redact import SECRET_NAME
from atlasrun.scoring.result import TaskResult
from atlasrun.scoring.store import task_record_name
from atlasrun.servers.catalog import load_catalog
from atlasrun.servers.instance import ServerInstance, ServerStartError
from atlasrun.servers.sandbox import Sandbox
from atlasrun.servers.scratch import new_scratch, scratch_root, sweep_stale
from atlasrun.testing.scripted_provider import Reply, ScriptedProvider, tool_call
from conftest import write_run, write_tasks

pytestmark = pytest.mark.servers

ATLAS = str(Path(sys.executable).with_name("atlas"))
SENTINEL = f"sentinel-{uuid.uuid4().hex}"


def tool_results(body: dict[str, Any]) -> list[str]:
    return [str(m.get("content")) for m in body["messages"] if m["role"] == "tool"]


@pytest.fixture
def listener() -> Iterator[socket.socket]:
    """A TCP listener on 127.0.0.1 that the task code must not reach."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(8)
        sock.setblocking(False)
        yield sock


def accepted(sock: socket.socket) -> int:
    count = 0
    while True:
        try:
            conn, _ = sock.accept()
        except BlockingIOError:
            return count
        conn.close()
        count += 1


@pytest.fixture
def secrets(tmp_path: Path) -> Iterator[dict[str, Path]]:
    """Files the task code must not read (one beside the data dir, one under $HOME) or create."""
    home_file = Path.home() / f".atlas-sandbox-test-{uuid.uuid4().hex}"
    paths = {
        "outside": tmp_path / "outside.txt",
        "home": home_file,
        "escape_tmp": tmp_path / "escaped.txt",
        "escape_home": home_file.with_name(home_file.name + ".escaped"),
    }
    paths["outside"].write_text(f"outside {SENTINEL}\n")
    paths["home"].write_text(f"home {SENTINEL}\n")
    try:
        yield paths
    finally:
        for path in paths.values():
            path.unlink(missing_ok=True)


def shell_probe(runner_pid: int, paths: dict[str, Path], port: int) -> str:
    """code-runner (bash): read the runner's secrets, write outside, connect out, use /data."""
    return "\n".join(
        [
            "exec 2>&1",
            f"for f in /proc/{runner_pid}/environ /proc/1/environ {paths['outside']} {paths['home']}; do",
            '  echo "read $f:"; tr "\\0" " " < "$f"; echo',
            "done",
            'echo "env:"; env',
            f"echo x > {paths['escape_tmp']}; echo x > {paths['escape_home']}",
            f"(exec 3<>/dev/tcp/127.0.0.1/{port}) && echo tcp=connected || echo tcp=denied",
            "echo data:; cat /data/numbers.txt",
        ]
    )


def python_probe(runner_pid: int, paths: dict[str, Path], port: int) -> str:
    """cli-mcp-server (python3 -c, no shell operators allowed): the same probe."""
    code = "\n".join(
        [
            "import os, socket",
            f"for p in ['/proc/{runner_pid}/environ', '/proc/1/environ', '{paths['outside']}', "
            f"'{paths['home']}']:",
            "    try: print('read', p, open(p, 'rb').read())",
            "    except OSError as e: print('read', p, 'denied', e.errno)",
            "print('env', dict(os.environ))",
            f"for p in ['{paths['escape_tmp']}', '{paths['escape_home']}', '/data/made.txt']:",
            "    try: open(p, 'w').write('x'), print('wrote', p)",
            "    except OSError as e: print('nowrite', p, e.errno)",
            "s = socket.socket()",
            f"try: s.connect(('127.0.0.1', {port})), print('tcp=connected')",
            "except OSError: print('tcp=denied')",
            "print('data', open('/data/numbers.txt').read().split())",
        ]
    )
    return f'python3 -c "{code}"'


PROBE_TASK = {
    "id": "probe",
    "prompt": "Look around.",
    "enabled_tools": ["code-runner_run-code", "cli-mcp-server_run_command"],
    "claims": ["The numbers are 12 and 30"],
    "reference_trajectory": [
        {
            "calls": [
                {"name": "code-runner_run-code", "arguments": {"code": "true", "languageId": "shellscript"}}
            ]
        }
    ],
}


def scripted_run(tmp_path: Path, task: dict[str, Any], model: str, provider: ScriptedProvider) -> Path:
    """A run file for ``task`` and one scripted model."""
    return write_run(
        tmp_path / "run.yaml",
        write_tasks(tmp_path / "tasks.yaml", [task]),
        [{"name": model, "model": f"openai/{model}", "apiBase": provider.api_base}],
    )


def run_probe(tmp_path: Path, data_dir: Path, paths: dict[str, Path], port: int, *extra: str) -> list[str]:
    """``atlas run`` (a subprocess holding the sentinel) with a model that runs both probes."""
    runner: dict[str, int] = {}

    def script(body: dict[str, Any]) -> Reply:
        done = tool_results(body)
        pid = runner["pid"]
        if not done:
            code = shell_probe(pid, paths, port)
            return Reply(
                tool_calls=[tool_call("code-runner_run-code", {"code": code, "languageId": "shellscript"})]
            )
        if len(done) == 1:
            command = python_probe(pid, paths, port)
            return Reply(tool_calls=[tool_call("cli-mcp-server_run_command", {"command": command})])
        return Reply(content="The numbers are 12 and 30.")

    with ScriptedProvider(script) as provider:
        run_file = scripted_run(tmp_path, PROBE_TASK, "prober", provider)
        # Secret-looking variables other tests' fixtures export (AWS_SECRET_ACCESS_KEY, ...) would be
        # redacted in the stored transcript but not in what the unconfined probe showed the model.
        env = {k: v for k, v in os.environ.items() if not SECRET_NAME.search(k)}
        env["ATLAS_SANDBOX_SENTINEL"] = SENTINEL
        proc = subprocess.Popen(
            [ATLAS, "run", str(run_file), "--data-dir", str(data_dir), "--out", str(tmp_path / "out"), "--quiet",
             "--no-preflight", *extra],  # the script answers the task, not a pre-flight call
            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        )  # fmt: skip
        runner["pid"] = proc.pid
        output, _ = proc.communicate(timeout=300)
    assert proc.returncode == 0, output
    record = TaskResult.model_validate_json(
        (tmp_path / "out" / task_record_name("prober", "probe", 0)).read_text()
    )
    assert record.transcript is not None
    results = [c.result for c in record.transcript.calls]
    assert len(results) == 2 and results == tool_results(provider.requests[-1]), output
    return results


def test_task_code_cannot_read_secrets_write_outside_or_connect(
    tmp_path: Path, data_dir: Path, secrets: dict[str, Path], listener: socket.socket
) -> None:
    port = listener.getsockname()[1]
    shell, python = run_probe(tmp_path, data_dir, secrets, port)
    for text in (shell, python):
        assert SENTINEL not in text  # not via /proc/<runner>/environ, /proc/1/environ, env or files
        assert "ATLAS_SANDBOX_SENTINEL" not in text
    assert "environ: No such file or directory" in shell  # the runner is not even visible
    assert "tcp=denied" in shell and "tcp=denied" in python
    assert accepted(listener) == 0
    assert not secrets["escape_tmp"].exists() and not secrets["escape_home"].exists()
    # The tools still work on the data root: read it (both), write the private copy (cli-mcp-server).
    assert "data:\n12\n30" in shell
    assert "data ['12', '30']" in python and "wrote /data/made.txt" in python
    assert not (data_dir / "made.txt").exists()  # the write went to the task's private copy


def test_the_same_probe_unconfined_does_leak(
    tmp_path: Path,
    data_dir: Path,
    secrets: dict[str, Path],
    listener: socket.socket,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Control: without the sandbox (explicitly allowed) the probe reaches every secret."""
    monkeypatch.setenv("ATLAS_BWRAP", "")
    port = listener.getsockname()[1]
    shell, python = run_probe(tmp_path, data_dir, secrets, port, "--unsafe-host-exec")
    assert f"ATLAS_SANDBOX_SENTINEL={SENTINEL}" in shell  # read from /proc/<runner pid>/environ
    assert f"outside {SENTINEL}" in shell and f"home {SENTINEL}" in python
    assert "tcp=connected" in shell and accepted(listener) >= 1
    assert secrets["escape_tmp"].exists()


def test_without_bwrap_code_servers_refuse_and_name_the_flag(
    tmp_path: Path, data_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ATLAS_BWRAP", "")
    run_file = write_run(
        tmp_path / "run.yaml", write_tasks(tmp_path / "tasks.yaml", [PROBE_TASK]), [{"name": "replay"}]
    )
    proc = subprocess.run(
        [ATLAS, "run", str(run_file), "--data-dir", str(data_dir), "--out", str(tmp_path / "out"), "--quiet"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 2, proc.stderr
    assert "--unsafe-host-exec" in proc.stderr and "'cli-mcp-server', 'code-runner'" in proc.stderr
    assert "bwrap not found" in proc.stderr and "Traceback" not in proc.stderr
    assert not (tmp_path / "out" / "results.jsonl").exists()  # refused before any work


async def test_without_bwrap_no_server_runs_unless_the_host_allows_it(
    data_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Code or not, no server process runs unconfined without --unsafe-host-exec; allowed, with a warning."""
    catalog = load_catalog()
    for name in ("cli-mcp-server", "calculator"):
        with pytest.raises(ServerStartError, match="--unsafe-host-exec"):
            await ServerInstance(catalog.get(name), data_dir, "/data", sandbox=Sandbox(bwrap=None)).start()
    unconfined = Sandbox(allow_host_exec=True, bwrap=None)
    instance = await ServerInstance(catalog.get("calculator"), data_dir, "/data", sandbox=unconfined).start()
    try:
        assert await instance.call("calculate", {"expression": "6*7"}, 30) == ("42", False)
    finally:
        await instance.stop()
    assert "warning: server 'calculator' runs unconfined" in capsys.readouterr().err


def test_servers_check_works_sandboxed() -> None:
    names = ["code-runner", "cli-mcp-server", "git", "calculator-http"]
    proc = subprocess.run(
        [ATLAS, "servers", "check", *names, "--json"], capture_output=True, text=True, timeout=300
    )
    rows = json.loads(proc.stdout)
    assert proc.returncode == 0 and [r["server"] for r in rows] == names, proc.stdout + proc.stderr
    assert all(r["ok"] and "tool error" not in r["message"] for r in rows), rows


def descendants(root: int) -> dict[int, str]:
    """Every live process below ``root`` (pid -> command line), found by walking /proc."""
    parent: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                parent[int(entry.name)] = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
    found, frontier = {}, [root]
    while frontier:
        pid = frontier.pop()
        for child, ppid in parent.items():
            if ppid == pid and child not in found:
                found[child] = cmdline(child)
                frontier.append(child)
    return found


def cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def exe(pid: int) -> str:
    """The program ``pid`` runs, without a version suffix (``python3.11`` -> ``python``)."""
    return Path(f"/proc/{pid}/exe").resolve().name.rstrip("0123456789.")


def ns_pids(pid: int) -> list[int]:
    """``pid``'s pid in each PID namespace it is in, outermost first (``NSpid``)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("NSpid:"):
            return [int(p) for p in line.split()[1:]]
    raise AssertionError(f"no NSpid in /proc/{pid}/status")


def server_chain(command: str) -> tuple[dict[int, str], list[int]]:
    """This process's descendants, and the chain of them from its child down to the process
    that runs ``command`` (the server itself, not a bwrap whose command line names it)."""
    tree = descendants(os.getpid())
    found = [p for p, line in tree.items() if Path(command).name in line and exe(p) != "bwrap"]
    assert len(found) == 1, tree
    path, pid = [found[0]], found[0]
    while (parent := int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])) in tree:
        path.insert(0, parent)
        pid = parent
    return tree, path


@pytest.mark.parametrize(
    ("server", "chain"),
    [
        ("filesystem", ["bwrap", "node"]),
        ("git", ["bwrap", "python"]),
        ("cli-mcp-server", ["bwrap", "bwrap", "python"]),
    ],
)
async def test_a_server_runs_in_its_own_pid_namespace_and_dies_with_it(
    data_dir: Path, server: str, chain: list[str]
) -> None:
    """A server that runs no task code is PID 1 of a new PID namespace right under one bwrap;
    a code-executing one runs under bwrap's reaper (PID 1, which reaps what the code leaves).
    Both see no process of the host's, and stopping the instance ends every process."""
    spec = load_catalog().get(server)
    if server == "git":
        subprocess.run(["git", "init", "-q"], cwd=data_dir, check=True, env={"PATH": os.environ["PATH"]})
    instance = await ServerInstance(spec, data_dir, "/data").start()
    try:
        tree, path = server_chain(str(spec.command))
        leaf = path[-1]
        names = [exe(p) for p in path]
        assert names == chain, (names, tree)
        assert ns_pids(leaf)[-1] == (1 if len(chain) == 2 else 2)  # PID 1, or 2 under the reaper
        assert os.readlink(f"/proc/{leaf}/ns/pid") != os.readlink("/proc/self/ns/pid")
        if spec.executes_code:  # the code sees its sandbox's processes only: reaper, server, itself
            code = "import os\nprint('pids', *sorted(int(p) for p in os.listdir('/proc') if p.isdigit()))"
            text, is_error = await instance.call("run_command", {"command": f'python3 -c "{code}"'}, 30)
            first = text.split("\n", 1)[0].split()
            visible = [int(p) for p in first[1:]] if first[:1] == ["pids"] else first
            assert not is_error and visible[:2] == [1, 2] and len(visible) == 3, text
    finally:
        await instance.stop()
    deadline = time.monotonic() + 30  # a deadline for the kernel to reap, not a timing assertion
    while any(alive(p) for p in path) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not [p for p in path if alive(p) and cmdline(p) == tree[p]]


async def test_a_bwrap_without_as_pid_1_runs_every_server_under_its_reaper(
    data_dir: Path, tmp_path: Path
) -> None:
    """An older bwrap whose ``--help`` does not list ``--as-pid-1``: the option is not passed,
    the server runs under bwrap's reaper as before (and starts)."""
    real = shutil.which("bwrap")
    assert real
    old = tmp_path / "old-bwrap"
    old.write_text(
        f'#!/bin/sh\n[ "$1" = --help ] && {{ {real} --help | grep -v -e --as-pid-1; exit 0; }}\nexec {real} "$@"\n'
    )
    old.chmod(0o755)
    spec = load_catalog().get("filesystem")
    instance = await ServerInstance(spec, data_dir, "/data", sandbox=Sandbox(bwrap=str(old))).start()
    try:
        _, path = server_chain(str(spec.command))
        assert [exe(p) for p in path] == ["bwrap", "bwrap", "node"]
        assert ns_pids(path[-1])[-1] == 2
        assert (await instance.call("list_allowed_directories", {}, 30))[1] is False
    finally:
        await instance.stop()


@pytest.fixture
def private_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A TMPDIR of this test's own, for it and the runs it starts: another run on the machine
    (a parallel test session) sweeps the shared scratch root of every dead owner."""
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    monkeypatch.setenv("TMPDIR", str(tmp))
    monkeypatch.setattr(tempfile, "tempdir", str(tmp))
    return tmp


@pytest.mark.parametrize("confined", [True, False], ids=["bwrap", "unconfined"])
def test_kill_9_of_the_runner_leaves_no_server_and_the_next_run_sweeps_its_scratch(
    tmp_path: Path, data_dir: Path, confined: bool, monkeypatch: pytest.MonkeyPatch, private_tmp: Path
) -> None:
    """Under bwrap --die-with-parent ends the sandbox; unconfined, PR_SET_PDEATHSIG (setpriv) does."""
    flags = [] if confined else ["--unsafe-host-exec"]
    if not confined:
        monkeypatch.setenv("ATLAS_BWRAP", "")
    task = {
        "id": "hold",
        "prompt": "Wait.",
        "enabled_tools": [
            "filesystem_read_text_file", "memory_read_graph", "calculator_calculate", "code-runner_run-code",
            "everything_echo", "calculator-http_calculate",
        ],
        "claims": ["done"],
        "reference_trajectory": [{"calls": [{"name": "calculator_calculate", "arguments": {"expression": "1"}}]}],
    }  # fmt: skip
    asked, release = threading.Event(), threading.Event()

    def script(body: dict[str, Any]) -> Reply:
        asked.set()  # the task's servers are all up before the model is first asked
        release.wait(120)
        return Reply(content="done")

    with ScriptedProvider(script) as provider:
        run_file = scripted_run(tmp_path, task, "slow", provider)
        out = tmp_path / "out"
        proc = subprocess.Popen(
            [ATLAS, "run", str(run_file), "--data-dir", str(data_dir), "--out", str(out), "--quiet",
             "--no-preflight", *flags],  # `asked` must mean the task's servers are up
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        try:
            assert asked.wait(240), "the run never reached the model"
            servers = descendants(proc.pid)
            owned = [p for p in scratch_root().iterdir() if p.name.startswith(f"{proc.pid}.")]
            proc.send_signal(signal.SIGKILL)
            proc.wait(30)
        finally:
            release.set()
            if proc.poll() is None:
                proc.kill()
    for name in ("mcp-server-filesystem", "mcp-server-memory", "mcp-server-calculator", "mcp-server-code-runner",
                 "mcp-server-everything", "mcp-proxy"):  # fmt: skip
        assert any(name in line for line in servers.values()), (name, servers)
    assert len(owned) >= 6, owned  # one scratch dir per server instance
    deadline = time.monotonic() + 30  # a deadline for the kernel to reap, not a timing assertion
    while any(alive(pid) for pid in servers) and time.monotonic() < deadline:
        time.sleep(0.1)
    survivors = {pid: line for pid, line in servers.items() if alive(pid) and cmdline(pid) == line}
    assert not survivors
    assert all(p.exists() for p in owned)  # SIGKILL gave the runner no chance to clean up

    replay = write_run(tmp_path / "replay.yaml", tmp_path / "tasks.yaml", [{"name": "replay"}])
    subprocess.run(
        [ATLAS, "run", str(replay), "--data-dir", str(data_dir), "--out", str(tmp_path / "out2"), "--quiet", *flags],
        check=True, capture_output=True, timeout=300,
    )  # fmt: skip
    assert not any(p.exists() for p in owned)


def test_sweep_keeps_live_owners_and_foreign_names(private_tmp: Path) -> None:
    mine = new_scratch("sweep-test")
    root = scratch_root()
    dead = root / "2147483646.1-gone-abc"  # a pid above pid_max never runs
    reused = root / f"{os.getpid()}.0-reused-abc"  # this pid, another start time: a reused pid
    foreign = root / "not-ours"
    for path in (dead, reused, foreign):
        path.mkdir()
    try:
        removed = sweep_stale()
        assert dead in removed and reused in removed
        assert mine.exists() and foreign.exists() and not dead.exists() and not reused.exists()
    finally:
        for path in (mine, foreign):
            path.rmdir()
