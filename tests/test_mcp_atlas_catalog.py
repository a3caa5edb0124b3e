"""The built-in ``mcp-atlas`` catalog: MCP-Atlas's 36 servers under its names and pins.

Unmarked tests check the catalog against MCP-Atlas's own template (read from the vendored
source when the workplace has it) and the pieces that make it run like MCP-Atlas (data mounted
at /data, shared read-only paths, secrets in arguments, source builds checked by sha256).
``servers`` tests install, start and call its offline servers on MCP-Atlas's /data.
"""

from __future__ import annotations

import io
import json
import os
import re
import subprocess
import tarfile
from pathlib import Path

import pytest

from atlasrun.errors import AtlasError
from atlasrun.servers.catalog import Package, ServerSpec, Source, load_catalog
from atlasrun.servers.instance import with_secrets
from atlasrun.servers.readiness import needs_lines, runs_here
from atlasrun.servers.sandbox import Dirs, bwrap_args
from atlasrun.servers.scratch import DataCopy
from atlasrun.servers.source import build_from_source
from atlasrun.tasks.loader import load_tasks

REPO = Path(__file__).resolve().parents[1]
VENDOR = Path(os.environ.get("ATLAS_SOURCE_ARCHIVES") or "/work/shared/vendor")
SOURCE = VENDOR / "mcp-atlas-5b6220c.src.tar.gz"
SAMPLE = VENDOR / "mcp-atlas-619939a-sample_tasks.csv"
TEMPLATE = "services/agent-environment/src/agent_environment/mcp_server_template.json"
OFFLINE = [
    "filesystem",
    "memory",
    "git",
    "calculator",
    "cli-mcp-server",
    "desktop-commander",
    "mcp-server-code-runner",
    "mcp-code-executor",
]
needs_vendor = pytest.mark.skipif(not SOURCE.exists(), reason=f"MCP-Atlas source not at {SOURCE}")


def _template() -> dict[str, dict[str, object]]:
    with tarfile.open(SOURCE) as tar:
        member = next(m for m in tar.getmembers() if m.name.endswith(TEMPLATE))
        handle = tar.extractfile(member)
        assert handle is not None
        servers: dict[str, dict[str, object]] = json.load(handle)["mcpServers"]
        return servers


def test_the_catalog_has_36_servers_with_valid_names() -> None:
    catalog = load_catalog("mcp-atlas")
    assert len(catalog.servers) == 36
    assert len({s.name for s in catalog.servers}) == 36
    assert load_catalog("starter").get("calculator").package == Package(
        manager="pip", name="mcp-server-calculator", version="0.2.1", extra=["mcp<2"]
    )


@needs_vendor
def test_every_server_matches_mcp_atlas_template() -> None:
    """Same names, packages, versions, environment and keys as MCP-Atlas 5b6220c's template."""
    template = _template()
    catalog = load_catalog("mcp-atlas").by_name()
    assert sorted(catalog) == sorted(template)
    for name, entry in template.items():
        spec = catalog[name]
        assert spec.package is not None, name
        raw = json.dumps(entry)
        args = [a for a in entry["args"] if a != "-y"]  # type: ignore[union-attr]
        if spec.package.source is None:  # a registry pin: npx pkg@version / uvx pkg==version
            first = args[1] if args[0] == "--from" else args[0]
            pin = re.split(r"==|@(?=[^@]*$)", str(first))
            assert [spec.package.name, spec.package.version] == pin, name
        else:  # built from source: the template names the repository (or npm pins it)
            assert spec.package.source.git.rstrip("/").lower().split("/")[-1] in raw.lower() or (
                f"{spec.package.name}@{spec.package.version}" in raw
            ), name
        keys = sorted(set(re.findall(r"\$\{([A-Z0-9_]+)\}", raw)))
        assert spec.secrets == keys, name
        env = entry.get("env") or {}
        assert isinstance(env, dict)
        for key, value in env.items():  # a key's own variable passes through as a secret
            if value != "${" + key + "}":
                assert spec.env[key] == str(value).replace("/data", "{data_dir}"), (name, key)
        if not keys and not (spec.egress.hosts or spec.egress.cidrs):
            assert name in OFFLINE, f"{name} declares no egress and no key: is it really offline?"
        if spec.package.manager == "pip":
            assert spec.package.exclude_newer == "2026-07-22T19:28:34Z", name


