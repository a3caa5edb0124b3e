"""Bad input: one bad row never sinks the file, and every error names the file, the row and the field.

Each case here ended in a traceback or an aborted run before (issue 9, "Bad input").
"""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml

from atlasrun.cli import main
from atlasrun.errors import InputError
from atlasrun.runner.local import run_local
from atlasrun.runspec.run import load_run_spec
from atlasrun.tasks.loader import load_tasks
from atlasrun.tasks.sizes import ID_LIMIT
from conftest import SUM_TASK, write_run, write_tasks

GOOD = {**SUM_TASK, "id": "good"}


def _good_line() -> bytes:
    return json.dumps(GOOD).encode() + b"\n"


def test_jsonl_lines_that_are_not_objects_or_not_utf8_or_too_deep_are_rejected_by_line(
    tmp_path: Path,
) -> None:
    path = tmp_path / "tasks.jsonl"
    path.write_bytes(
        b"[1, 2]\n"
        + b"42\n"
        + b'"just a string"\n'
        + b'{"id": "bad-\xff\xfe", "prompt": "x"}\n'
        + b"[" * 100_000
        + b"]" * 100_000
        + b"\n"
        + _good_line()
    )
    loaded = load_tasks(path)
    assert [t.id for t in loaded.tasks] == ["good"]
    messages = [str(r) for r in loaded.rejected]
    assert len(messages) == 5
    assert (
        messages[0].startswith("tasks.jsonl line 1, field (row): ")
        and "not a JSON object (got list)" in messages[0]
    )
    assert messages[1].startswith("tasks.jsonl line 2, field (row): ") and "(got int)" in messages[1]
    assert messages[3].startswith("tasks.jsonl line 4, field (row): ") and "UTF-8" in messages[3]
    assert messages[4].startswith("tasks.jsonl line 5, field (row): ") and "nested deeper" in messages[4]


def test_deeply_nested_json_and_yaml_documents_are_clear_errors(tmp_path: Path) -> None:
    deep_json = tmp_path / "tasks.json"
    deep_json.write_text("[" * 100_000 + "]" * 100_000)
    deep_yaml = tmp_path / "tasks.yaml"
    deep_yaml.write_text("tasks:\n" + "- " * 5_000 + "x\n")
    flow_yaml = tmp_path / "flow.yaml"
    flow_yaml.write_text("[" * 100_000 + "]" * 100_000)
    for path in (deep_json, deep_yaml, flow_yaml):
        with pytest.raises(InputError) as caught:
            load_tasks(path)
        assert caught.value.where == str(path) and "nested deeper" in str(caught.value)


def test_invalid_utf8_rejects_one_csv_row_and_names_the_line_of_a_yaml_file(tmp_path: Path) -> None:
    csv_path = tmp_path / "tasks.csv"
    header = b"TASK,PROMPT,ENABLED_TOOLS,GTFA_CLAIMS,TRAJECTORY\n"
    row = b'%s,What is 1+1?,"[""calculator_calculate""]","[""The answer is 2""]",\n'
    csv_path.write_bytes(header + row % b"t-\xff" + row % b"t-ok")
    loaded = load_tasks(csv_path)
    assert [t.id for t in loaded.tasks] == ["t-ok"]
    assert str(loaded.rejected[0]).startswith("tasks.csv line 2, field TASK: ") and "TASK" in str(
        loaded.rejected[0]
    )

    yaml_path = tmp_path / "tasks.yaml"
    yaml_path.write_bytes(b"tasks:\n  - id: a\n    prompt: caf\xe9\n")
    with pytest.raises(InputError, match=r"not valid UTF-8 at line 3") as caught:
        load_tasks(yaml_path)
    assert caught.value.where == str(yaml_path)


def test_corrupt_parquet_is_a_clear_error_naming_the_file(tmp_path: Path) -> None:
    path = tmp_path / "tasks.parquet"
    path.write_bytes(b"PAR1" + b"\x00garbage" * 100 + b"PAR1")
    with pytest.raises(InputError, match="not a readable Parquet file") as caught:
        load_tasks(path)
    assert caught.value.where == str(path)


BOMB = "a: &a [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join([f'*{chr(97 + i)}'] * 10)}]\n" for i in range(9)
)


