"""The sandbox policy is the host's alone: a run file cannot lower any server's confinement.

A built-in catalog entry keeps its ``executes_code`` whatever a run file says; every entry that
is not from a built-in catalog (``servers.inline``, a catalog file) is treated as executing code
and cannot raise its resource limits above the host's; and without a working bubblewrap no
server process starts unless the command line says ``--unsafe-host-exec`` (tested with bwrap
missing in three ways, and present). Such an entry cannot widen the sandbox either: host paths
(``read_only_paths``), host variables (``secrets``, unless the host lists them in
``ATLAS_SERVER_SECRETS``) and a locally started HTTP server are refused before any work, and
its ``egress`` gives it no network; it keeps only what the built-in entry it redeclares has,
while it runs the same program.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml

from atlasrun.runner.plan import build_catalog
from atlasrun.runspec.run import load_run_spec
from atlasrun.servers.catalog import load_catalog
from atlasrun.servers.instance import ServerInstance
from atlasrun.servers.limits import bounds_for, host_limits
from atlasrun.servers.sandbox import SECRETS_VAR, Dirs, HostPolicyError, Sandbox, bwrap_args
from conftest import write_run, write_tasks
from test_sandbox import accepted, exe, server_chain

pytestmark = pytest.mark.servers

ATLAS = str(Path(sys.executable).with_name("atlas"))

CODE_TASK = {
    "id": "echo",
    "prompt": "Say ok with the code runner.",
    "enabled_tools": ["code-runner_run-code", "calculator_calculate"],
    "claims": ["The output is ok"],
    "reference_answer": "The output is ok.",
    "reference_trajectory": [
        {
            "calls": [
                {
                    "name": "code-runner_run-code",
                    "arguments": {"code": "echo ok", "languageId": "shellscript"},
                }
            ]
        }
    ],
}


SENTINEL = f"sentinel-{uuid.uuid4().hex}"


def lowered(server: str, catalog: str = "starter", **changes: Any) -> dict[str, Any]:
    """The built-in entry ``server`` as a run file would redeclare it, with ``changes``."""
    entry = load_catalog(catalog).get(server).model_dump(mode="json", exclude_defaults=True)
    return {**entry, **changes}


def inline_run(tmp_path: Path, **servers: Any) -> Path:
    return write_run(
        tmp_path / "run.yaml",
        write_tasks(tmp_path / "tasks.yaml", [CODE_TASK]),
        [{"name": "replay"}],
        servers=servers,
    )


def test_only_a_builtin_catalog_can_say_a_server_runs_no_code(tmp_path: Path) -> None:
    catalog_file = tmp_path / "mine.yaml"
    catalog_file.write_text(
        yaml.safe_dump({"servers": [{**lowered("calculator", name="calc-file"), "executes_code": False}]})
    )
    run = inline_run(
        tmp_path,
        catalog=str(catalog_file),
        inline=[
            lowered("code-runner", executes_code=False, limits={"memory_mb": 900_000, "processes": 50}),
            lowered("calculator", name="calc-inline", executes_code=False),
            lowered("time", executes_code=False),  # a built-in name, redeclared as it is
        ],
    )
    catalog = build_catalog(load_run_spec(run))
    builtin = load_catalog()
    assert builtin.get("code-runner").may_execute_code and not builtin.get("calculator").may_execute_code
    for name in ("code-runner", "calc-inline", "calc-file", "time"):
        spec = catalog.get(name)
        assert not spec.host_trusted and spec.may_execute_code, name
    assert not catalog.get("calculator").may_execute_code  # untouched built-in entry: the host's word
    # A run file may tighten a limit, never loosen one beyond the host's defaults.
    bounds = bounds_for(catalog.get("code-runner"))
    assert bounds.memory_mb == host_limits().memory_mb and bounds.processes == 50


async def test_an_inline_server_that_claims_no_code_runs_under_the_reaper(
    tmp_path: Path, data_dir: Path
) -> None:
    """bwrap present: the redeclared code-runner is not trusted to be PID 1 of its namespace."""
    run = inline_run(tmp_path, inline=[lowered("code-runner", executes_code=False)])
    spec = build_catalog(load_run_spec(run)).get("code-runner")
    instance = await ServerInstance(spec, data_dir, "/data").start()
    try:
        tree, path = server_chain(str(spec.command))
        assert [exe(p) for p in path] == ["bwrap", "bwrap", "node"], tree
        text, is_error = await instance.call(
            "run-code", {"code": "cat /proc/1/cmdline", "languageId": "shellscript"}, 30
        )
        assert not is_error and text.startswith("/usr/bin/bwrap\0"), (
            text
        )  # PID 1 is bwrap's reaper, not the server
    finally:
        await instance.stop()


def no_bwrap_env(how: str, tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "ATLAS_BWRAP"}
    if how == "empty":
        env["ATLAS_BWRAP"] = ""
    elif how == "broken":
        env["ATLAS_BWRAP"] = str(tmp_path / "no-such-bwrap")
    else:  # a PATH without bwrap: the way a host without the package looks
        tools = tmp_path / "bin"
        tools.mkdir()
        for tool in ("node", "python3", "sh", "bash", "git", "setpriv"):
            if found := subprocess.run(["which", tool], capture_output=True, text=True).stdout.strip():
                (tools / tool).symlink_to(found)
        env["PATH"] = str(tools)
    return env


@pytest.mark.parametrize("how", ["empty", "broken", "path"])
def test_without_bwrap_a_run_file_cannot_run_any_server_unconfined(
    tmp_path: Path, data_dir: Path, how: str
) -> None:
    run = inline_run(tmp_path, inline=[lowered("code-runner", executes_code=False)])
    out = tmp_path / "out"
    proc = subprocess.run(
        [ATLAS, "run", str(run), "--data-dir", str(data_dir), "--out", str(out), "--quiet"],
        capture_output=True, text=True, timeout=120, env=no_bwrap_env(how, tmp_path),
    )  # fmt: skip
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "'code-runner'" in proc.stderr and "--unsafe-host-exec" in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr
    assert not (out / "results.jsonl").exists()  # refused before any work


def test_unsafe_host_exec_is_the_one_way_to_run_unconfined(tmp_path: Path, data_dir: Path) -> None:
    run = inline_run(tmp_path, inline=[lowered("code-runner", executes_code=False)])
    out = tmp_path / "out"
    proc = subprocess.run(
        [ATLAS, "run", str(run), "--data-dir", str(data_dir), "--out", str(out), "--quiet", "--unsafe-host-exec"],
        capture_output=True, text=True, timeout=300, env=no_bwrap_env("empty", tmp_path),
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "warning: server 'code-runner' runs unconfined" in proc.stderr
    record = yaml.safe_load((out / "results.jsonl").read_text().splitlines()[0])
    assert record["status"] == "scored" and record["passed"] is True, record


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    """A directory outside the data root holding a file the servers must not read."""
    folder = tmp_path / "outside"
    folder.mkdir()
    (folder / "secret.txt").write_text(f"file {SENTINEL}\n")
    return folder


def test_a_run_file_cannot_give_its_server_host_paths_or_variables(
    tmp_path: Path, data_dir: Path, outside: Path
) -> None:
    """Refused before any work, naming the run file and the fields; the values never printed."""
    run = inline_run(
        tmp_path, inline=[lowered("code-runner", read_only_paths=[str(outside)], secrets=["POLICY_SENTINEL"])]
    )
    out = tmp_path / "out"
    proc = subprocess.run(
        [ATLAS, "run", str(run), "--data-dir", str(data_dir), "--out", str(out), "--quiet"],
        capture_output=True, text=True, timeout=120, env={**os.environ, "POLICY_SENTINEL": SENTINEL},
    )  # fmt: skip
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert f"error: {run}: spec.servers.inline[code-runner].read_only_paths: '{outside}'" in proc.stderr
    assert "spec.servers.inline[code-runner].secrets: POLICY_SENTINEL" in proc.stderr
    assert f"{SECRETS_VAR}=POLICY_SENTINEL" in proc.stderr, proc.stderr
    assert SENTINEL not in proc.stdout + proc.stderr and "Traceback" not in proc.stderr
    assert not (out / "results.jsonl").exists()  # refused before any work
    checked = subprocess.run(  # and atlas validate says the same, as problems found
        [ATLAS, "validate", str(run)], capture_output=True, text=True, timeout=120,
        env={**os.environ, "POLICY_SENTINEL": SENTINEL},
    )  # fmt: skip
    assert checked.returncode == 1, checked.stdout + checked.stderr
    lines = checked.stdout.splitlines()
    assert f"error: {run}: spec.servers.inline[code-runner].read_only_paths: '{outside}'" in "\n".join(lines)
    assert any("spec.servers.inline[code-runner].secrets: POLICY_SENTINEL" in line for line in lines)
    assert "2 server problem(s)" in lines[-1] and SENTINEL not in checked.stdout, lines


def test_a_redeclared_entry_keeps_the_builtin_grant_only_while_it_runs_the_same_program(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """MCP-Atlas's twelvedata has a key and egress: redeclared as it is (e.g. with a sidecar
    image), it keeps both; running another program under its name, it has neither unless the
    host lists the key in ATLAS_SERVER_SECRETS, and never the network."""
    builtin = lowered("twelvedata", "mcp-atlas")
    as_is = {**builtin, "image": "reg.local/twelvedata@sha256:" + "0" * 64, "port": 9100}
    same = build_catalog(load_run_spec(inline_run(tmp_path, catalog="mcp-atlas", inline=[as_is])))
    spec = same.get("twelvedata")
    assert not spec.host_trusted and spec.host_grant == load_catalog("mcp-atlas").get("twelvedata").host_grant
    Sandbox().check(spec)
    dirs = Dirs(tmp_path / "scratch", tmp_path / "data", False)
    assert "--share-net" in bwrap_args(spec, dirs, {})
    changed = {**builtin, "args": [*builtin["args"], "--another-program"]}
    run = inline_run(tmp_path, catalog="mcp-atlas", inline=[changed])
    spec = build_catalog(load_run_spec(run)).get("twelvedata")
    with pytest.raises(HostPolicyError) as refused:
        Sandbox().check(spec)
    assert refused.value.where == str(run) and "spec.servers.inline[twelvedata].secrets" in str(refused.value)
    monkeypatch.setenv(SECRETS_VAR, "SOME_OTHER_KEY, TWELVE_DATA_API_KEY")
    Sandbox().check(spec)  # the host's own opt-in
    assert "--share-net" not in bwrap_args(spec, dirs, {})


def test_a_catalog_file_cannot_give_host_paths_or_start_an_http_server(tmp_path: Path, outside: Path) -> None:
    catalog_file = tmp_path / "mine.yaml"
    catalog_file.write_text(
        yaml.safe_dump(
            {
                "servers": [
                    lowered("calculator", name="calc-file", read_only_paths=[str(outside)]),
                    lowered("calculator-http", args=["--host", "127.0.0.1", "--port", "{port}"]),
                ]
            }
        )
    )
    catalog = build_catalog(load_run_spec(inline_run(tmp_path, catalog=str(catalog_file))))
    for name, field in (("calc-file", "read_only_paths"), ("calculator-http", "transport")):
        with pytest.raises(HostPolicyError) as refused:
            Sandbox().check(catalog.get(name))
        assert refused.value.where == str(catalog_file), refused.value
        assert str(refused.value).startswith(f"{catalog_file}: servers[{name}].{field}: "), refused.value
    spec = catalog.get("calc-file")
    bound = bwrap_args(spec, Dirs(tmp_path / "scratch", tmp_path / "data", False), {})
    assert str(outside) not in bound  # not bound even past the check


async def test_an_inline_server_redeclared_as_is_keeps_its_http_transport(
    tmp_path: Path, data_dir: Path
) -> None:
    """The legitimate redeclaration (a sidecar's image and port) still runs here, over HTTP."""
    run = inline_run(
        tmp_path, inline=[lowered("calculator-http", image="reg.local/c@sha256:" + "0" * 64, port=9104)]
    )
    spec = build_catalog(load_run_spec(run)).get("calculator-http")
    assert not spec.host_trusted and spec.host_grant.network
    instance = await ServerInstance(spec, data_dir, "/data").start()
    try:
        text, is_error = await instance.call("calculate", {"expression": "2+3"}, 30)
    finally:
        await instance.stop()
    assert (text.strip(), is_error) == ("5", False)


async def test_an_inline_servers_egress_and_secrets_reach_nothing_the_host_did_not_grant(
    tmp_path: Path,
    data_dir: Path,
    outside: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """bwrap present: an inline code-runner declaring egress to a loopback listener cannot reach
    it, sees the one variable the host allowed and not another set in the runner, and cannot read
    a file outside its data root."""
    monkeypatch.setenv("POLICY_SENTINEL", SENTINEL)
    monkeypatch.setenv("POLICY_ALLOWED", "allowed-value")
    monkeypatch.setenv(SECRETS_VAR, "POLICY_ALLOWED")
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(8)
        listener.setblocking(False)
        port = listener.getsockname()[1]
        egress = {"cidrs": ["127.0.0.1/32"], "ports": [port]}
        run = inline_run(tmp_path, inline=[lowered("code-runner", egress=egress, secrets=["POLICY_ALLOWED"])])
        spec = build_catalog(load_run_spec(run)).get("code-runner")
        probe = "\n".join(
            [
                "exec 2>&1",
                'echo "allowed=${POLICY_ALLOWED:-unset} sentinel=${POLICY_SENTINEL:-unset}"',
                f"cat {outside / 'secret.txt'} || echo file=denied",
                f"(exec 3<>/dev/tcp/127.0.0.1/{port}) && echo tcp=connected || echo tcp=denied",
            ]
        )
        instance = await ServerInstance(spec, data_dir, "/data").start()
        try:
            text, is_error = await instance.call("run-code", {"code": probe, "languageId": "shellscript"}, 30)
        finally:
            await instance.stop()
        assert accepted(listener) == 0
    assert not is_error and "allowed=allowed-value sentinel=unset" in text, text
    assert "file=denied" in text and SENTINEL not in text, text
    assert "Connection refused" in text and "tcp=denied" in text, text  # its own loopback refused it
    warning = "warning: server 'code-runner' runs without network: spec.servers.inline[code-runner]"
    assert warning in capsys.readouterr().err