def test_data_is_mounted_where_the_model_sees_it_with_shared_paths_read_only(tmp_path: Path) -> None:
    spec = load_catalog("mcp-atlas").get("mcp-code-executor")
    venv = tmp_path / "src" / "repos" / "ws" / ".venv"
    dirs = Dirs(
        tmp_path / "scratch",
        tmp_path / "copy",
        True,
        mount=Path("/data"),
        shared=((venv, Path("/data/repos/ws/.venv")),),
    )
    argv = bwrap_args(spec, dirs, {"PATH": "/usr/bin"})
    assert ["--bind", str(tmp_path / "copy"), "/data"] == argv[argv.index(str(tmp_path / "copy")) - 1 :][:3]
    at = argv.index(str(venv))
    assert argv[at - 1 : at + 2] == ["--ro-bind", str(venv), "/data/repos/ws/.venv"]
    assert at > argv.index("/data"), "the shared path is mounted over the data root, after it"


def test_a_data_copy_leaves_shared_paths_out(tmp_path: Path) -> None:
    source = tmp_path / "src"
    (source / "repos" / "ws" / ".venv" / "lib").mkdir(parents=True)
    (source / "repos" / "ws" / ".venv" / "lib" / "big.so").write_bytes(b"x" * 1000)
    (source / "repos" / "ws" / "code.py").write_text("print(1)\n")
    copy = DataCopy(source, tmp_path / "copy", tmp_path / "clock", ["repos/ws/.venv"])
    copy.create()
    assert (tmp_path / "copy" / "repos" / "ws" / "code.py").read_text() == "print(1)\n"
    assert (tmp_path / "copy" / "repos" / "ws" / ".venv").is_dir()
    assert list((tmp_path / "copy" / "repos" / "ws" / ".venv").iterdir()) == []
    (tmp_path / "copy" / "repos" / "ws" / "new.py").write_text("x")
    assert copy.refresh() == [] and not (tmp_path / "copy" / "repos" / "ws" / "new.py").exists()


def test_secrets_fill_arguments_and_env_only_when_declared(monkeypatch: pytest.MonkeyPatch) -> None:
    spec = load_catalog("mcp-atlas").get("twelvedata")
    monkeypatch.setenv("TWELVE_DATA_API_KEY", "k-123")
    monkeypatch.setenv("OTHER", "leak")
    assert with_secrets(spec, spec.args) == ["-k", "k-123"]
    assert with_secrets(spec, ["${OTHER}", "${TWELVE_DATA_API_KEY}x"]) == ["${OTHER}", "k-123x"]
    monkeypatch.delenv("TWELVE_DATA_API_KEY")
    assert with_secrets(spec, spec.args) == ["-k", ""]  # unset: empty, as envsubst makes it


def test_a_source_archive_with_another_sha256_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    archive = tmp_path / "pkg.src.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        data = b'{"name": "pkg", "version": "1.0.0"}'
        info = tarfile.TarInfo("pkg/package.json")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    monkeypatch.setenv("ATLAS_SOURCE_ARCHIVES", str(tmp_path))
    source = Source(git="https://example.invalid/pkg", commit="a" * 40, archive=archive.name, sha256="0" * 64)
    pkg = Package(manager="npm", name="pkg", version="1.0.0", source=source)
    (tmp_path / "work").mkdir()
    with pytest.raises(AtlasError, match=r"sha256 [0-9a-f]{64} differs from the pinned 0{64}"):
        build_from_source("pkg", pkg, tmp_path / "work", lambda _: None)


@pytest.mark.skipif(not SAMPLE.exists(), reason=f"MCP-Atlas sample tasks not at {SAMPLE}")
def test_validate_counts_the_tasks_each_key_or_egress_would_unlock() -> None:
    catalog = load_catalog("mcp-atlas")
    tasks = load_tasks(SAMPLE).tasks
    lines = needs_lines(catalog, tasks, environ={})
    ddg = next(line for line in lines if line.startswith("ddg-search:"))
    needing = sum("ddg-search" in t.required_servers for t in tasks)
    assert ddg.startswith(f"ddg-search: {needing} task(s) need egress to duckduckgo.com:443")
    for line in lines:  # offline servers need at most an install, never a key or egress
        if line.startswith(("filesystem:", "calculator:")):
            assert "key" not in line and "egress" not in line, line
    notion = catalog.get("notion")
    assert not runs_here(notion, environ={})  # key-gated: not enabled by default without its key
    assert runs_here(notion, environ={"NOTION_TOKEN": "t"})  # a served pin: enabled once the key is set


def test_a_built_in_catalog_name_is_selected_not_read_as_a_path(tmp_path: Path) -> None:
    from atlasrun.runner.plan import build_catalog
    from atlasrun.runspec.run import RunSpec

    body = {"tasks": {"path": "t.yaml"}, "models": [{"name": "replay"}], "servers": {"catalog": "mcp-atlas"}}
    spec = RunSpec.model_validate({"metadata": {"name": "x"}, "spec": body})
    names = set(build_catalog(spec).by_name())
    assert "desktop-commander" in names and "code-runner" not in names