def test_yaml_alias_bomb_is_refused_with_small_memory(tmp_path: Path) -> None:
    path = tmp_path / "tasks.yaml"
    path.write_text(BOMB + "tasks: [{id: x, prompt: *j}]\n")
    # The peak RSS of this process's own memory (VmHWM): ru_maxrss would also count the memory of
    # the pytest process it was forked from (Linux carries the high-water mark across exec).
    code = (
        "import pathlib, re, sys\n"
        "from atlasrun.tasks.loader import load_tasks\n"
        "from atlasrun.errors import InputError\n"
        "try:\n    load_tasks(sys.argv[1])\nexcept InputError as exc:\n    print(exc)\n"
        "print(re.search(r'VmHWM:\\s+(\\d+) kB', pathlib.Path('/proc/self/status').read_text())[1])\n"
    )
    done = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True, text=True, check=True)
    message, max_rss_kb = done.stdout.strip().splitlines()
    assert message.startswith(f"{path}: not valid YAML: aliases expand this document to ")
    assert message.endswith("write the values out (line 1, column 1)")
    assert int(max_rss_kb) < 200_000, f"loading an alias bomb took {int(max_rss_kb) // 1024} MB"
    run_file = tmp_path / "run.yaml"  # run files too
    run_file.write_text(BOMB + "spec: {models: [{name: *j}]}\n")
    with pytest.raises(InputError, match="aliases"):
        load_run_spec(run_file)


def test_yaml_ids_and_text_keep_their_source_text(tmp_path: Path) -> None:
    path = tmp_path / "tasks.yaml"
    base = yaml.safe_dump({k: v for k, v in GOOD.items() if k not in ("id", "prompt", "claims")})
    entries = [
        ("010", "010"),
        ("NO", "NO"),
        ("1e3", "1e3"),
        ("0x1F", "0x1F"),
    ]
    docs = []
    for raw, _ in entries:
        body = "\n".join("  " + line for line in base.splitlines())
        docs.append(f"- id: {raw}\n  prompt: 42\n  claims: [0100, false]\n{body}")
    path.write_text("\n".join(docs) + "\n")
    loaded = load_tasks(path)
    assert loaded.rejected == []
    assert [t.id for t in loaded.tasks] == [expect for _, expect in entries]
    assert all(t.prompt == "42" and t.claims == ["0100", "false"] for t in loaded.tasks)
    # Numbers inside tool arguments keep their types.
    assert loaded.tasks[0].reference_trajectory[0].calls[0].arguments == {"path": "/data/numbers.txt"}


def test_non_text_prompt_in_json_is_rejected_naming_the_field(tmp_path: Path) -> None:
    path = tmp_path / "tasks.json"
    path.write_text(json.dumps([{**GOOD, "id": "p", "prompt": 42}, {**GOOD, "id": True}, GOOD]))
    loaded = load_tasks(path)
    assert [t.id for t in loaded.tasks] == ["good"]
    assert [str(r) for r in loaded.rejected] == [
        "tasks.json line 1, item 1, task p, field prompt: expected text, got int 42",
        "tasks.json line 1, item 2, field id: expected text, got bool True",
    ]


@pytest.mark.parametrize(
    ("spec", "where"),
    [
        ({"models": [{"name": ".."}]}, "spec.models.0.name"),
        ({"models": [{"name": "replay"}], "judges": [{"name": "."}]}, "spec.judges.0.name"),
        ({"models": [{"name": "replay"}], "output": {"dir": "../../elsewhere"}}, "spec.output.dir"),
    ],
)
def test_path_unsafe_names_in_run_files_are_rejected(
    tmp_path: Path, spec: dict[str, object], where: str
) -> None:
    tasks = write_tasks(tmp_path / "tasks.yaml", [GOOD])
    run_file = tmp_path / "run.yaml"
    run_file.write_text(yaml.safe_dump({"kind": "AtlasRun", "spec": {"tasks": {"path": str(tasks)}, **spec}}))
    with pytest.raises(InputError) as caught:
        load_run_spec(run_file)
    assert caught.value.where == str(run_file) and where in str(caught.value)
    run_file.write_text(
        yaml.safe_dump(
            {
                "kind": "AtlasRun",
                "metadata": {"name": "../up"},
                "spec": {"tasks": {"path": str(tasks)}, "models": [{"name": "m"}]},
            }
        )
    )
    with pytest.raises(InputError, match=r"metadata\.name"):
        load_run_spec(run_file)


