"""Special files and hostile YAML values (issue 24, section 2).

Every file AtlasRun reads is first checked to be a regular file of bounded size: a symlink to
/dev/zero, a FIFO, a directory, a symlink loop or an over-large file is an error naming the file
(exit 2), never a hang, a multi-GB process or a traceback. YAML values PyYAML's constructors crash
on are "not valid YAML ... line N" errors. No message echoes the file's content.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from atlasrun.cli import main
from atlasrun.errors import EXIT_BAD_INPUT
from atlasrun.tasks.files import DOCUMENT_LIMIT, TASK_FILE_LIMIT
from atlasrun.tasks.loader import load_tasks
from conftest import SUM_TASK, write_run, write_tasks

ATLAS = Path(sys.executable).with_name("atlas")
SENTINEL = "SENTINEL-7f3a"
QUICK_S = 15  # a refused file is refused at once; a FIFO read would block until the timeout


def _atlas(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    started = time.monotonic()
    done = subprocess.run(
        [str(ATLAS), *args], cwd=cwd, capture_output=True, text=True, timeout=20, stdin=subprocess.DEVNULL
    )
    assert time.monotonic() - started < QUICK_S, f"atlas {' '.join(args)} took too long"
    return done


def _refused(done: subprocess.CompletedProcess[str], *expected: str) -> str:
    """The one error line of a command that exited 2: no traceback, no content echoed."""
    output = done.stdout + done.stderr
    assert done.returncode == EXIT_BAD_INPUT, output
    assert "Traceback" not in output and SENTINEL not in output, output
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), output
    for part in expected:
        assert part in lines[0], output
    return lines[0]


def _sparse(path: Path, size: int) -> Path:
    """A file of ``size`` bytes costing no disk: the sentinel, then a hole."""
    path.write_text(f"# {SENTINEL}\n")
    os.truncate(path, size)
    return path


def test_special_and_oversized_task_files_are_refused_naming_the_kind_or_the_limit(tmp_path: Path) -> None:
    (tmp_path / "zero.yaml").symlink_to("/dev/zero")
    os.mkfifo(tmp_path / "tasks.yaml")
    (tmp_path / "dir.yaml").mkdir()
    (tmp_path / "loop-a.yaml").symlink_to("loop-b.yaml")
    (tmp_path / "loop-b.yaml").symlink_to("loop-a.yaml")
    _sparse(tmp_path / "big.jsonl", TASK_FILE_LIMIT + 1)
    cases = {
        "zero.yaml": "is a character device, not a regular file",
        "tasks.yaml": "is a FIFO (named pipe), not a regular file",
        "dir.yaml": "is a directory, not a regular file",
        "loop-a.yaml": "Too many levels of symbolic links",
        "big.jsonl": "over the limit of 256 MiB",
    }
    for name, message in cases.items():
        _refused(_atlas("validate", name, cwd=tmp_path), f"error: {name}: ", message)


def test_run_refuses_special_catalogs_task_files_symlink_loops_and_oversized_run_files(
    tmp_path: Path,
) -> None:
    tasks = write_tasks(tmp_path / "tasks.yaml", [SUM_TASK])
    os.mkfifo(tmp_path / "catalog.yaml")
    os.mkfifo(tmp_path / "fifo-tasks.yaml")
    (tmp_path / "loop").symlink_to("loop")
    models = [{"name": "replay"}]
    fifo_catalog = write_run(tmp_path / "fifo.yaml", tasks, models, servers={"catalog": "catalog.yaml"})
    zero_catalog = write_run(tmp_path / "zero.yaml", tasks, models, servers={"catalog": "/dev/zero"})
    plain = write_run(tmp_path / "run.yaml", tasks, models)
    big_run = _sparse(tmp_path / "big-run.yaml", DOCUMENT_LIMIT + 1)
    out = ["--out", str(tmp_path / "out")]

    for command in ("validate", "run"):
        extra = out if command == "run" else []
        _refused(_atlas(command, fifo_catalog.name, *extra, cwd=tmp_path), "server catalog is a FIFO")
        _refused(_atlas(command, zero_catalog.name, *extra, cwd=tmp_path), "/dev/zero: the server catalog")
    _refused(
        _atlas("run", plain.name, "--tasks", "fifo-tasks.yaml", *out, cwd=tmp_path), "task file is a FIFO"
    )
    _refused(_atlas("run", plain.name, "--tasks", "loop", *out, cwd=tmp_path), "loop: ", "symlink loop")
    _refused(_atlas("run", plain.name, "--catalog", "loop", *out, cwd=tmp_path), "loop: ", "symlink loop")
    _refused(_atlas("run", big_run.name, *out, cwd=tmp_path), "big-run.yaml: ", "over the limit of 16 MiB")
    assert not (tmp_path / "out" / "results.jsonl").exists()


def test_judge_eval_refuses_a_fifo_labels_file(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "labels.jsonl")
    done = _atlas("judge-eval", "labels.jsonl", "--judge", "deterministic", cwd=tmp_path)
    _refused(done, "labels.jsonl: the labels file is a FIFO")


def test_special_files_in_a_results_directory_are_refused(tmp_path: Path) -> None:
    results = tmp_path / "out"
    results.mkdir()
    os.mkfifo(results / "results.jsonl")
    _refused(_atlas("report", "out", cwd=tmp_path), "out/results.jsonl: the results file is a FIFO")
    (results / "results.jsonl").unlink()
    (results / "results.jsonl").touch()
    (results / "run.json").symlink_to("/dev/zero")
    _refused(_atlas("report", "out", cwd=tmp_path), "out/run.json: the run record is a character device")


def test_a_foreign_file_as_catalog_or_run_file_is_named_not_echoed(tmp_path: Path) -> None:
    """The issue's `servers.catalog: /etc/shadow`: each line came back as an "extra key" error."""
    foreign = tmp_path / "shadow"
    foreign.write_text(f"root: {SENTINEL}\n{SENTINEL}-daemon: x\n")
    run = write_run(tmp_path / "run.yaml", write_tasks(tmp_path / "t.yaml", [SUM_TASK]), [{"name": "replay"}])
    run.write_text(run.read_text() + f"  servers:\n    catalog: {foreign}\n")
    line = _refused(_atlas("validate", run.name, cwd=tmp_path), f"{foreign}: not a server catalog")
    assert "daemon" not in line
    foreign_run = tmp_path / "foreign.yaml"
    foreign_run.write_text(foreign.read_text())
    _refused(_atlas("run", foreign_run.name, cwd=tmp_path), "foreign.yaml: not a run file")