# --- with the servers installed (make servers) ---------------------------------------------------


def _atlas(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(REPO / ".venv" / "bin" / "atlas"), *args],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, **(env or {})},
        check=False,
    )


@pytest.fixture(scope="module")
def atlas_data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if not SOURCE.exists():
        pytest.skip(f"MCP-Atlas source not at {SOURCE} and GitHub is not reachable here")
    target = tmp_path_factory.mktemp("mcp-atlas") / "data"
    done = _atlas(
        "init-workspace", "--catalog", "mcp-atlas", str(target), env={"ATLAS_SOURCE_ARCHIVES": str(VENDOR)}
    )
    assert done.returncode == 0, done.stderr
    assert "MCP-Atlas /data ready" in done.stdout
    assert "missing: repos/storyteller" in done.stderr or (target / "repos" / "storyteller").is_dir()
    return target


@pytest.mark.servers
def test_init_workspace_builds_mcp_atlas_data(atlas_data: Path) -> None:
    with tarfile.open(SOURCE) as tar:
        names = {
            m.name.split("/agent-environment/data/", 1)[1]
            for m in tar.getmembers()
            if "/agent-environment/data/" in m.name and m.isfile()
        }
    for name in names:
        assert (atlas_data / name).is_file(), name
    python = atlas_data / "repos" / "mcp_code_executor_workspace" / ".venv" / "bin" / "python"
    probe = subprocess.run(
        [str(python), "-c", "import pandas, numpy, scipy; print(pandas.__version__, numpy.__version__)"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert probe.stdout.split() == ["2.3.1", "2.3.1"]


@pytest.mark.servers
def test_servers_check_calls_every_offline_server_on_mcp_atlas_data(atlas_data: Path) -> None:
    done = _atlas(
        "servers", "check", "--catalog", "mcp-atlas", "--data-dir", str(atlas_data), "--json", *OFFLINE
    )
    rows = {r["server"]: r for r in json.loads(done.stdout)}
    assert done.returncode == 0, done.stdout + done.stderr
    assert set(rows) == set(OFFLINE)
    assert rows["filesystem"]["message"] == "list_allowed_directories: 'Allowed directories:\\n/data'"
    assert rows["calculator"]["message"] == "calculate: '5'"
    assert rows["cli-mcp-server"]["message"].startswith("run_command: 'Barber Shop.csv\\n")
    assert '"output":"2\\\\n"' in rows["mcp-code-executor"]["message"]
    assert rows["memory"]["message"].startswith("read_graph: '{")


@pytest.mark.servers
@pytest.mark.skipif(not SAMPLE.exists(), reason=f"MCP-Atlas sample tasks not at {SAMPLE}")
def test_audit_of_the_sample_skips_no_task_for_an_unknown_server(atlas_data: Path) -> None:
    done = _atlas("audit", str(SAMPLE), "--catalog", "mcp-atlas", "--data-dir", str(atlas_data), "--json")
    rows = {r["task"]: r for r in json.loads(done.stdout)["tasks"]}
    assert len(rows) == 10
    for task, row in rows.items():
        for detail in row["details"]:
            assert "did you mean" not in detail and "no such server" not in detail, (task, detail)
    offline = ["5c6d7e8f9a", "4b5c6d7e8f", "9d0e1f2a3b", "a0b1c2d3e4", "c6d7e8f9a0"]
    for task in offline:
        assert rows[task]["status"] != "skipped", (task, rows[task])


def test_spec_of_a_source_build_needs_a_full_commit() -> None:
    with pytest.raises(ValueError, match="commit"):
        Source(git="https://github.com/x/y", commit="91efd92")
    with pytest.raises(ValueError, match="shared_data needs mount_data"):
        ServerSpec(name="x", command="x", shared_data=["a"])


@pytest.mark.servers
def test_every_installed_keyless_server_lists_its_tools_offline() -> None:
    """Network servers start far enough to list their tools with no network and no key."""
    from atlasrun.servers.install import is_installed

    catalog = load_catalog("mcp-atlas")
    installed = [s.name for s in catalog.servers if is_installed(s)]
    assert set(OFFLINE) <= set(installed), "make servers installs every offline mcp-atlas server"
    keyless = [n for n in installed if not catalog.get(n).secrets]
    done = _atlas("servers", "list", "--catalog", "mcp-atlas", "--live", *keyless)
    assert done.returncode == 0, done.stderr
    listed = dict(
        re.findall(r"^(\S+)  \(.*\n(?:    needs:.*\n)    (\d+) tool\(s\), listed live", done.stdout, re.M)
    )
    assert sorted(listed) == sorted(keyless), done.stdout
    assert all(int(count) > 0 for count in listed.values()), listed