def test_cli_model_named_dotdot_and_out_escaping_are_clear_errors(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run_file = write_run(
        tmp_path / "run.yaml", write_tasks(tmp_path / "tasks.yaml", [GOOD]), [{"name": "replay"}]
    )
    assert main(["run", str(run_file), "--model", "..", "--out", str(tmp_path / "out")]) == 2
    assert "--model" in capsys.readouterr().err
    assert main(["run", str(run_file), "--out", "runs/../../x"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: --out: ") and "'..'" in err
    assert not (tmp_path / "out").exists()


@pytest.mark.servers
def test_task_id_longer_than_a_file_name_never_aborts_the_run(tmp_path: Path, data_dir: Path) -> None:
    long_id = "t" * ID_LIMIT  # the longest id accepted: longer than a file name may be (255 bytes)
    run_file = write_run(
        tmp_path / "run.yaml",
        write_tasks(tmp_path / "tasks.yaml", [{**GOOD, "id": long_id}, GOOD]),
        [{"name": "replay"}],
    )
    for _ in range(2):  # the run and a resume
        outcome = run_local(load_run_spec(run_file), tmp_path / "out", data_dir, progress=False)
        by_id = {r.task_id: r for r in outcome.results}
        assert by_id["good"].status == "scored" and by_id["good"].passed
        assert long_id in by_id  # exact id kept in the record, whatever became of its file name
        if by_id[long_id].status == "error":
            assert "name too long" in (by_id[long_id].reason or "")


def test_task_ids_and_texts_every_later_stage_could_not_write_are_rejected_by_field(tmp_path: Path) -> None:
    """Before (issue 24): a JSONL id with a lone surrogate passed validate, then every run and
    resume died writing its record (UnicodeEncodeError); a 5,000-character id was printed whole."""
    rows = [
        {**GOOD, "id": "bad\ud800id"},
        {**GOOD, "id": "t" * (ID_LIMIT + 1)},
        {**GOOD, "id": "bell\u0007"},
        {**GOOD, "id": "rtl\u202eid"},
        {**GOOD, "id": "claim-surrogate", "claims": ["The sum is \udc00 42"]},
        {**GOOD, "id": "fine"},
    ]
    path = tmp_path / "tasks.jsonl"
    path.write_bytes(b"".join(json.dumps(r).encode() + b"\n" for r in rows))  # \\ud800 stays escaped
    loaded = load_tasks(path)
    assert [t.id for t in loaded.tasks] == ["fine"]
    reasons = [(r.field, str(r)) for r in loaded.rejected]
    assert [f for f, _ in reasons] == ["id", "id", "id", "id", "claims"], reasons
    assert "not printable ('\\ud800')" in reasons[0][1] and "lone surrogate" in reasons[0][1]
    assert f"the id is {ID_LIMIT + 1} characters long; at most {ID_LIMIT}" in reasons[1][1]
    assert "'\\x07'" in reasons[2][1] and "'\\u202e'" in reasons[3][1]
    assert "not valid Unicode (a lone surrogate '\\udc00')" in reasons[4][1]
    assert all("t" * 300 not in text and "\u202e" not in text for _, text in reasons)
    # YAML !!binary makes bytes, which no record can hold as JSON: rejected by field, not an
    # "internal error reading this row"
    binary = tmp_path / "binary.yaml"
    binary.write_text(
        "tasks:\n"
        "- id: bytes-in-args\n"
        "  prompt: Sum the numbers\n"
        "  enabled_tools: [calculator_calculate]\n"
        "  claims: [The sum is 42]\n"
        "  reference_trajectory:\n"
        "  - calls:\n"
        "    - name: calculator_calculate\n"
        "      arguments: {expression: !!binary gAE=}\n"
    )
    (rejected,) = load_tasks(binary).rejected
    assert rejected.field == "reference_trajectory" and "cannot be written as JSON" in str(rejected), rejected


def _mount_tmpfs(path: Path, size: str) -> None:
    path.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)], capture_output=True
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.decode().strip()}")


@pytest.mark.servers
def test_full_disk_is_a_clear_error_and_the_run_resumes_after_space_is_freed(
    tmp_path: Path, data_dir: Path
) -> None:
    tasks = [{**GOOD, "id": f"task-{i:02d}"} for i in range(16)]
    run_file = write_run(
        tmp_path / "run.yaml", write_tasks(tmp_path / "tasks.yaml", tasks), [{"name": "replay"}]
    )
    disk = tmp_path / "disk"
    _mount_tmpfs(disk, "48k")
    try:
        out = disk / "out"
        cmd = [sys.executable, "-m", "atlasrun.cli", "run", str(run_file), "--data-dir", str(data_dir)]
        cmd += ["--out", str(out), "--quiet"]
        full = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
        assert full.returncode == 2, full.stderr
        assert "Traceback" not in full.stderr
        error = full.stderr.strip().splitlines()[-1]
        assert error.startswith(f"error: cannot write {out}/") and "No space left on device" in error
        assert "run the same command again to resume" in error
        subprocess.run(["mount", "-o", "remount,size=16m", str(disk)], check=True)
        resumed = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
        assert resumed.returncode == 0, resumed.stderr
        lines = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
        final = {r["task_id"]: r for r in lines}
        assert sorted(final) == [t["id"] for t in tasks]
        assert all(r["status"] == "scored" for r in final.values())
    finally:
        subprocess.run(["umount", str(disk)], check=False)


