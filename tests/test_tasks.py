"""Task loading: MCP-Atlas rows as they are, native files, and precise rejections."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from atlasrun.tasks.fields import FieldError, parse_claims
from atlasrun.tasks.loader import load_tasks

TRAJ = [
    {
        "role": "assistant",
        "content": "Reading.",
        "tool_calls": [
            {
                "id": "c1",
                "type": "function",
                "function": {
                    "name": "filesystem_read_text_file",
                    "arguments": json.dumps({"path": "/data/a.txt"}),
                },
            }
        ],
    },
    {"role": "tool", "tool_call_id": "c1", "content": [{"type": "text", "text": "hello"}]},
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "c2",
                "type": "function",
                "function": {"name": "calculator_calculate", "arguments": '{"expression": "1+1"}'},
            },
            {
                "id": "c3",
                "type": "function",
                "function": {"name": "calculator_calculate", "arguments": '{"expression": "2+2"}'},
            },
        ],
    },
    {"role": "tool", "tool_call_id": "c2", "content": [{"type": "text", "text": "2"}]},
    {"role": "tool", "tool_call_id": "c3", "content": [{"type": "text", "text": "oops", "isError": True}]},
]
TOOLS = ["filesystem_read_text_file", "filesystem_list_directory", "calculator_calculate"]


def atlas_row(task: str, **overrides: str) -> dict[str, str]:
    row = {
        "TASK": task,
        "PROMPT": f"prompt {task}",
        "ENABLED_TOOLS": json.dumps(TOOLS),
        "GTFA_CLAIMS": "['The file says hello', 'The sum is 2']",
        "TRAJECTORY": json.dumps(TRAJ),
    }
    row.update(overrides)
    return row


def write_csv(path: Path, rows: list[dict[str, str]]) -> Path:
    with path.open("w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    return path


def test_atlas_csv_loads_trajectory_claims_and_derived_facts(tmp_path: Path) -> None:
    loaded = load_tasks(write_csv(tmp_path / "t.csv", [atlas_row("t1")]))
    assert loaded.rejected == []
    (task,) = loaded.tasks
    assert task.claims == ["The file says hello", "The sum is 2"]
    assert task.required_servers == ["filesystem", "calculator"]
    assert task.category == "multi_server/sequential"
    calls = task.reference_calls()
    assert [c.output for c in calls] == ["hello", "2", "oops"]
    assert calls[2].is_error and calls[0].arguments == {"path": "/data/a.txt"}
    assert len(task.reference_trajectory[1].calls) == 2  # parallel calls stay in one turn


def test_malformed_claims_row_is_named_and_the_rest_still_load(tmp_path: Path) -> None:
    rows = [atlas_row("t1"), atlas_row("t2", GTFA_CLAIMS="['unclosed claim"), atlas_row("t3")]
    loaded = load_tasks(write_csv(tmp_path / "tasks.csv", rows))
    assert [t.id for t in loaded.tasks] == ["t1", "t3"]
    (bad,) = loaded.rejected
    assert bad.where == "tasks.csv line 3" and bad.field == "GTFA_CLAIMS" and bad.task_id == "t2"
    assert "tasks.csv line 3, task t2, field GTFA_CLAIMS: " in str(bad)


@pytest.mark.parametrize(
    "field,value,expect",
    [
        ("PROMPT", "   ", "empty"),
        (
            "ENABLED_TOOLS",
            json.dumps(["calculator", "filesystem_read_text_file"]),
            "not of the form server_tool",
        ),
        ("ENABLED_TOOLS", json.dumps(["filesystem_list_directory"]), "unknown tool"),
        ("TRAJECTORY", '[{"role": "assistant", "tool_calls": [{"function": {}}]}]', "no function name"),
    ],
)
def test_bad_fields_are_rejected_with_row_and_field(
    tmp_path: Path, field: str, value: str, expect: str
) -> None:
    loaded = load_tasks(write_csv(tmp_path / "t.csv", [atlas_row("ok"), atlas_row("bad", **{field: value})]))
    assert [t.id for t in loaded.tasks] == ["ok"]
    (bad,) = loaded.rejected
    expected_field = "TRAJECTORY" if expect == "unknown tool" else field
    assert (bad.where, bad.task_id, bad.field) == ("t.csv line 3", "bad", expected_field)
    assert expect in bad.message


def test_jsonl_and_parquet_hold_the_same_rows(tmp_path: Path) -> None:
    rows = [atlas_row("a"), atlas_row("b")]
    jsonl = tmp_path / "t.jsonl"
    jsonl.write_text("\n".join(json.dumps(r) for r in rows) + "\n{not json\n")
    parquet = tmp_path / "t.parquet"
    pq.write_table(pa.Table.from_pylist(rows), parquet)
    from_jsonl, from_parquet = load_tasks(jsonl), load_tasks(parquet)
    assert [t.id for t in from_jsonl.tasks] == [t.id for t in from_parquet.tasks] == ["a", "b"]
    assert from_jsonl.rejected[0].where == "t.jsonl line 3"


@pytest.mark.parametrize(
    "raw,expect",
    [
        ("['ca a', 'cb b']", ["ca a", "cb b"]),
        ('["ca a", "cb b"]', ["ca a", "cb b"]),
        (["['ca a', \"it's b\"]"], ["ca a", "it's b"]),  # the public split wraps the literal in a list
        ("- ca a\n- cb b\n\n", ["ca a", "cb b"]),
        ("1. ca a\n2) cb b", ["ca a", "cb b"]),
        ("• ca a\n• cb b", ["ca a", "cb b"]),
        # MCP-Atlas: ';' (and '||') separate claims in plain text
        ("The sum is 42; The mean is 7 ;", ["The sum is 42", "The mean is 7"]),
        ("first claim || second claim", ["first claim", "second claim"]),
        ("- a bullet; with a semicolon\n- another one", ["a bullet; with a semicolon", "another one"]),
    ],
)
def test_claim_encodings(raw: object, expect: list[str]) -> None:
    assert parse_claims(raw) == expect


def test_short_and_empty_claims_are_skipped_with_a_warning_not_rejected() -> None:
    warnings: list[str] = []
    assert parse_claims(["The sum is 42", "", "  ", "abc", None, "abcd"], warnings.append) == [
        "The sum is 42",
        "abcd",
    ]
    assert warnings == ["skipped 4 claim(s) of 3 characters or fewer: ['', '', 'abc', '']"]
    with pytest.raises(FieldError, match=r"no claims \(only too-short ones"):
        parse_claims("['ab', '']")
    with pytest.raises(FieldError, match="claim 1 is not a string"):
        parse_claims(["The sum is 42", 7])


def test_native_yaml_with_extras_and_duplicate_ids(tmp_path: Path) -> None:
    path = tmp_path / "tasks.yaml"
    path.write_text("""
