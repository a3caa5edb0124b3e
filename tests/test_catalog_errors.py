"""A file that is not a valid server catalog gives an error naming the file and the position,
never its contents (``servers.catalog: /etc/shadow`` must not print the shadow file)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from atlasrun.errors import InputError
from atlasrun.servers.catalog import load_catalog
from conftest import write_run, write_tasks

ATLAS = str(Path(sys.executable).with_name("atlas"))
SECRET = "hunter2SNTLshadow9f1c"

# Each: file text (every one holds SECRET), then what the message must say.
CASES = {
    "shadow": (
        f"root:$6${SECRET}$abc:19000:0:99999:7:::\ndaemon:*:19000:0:99999:7:::\n",
        "not a server catalog",
    ),
    "mapping": (f"password: {SECRET}\nuser: root\n", "not a server catalog"),
    "list": (f"- {SECRET}\n- other\n", "not a server catalog"),
    "bad-yaml": (f"servers:\n  - name: x\n  {SECRET}: [\n", "not valid YAML"),
    "secret-key": (
        f"servers:\n  - name: calc\n    command: /bin/true\n    '{SECRET}:x': 1\n",
        "servers.0.<key> (line 4): Extra inputs are not permitted",
    ),
    "secret-name": (
        f"servers:\n  - name: 'root:{SECRET}'\n    command: /bin/true\n",
        "servers.0.name (line 2)",
    ),
    "secret-value": (
        f"servers:\n  - name: calc\n    transport: '{SECRET}'\n",
        "servers.0.transport (line 3)",
    ),
    "misspelt": ("servers:\n  - name: calc\n    comand: /bin/true\n", "did you mean 'command'"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_catalog_errors_name_the_file_and_position_not_the_contents(tmp_path: Path, case: str) -> None:
    text, expected = CASES[case]
    path = tmp_path / f"{case}.yaml"
    path.write_text(text)
    with pytest.raises(InputError) as failed:
        load_catalog(path)
    message = str(failed.value)
    assert message.startswith(f"{path}: ") and expected in message, message
    assert SECRET not in message and "root:" not in message and "daemon" not in message, message


@pytest.mark.parametrize("catalog", ["/etc/shadow", "shadow-copy"])
def test_validate_and_run_with_a_catalog_that_is_not_one(tmp_path: Path, catalog: str) -> None:
    """Through the CLI, with the real /etc/shadow (when readable) and a copy holding a sentinel."""
    if catalog == "/etc/shadow":
        shadow = Path(catalog)
        try:
            lines = [line.split(":", 2)[:2] for line in shadow.read_text().splitlines() if line]
        except OSError:
            pytest.skip("/etc/shadow is not readable here")
        never = [field for pair in lines for field in pair if len(field) > 3]
    else:
        shadow = tmp_path / "shadow"
        shadow.write_text(CASES["shadow"][0])
        never = [SECRET, "daemon"]
    run = write_run(
        tmp_path / "run.yaml", write_tasks(tmp_path / "tasks.yaml", []), [{"name": "replay"}],
        servers={"catalog": str(shadow)},
    )  # fmt: skip
    for command in (["validate", str(run)], ["run", str(run), "--out", str(tmp_path / "out"), "--quiet"]):
        proc = subprocess.run([ATLAS, *command], capture_output=True, text=True, timeout=120)
        printed = proc.stdout + proc.stderr
        assert proc.returncode == 2 and str(shadow) in printed, printed
        assert "Traceback" not in printed and not [field for field in never if field in printed], printed