# Values PyYAML's constructors crashed on (a traceback, exit 1), and how each is named.
BAD_VALUES = {
    "huge-int": ("1" * 4301, "an integer of more than 4,300 digits"),
    "huge-hex": ("0x" + "f" * 4000, "an integer of more than 4,300 digits"),
    "timestamp-tag": (f"!!timestamp {SENTINEL}", "not a valid timestamp"),
    "impossible-date": ("2024-02-30", "not a valid timestamp"),
    "bool-tag": (f"!!bool {SENTINEL}", "not a valid bool"),
    "int-tag": (f"!!int {SENTINEL}", "not a valid int"),
    "verbatim-int-tag": ("!<tag:yaml.org,2002:int> 12x", "not a valid int"),
}


@pytest.mark.parametrize("case", BAD_VALUES)
def test_yaml_values_the_constructors_crash_on_are_errors_at_their_line(
    case: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    value, message = BAD_VALUES[case]
    task = tmp_path / "tasks.yaml"
    task.write_text(f"# {SENTINEL}\ntasks:\n- id: a\n  prompt: hi\n  odd: {value}\n")
    run = write_run(tmp_path / "run.yaml", write_tasks(tmp_path / "t.yaml", [SUM_TASK]), [{"name": "replay"}])
    run.write_text(f"# {SENTINEL}\n" + run.read_text() + f"  repeats: {value}\n")
    run_line = len(run.read_text().splitlines())
    for path, line, column in ((task, 5, 8), (run, run_line, 12)):
        assert main(["validate", str(path)]) == EXIT_BAD_INPUT
        captured = capsys.readouterr()
        assert captured.out == "" and SENTINEL not in captured.err
        expected = (
            f"not valid YAML: {message}: quote the value to keep it as text (line {line}, column {column})"
        )
        assert captured.err.strip() == f"error: {path}: {expected}"


def test_date_like_and_tagged_ids_keep_their_source_text(tmp_path: Path) -> None:
    path = write_tasks(tmp_path / "tasks.yaml", [{**SUM_TASK, "id": "x"}])
    path.write_text(path.read_text().replace("id: x", "id: 2024-02-30", 1))
    assert [t.id for t in load_tasks(path).tasks] == ["2024-02-30"]