tasks:
  - id: n1
    prompt: Add the numbers in /data/a.txt
    domain: Analytics
    enabled_tools: [filesystem_read_text_file, filesystem_list_directory, calculator_calculate]
    distractors: [filesystem_list_directory]
    claims: ["The total is 3"]
    reference_answer: The total is 3.
    limits: {max_tool_calls: 5}
    reference_trajectory:
      - calls:
          - {name: filesystem_read_text_file, arguments: {path: /data/a.txt}}
      - {name: calculator_calculate, arguments: {expression: "1+2"}}
  - id: n1
    prompt: again
    enabled_tools: [calculator_calculate]
    claims: [the claim]
  - id: n3
    prompt: distractor not on surface
    enabled_tools: [calculator_calculate]
    distractors: [filesystem_list_directory]
    claims: [the claim]
""")
    loaded = load_tasks(path)
    (task,) = loaded.tasks
    assert task.domain == "Analytics" and task.limits.max_tool_calls == 5
    assert task.category == "multi_server/sequential"
    assert [(r.where, r.field) for r in loaded.rejected] == [
        ("tasks.yaml line 15", "id"),
        ("tasks.yaml line 19", "distractors"),
    ]


def test_legacy_tool_names_are_mapped_like_mcp_atlas(tmp_path: Path) -> None:
    legacy = [
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "m1", "type": "function", "function": {"name": "MongoDB_find", "arguments": "{}"}},
                {
                    "id": "b1",
                    "type": "function",
                    "function": {"name": "brave_brave_web_search", "arguments": "{}"},
                },
            ],
        },
        {"role": "tool", "tool_call_id": "m1", "content": [{"type": "text", "text": "[]"}]},
        {"role": "tool", "tool_call_id": "b1", "content": [{"type": "text", "text": "results"}]},
    ]
    tools = ["MongoDB_find", "MongoDB_list-collections", "brave_brave_web_search", "calculator_calculate"]
    row = atlas_row("legacy", ENABLED_TOOLS=json.dumps(tools), TRAJECTORY=json.dumps(legacy))
    loaded = load_tasks(write_csv(tmp_path / "t.csv", [row]))
    assert not loaded.rejected
    (task,) = loaded.tasks
    assert task.enabled_tools == [
        "mongodb_find",
        "mongodb_list-collections",
        "brave-search_brave_web_search",
        "calculator_calculate",
    ]
    assert [c.name for turn in task.reference_trajectory for c in turn.calls] == [
        "mongodb_find",
        "brave-search_brave_web_search",
    ]