def test_a_malformed_trajectory_or_tool_list_says_what_is_wrong_with_the_field(tmp_path: Path) -> None:
    """Before (issue 24): "internal error reading this row" for ``"tool_calls": 5``, and
    ``<ast.Name object at 0x7f...>`` for a bare word."""
    base = {
        "TASK": "q1",
        "PROMPT": "Sum the numbers in /data/numbers.txt",
        "ENABLED_TOOLS": json.dumps(["calculator_calculate"]),
        "GTFA_CLAIMS": "['The sum is 42']",
        "TRAJECTORY": "",
    }
    rows = [
        {
            **base,
            "TASK": "calls-not-a-list",
            "TRAJECTORY": json.dumps([{"role": "assistant", "tool_calls": 5}]),
        },
        {**base, "TASK": "bare-tools", "ENABLED_TOOLS": "calculator_calculate"},
        {**base, "TASK": "bare-trajectory", "TRAJECTORY": "hello"},
        {**base, "TASK": "syntax", "GTFA_CLAIMS": "['unclosed"},
    ]
    path = tmp_path / "tasks.csv"
    with path.open("w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(base))
        writer.writeheader()
        writer.writerows(rows)
    found = {r.task_id: (r.field, str(r)) for r in load_tasks(path).rejected}
    assert found["calls-not-a-list"][0] == "TRAJECTORY"
    assert "message 0: tool_calls must be a list, got int" in found["calls-not-a-list"][1]
    assert found["bare-tools"][0] == "ENABLED_TOOLS"
    for key in ("bare-tools", "bare-trajectory"):
        assert "unquoted text or an expression" in found[key][1], found[key]
    assert "not a JSON or Python list:" in found["syntax"][1] and "(line 1, column" in found["syntax"][1]
    assert not any("internal error" in text or "object at 0x" in text for _, text in found.values()), found


def test_row_errors_name_the_line_and_task_id_in_every_format(tmp_path: Path) -> None:
    """``line 7, task q3-bad-claims, field GTFA_CLAIMS``: the 1-based line the row starts on (the
    header is line 1; a quoted value spanning lines counts them), the id, the field. Parquet has
    no lines: its data rows count from 1."""
    atlas = {
        "TASK": "q1",
        "PROMPT": "Sum the numbers\nin /data/numbers.txt",  # two lines inside one CSV row
        "ENABLED_TOOLS": json.dumps(["calculator_calculate"]),
        "GTFA_CLAIMS": "['The sum is 42']",
        "TRAJECTORY": "",
    }
    rows = [atlas, {**atlas, "TASK": "q2"}, {**atlas, "TASK": "q3-bad-claims", "GTFA_CLAIMS": "['unclosed"}]
    csv_path = tmp_path / "tasks.csv"
    with csv_path.open("w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(atlas))
        writer.writeheader()
        fh.write("\n")  # a blank line the reader skips still counts
        writer.writerows(rows)
    jsonl_path = tmp_path / "tasks.jsonl"
    jsonl_path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    parquet_path = tmp_path / "tasks.parquet"
    pq.write_table(pa.Table.from_pylist(rows), parquet_path)
    native = [{**GOOD, "id": "n1"}, {**GOOD, "id": "n2"}, {**GOOD, "id": "q3-bad-claims", "claims": []}]
    yaml_path = tmp_path / "tasks.yaml"
    yaml_path.write_text("# tasks\n" + yaml.safe_dump({"tasks": native}, sort_keys=False))
    json_path = tmp_path / "tasks.json"
    json_path.write_text(json.dumps({"tasks": native}, indent=1))
    yaml_line = 1 + yaml_path.read_text().splitlines().index("- id: q3-bad-claims")
    # the item's "{" is on the line before its id (0-based index of the id line = 1-based "{" line)
    json_line = next(i for i, ln in enumerate(json_path.read_text().splitlines()) if "q3-bad-claims" in ln)
    expected = {
        csv_path: "tasks.csv line 7, task q3-bad-claims, field GTFA_CLAIMS: ",
        jsonl_path: "tasks.jsonl line 3, task q3-bad-claims, field GTFA_CLAIMS: ",
        parquet_path: "tasks.parquet row 3, task q3-bad-claims, field GTFA_CLAIMS: ",
        yaml_path: f"tasks.yaml line {yaml_line}, task q3-bad-claims, field claims: ",
        json_path: f"tasks.json line {json_line}, task q3-bad-claims, field claims: ",
    }
    for path, prefix in expected.items():
        loaded = load_tasks(path)
        assert len(loaded.tasks) == 2, path
        (bad,) = loaded.rejected
        assert str(bad).startswith(prefix), (str(bad), prefix)
        assert bad.task_id == "q3-bad-claims"
    # The CLI prints the same, and an id that cannot be shown plainly is quoted.
    odd = tmp_path / "odd.jsonl"
    odd.write_text(json.dumps({**GOOD, "id": "has space", "claims": []}) + "\n")
    assert str(load_tasks(odd).rejected[0]).startswith("odd.jsonl line 1, task 'has space', field claims: ")
