"""Fuzz ``atlas validate`` with seeded mutations of valid task files and run files.

Every format the loaders read is covered in equal shares: CSV, JSONL, Parquet (MCP-Atlas rows),
native YAML and JSON, and run files. Each case is a valid file with one to three structural
mutations (a field set to a hostile value, removed, retyped, nested deep, ...) and/or byte-level
ones (truncation, invalid UTF-8, NUL, alias bombs, deep flow nesting, corrupt Parquet pages).
The case runs the real ``atlas validate`` in-process under a time limit and is classified:

- accepted: exit 0;
- rejected with a clear error: exit 1 with every ``error:`` line naming file, row/line/task and
  field, or exit 2 naming the file (or the run file's spec path);
- traceback (an exception escaped), hang (over the time limit), unclear (an error without a
  where), internal (a row hit the loader's safety net): each must be 0.

``python tests/fuzz/fuzz_validate.py --cases 6000`` (``make fuzz``) prints the counts; the same
seed gives the same cases (``--case N`` replays one, ``--keep DIR`` saves the failing inputs).
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import io
import json
import random
import re
import shutil
import signal
import sys
import tempfile
import traceback
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import yaml

from atlasrun.cli import main as atlas

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/, also when run as a script
from conftest import SUM_TASK

FORMATS = ("csv", "jsonl", "parquet", "yaml", "json", "run")
ROW_ERROR = re.compile(
    r"^error: (?P<file>[^ ]+) (row|line|task) \d+(, item \d+)?(, task .+?)?, field .+?: .+"
)

NATIVE_TASK: dict[str, Any] = {**SUM_TASK, "limits": {"max_turns": 5, "tool_timeout_s": 10}}
TRAJECTORY = [
    {
        "role": "assistant",
        "content": "Reading.",
        "tool_calls": [
            {
                "id": "c1",
                "type": "function",
                "function": {"name": "filesystem_read_text_file", "arguments": '{"path": "/data/a.txt"}'},
            }
        ],
    },
    {"role": "tool", "tool_call_id": "c1", "content": [{"type": "text", "text": "12 30"}]},
]
ATLAS_ROW: dict[str, Any] = {
    "TASK": "atlas-1",
    "PROMPT": "Add the numbers in /data/a.txt.",
    "ENABLED_TOOLS": json.dumps(["filesystem_read_text_file", "calculator_calculate"]),
    "GTFA_CLAIMS": "['The sum is 42', 'The file has two numbers']",
    "TRAJECTORY": json.dumps(TRAJECTORY),
}
RUN_FILE: dict[str, Any] = {
    "apiVersion": "atlasrun.dev/v1alpha1",
    "kind": "AtlasRun",
    "metadata": {"name": "fuzz"},
    "spec": {
        "tasks": {"path": "tasks.yaml", "limit": 10},
        "models": [{"name": "replay"}, {"name": "gpt", "model": "openai/gpt-4o", "apiKeyEnv": "KEY"}],
        "judges": [{"name": "deterministic"}],
        "servers": {"enabled": ["filesystem", "calculator"]},
        "limits": {"maxTurns": 10, "toolTimeoutSeconds": 5},
        "repeats": 1,
        "parallelism": 2,
        "output": {"dir": "out"},
    },
}

# Values a hostile or careless file puts where text, numbers or lists belong.
NASTY: list[Callable[[random.Random], Any]] = [
    lambda r: None,
    lambda r: r.choice([0, -1, 1, 2**63, -(2**70), 10**400]),
    lambda r: r.choice([1.5, -0.0, float("inf"), float("nan"), 1e308]),
    lambda r: r.choice([True, False]),
    lambda r: r.choice(["", " ", "\n", "\t\t"]),
    lambda r: "t" * r.choice([244, 300, 5000]),  # longer than a file name
    lambda r: r.choice(["..", ".", "../../etc/passwd", "/", "a/../../b", "C:\\x", "~"]),
    lambda r: r.choice(["日本", "中国", "é" * 50, "\u202e", "\x00", "a\x1b[31m", "\ufeff", "😀"]),
    lambda r: r.choice(["010", "NO", "yes", "0x1F", "1e3", "null", "~", ".inf"]),
    lambda r: [],
    lambda r: {},
    lambda r: [r.choice(["x", 1, None, {}, []]) for _ in range(r.randint(1, 5))],
    lambda r: {r.choice(["a", "name", "id", "1"]): r.choice(["x", 1, None])},
    lambda r: _deep(r.randint(50, 400), r.choice([list, dict])),
    lambda r: ["x"] * r.choice([1000, 20000]),
    lambda r: "['unterminated",
    lambda r: "[" * r.randint(100, 5000),
    lambda r: '{"name": "bad tool name"}',
    lambda r: r.choice(["bad tool", "x_", "_y", "nounderscore", "a__b", "my_server_tool"]),
    lambda r: "x" * r.choice([10_000, 200_000]),
]


def _deep(depth: int, kind: type) -> Any:
    value: Any = "leaf"
    for _ in range(depth):
        value = [value] if kind is list else {"k": value}
    return value


def _paths(value: Any, prefix: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    yield prefix
    if isinstance(value, dict):
        for key, child in value.items():
            yield from _paths(child, (*prefix, key))
    elif isinstance(value, list):
        for i, child in enumerate(value[:8]):
            yield from _paths(child, (*prefix, i))


def _parent(value: Any, path: tuple[Any, ...]) -> Any:
    for key in path[:-1]:
        value = value[key]
    return value


def mutate_structure(doc: Any, rng: random.Random) -> Any:
    """One structural mutation at a random place in ``doc`` (a copy is returned)."""
    doc = copy.deepcopy(doc)
    paths = [p for p in _paths(doc) if p]
    if not paths:
        return rng.choice(NASTY)(rng)
    path = rng.choice(paths)
    parent, key = _parent(doc, path), path[-1]
    action = rng.random()
    if action < 0.6:
        parent[key] = rng.choice(NASTY)(rng)
    elif action < 0.75:
        del parent[key]
    elif action < 0.85 and isinstance(parent, dict):
        parent[rng.choice(["unknown", "ID", "Prompt", "extra", "__error__"])] = rng.choice(NASTY)(rng)
    elif action < 0.95 and isinstance(parent, list):
        parent.append(copy.deepcopy(parent[key]))  # duplicates (same task id twice, ...)
    else:
        parent[key] = (
            json.dumps(parent[key], default=str) if not isinstance(parent[key], str) else [parent[key]]
        )
    return doc


def mutate_bytes(data: bytes, rng: random.Random, fmt: str) -> bytes:
    """One byte-level mutation: the file as a careless editor or a hostile author leaves it."""
    choice = rng.randrange(10)
    pos = rng.randrange(len(data) + 1)
    if choice == 0:
        return data[:pos]  # truncated
    if choice == 1:
        return (
            data[:pos]
            + rng.choice([b"\xff", b"\xc3\x28", b"\xed\xa0\x80", b"\x00", b"\r", b"\xfe\xff"])
            + data[pos:]
        )
    if choice == 2:
        lines = data.split(b"\n")
        i = rng.randrange(len(lines))
        return b"\n".join(lines[:i] + [lines[i]] * rng.randint(0, 3) + lines[i + 1 :])
    if choice == 3:
        return bytes(b ^ 0xFF if rng.random() < 0.01 else b for b in data)  # scattered bit rot
    if choice == 4 and fmt in ("yaml", "run"):
        bomb = "a: &a [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
            f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join([f'*{chr(97 + i)}'] * 10)}]\n" for i in range(8)
        )
        return bomb.encode() + data.replace(b"fuzz", b"*i", 1).replace(b"sum-numbers", b"*i", 1)
    if choice == 5 and fmt in ("yaml", "run"):
        return (
            data[:pos]
            + rng.choice(
                [
                    b"!!python/object/apply:os.system ['true']",
                    b"\t",
                    b"? [a, b]\n: c\n",
                    b"---\n",
                    b"&x ",
                    b"*x",
                    b"!!binary zz",
                ]
            )
            + data[pos:]
        )
    if choice == 6 and fmt in ("json", "jsonl"):
        return (
            data[:pos]
            + rng.choice([b"NaN", b"[" * 50_000, b"}", b",", b'"\\ud800"', b"\n[1]\n42\nnull\n"])
            + data[pos:]
        )
    if choice == 7 and fmt == "csv":
        return data[:pos] + rng.choice([b'"', b'""', b",,,", b"\n\n", b"\x00", b";"]) + data[pos:]
    if choice == 8:
        return rng.choice([b"", b"\n", b"\xef\xbb\xbf", b"null", b"[]", b"{}", b"42", b"PAR1"])
    return data[:pos] + bytes(rng.randrange(256) for _ in range(rng.randint(1, 16))) + data[pos:]


def _csv_bytes(rows: list[Any]) -> bytes:
    import csv

    out = io.StringIO()
    keys = list(dict.fromkeys(k for r in rows if isinstance(r, dict) for k in r)) or ["TASK"]
    writer = csv.DictWriter(out, fieldnames=[str(k) for k in keys], extrasaction="ignore")
    writer.writeheader()
    for row in rows:
        if isinstance(row, dict):
            writer.writerow(
                {str(k): (v if isinstance(v, str) else json.dumps(v, default=str)) for k, v in row.items()}
            )
    return out.getvalue().encode("utf-8", "surrogatepass")


def _parquet_bytes(rows: list[Any], rng: random.Random) -> bytes:
    records = [r for r in rows if isinstance(r, dict)] or [{}]
    as_text = [{str(k): json.dumps(v, default=str) for k, v in r.items()} for r in records]
    for attempt in (records, as_text):  # mixed or unwritable types: store the values as text
        try:
            table = pa.Table.from_pylist(attempt)
            if rng.random() < 0.2:  # a binary column with invalid UTF-8 where text belongs
                table = table.append_column("PROMPT", pa.array([b"\xff\xfe"] * table.num_rows, pa.binary()))
            sink = io.BytesIO()
            pq.write_table(table, sink)
            return sink.getvalue()
        except (pa.ArrowException, TypeError, ValueError, OverflowError):
            continue
    return b"PAR1 not parquet"


def _dump(fmt: str, doc: Any, rng: random.Random) -> bytes:
    if fmt == "csv":
        return _csv_bytes(doc)
    if fmt == "parquet":
        return _parquet_bytes(doc, rng)
    if fmt == "jsonl":
        lines = doc if isinstance(doc, list) else [doc]
        return "".join(json.dumps(r, default=str) + "\n" for r in lines).encode("utf-8", "surrogatepass")
    if fmt == "json":
        return json.dumps(doc, default=str).encode("utf-8", "surrogatepass")
    try:
        return yaml.safe_dump(doc, sort_keys=False, allow_unicode=True).encode("utf-8", "surrogatepass")
    except (yaml.YAMLError, RecursionError, ValueError):
        return json.dumps(doc, default=str).encode()  # JSON is YAML too


def _seed_doc(fmt: str) -> Any:
    if fmt in ("csv", "jsonl", "parquet"):
        return (
            [dict(ATLAS_ROW), {**ATLAS_ROW, "TASK": "atlas-2"}]
            if fmt != "jsonl"
            else [
                dict(ATLAS_ROW),
                {**NATIVE_TASK, "id": "native-1"},
            ]
        )
    if fmt in ("yaml", "json"):
        return {"tasks": [dict(NATIVE_TASK), {**NATIVE_TASK, "id": "second"}]}
    return copy.deepcopy(RUN_FILE)


@dataclass
class Case:
    index: int
    fmt: str
    path: Path


def make_case(index: int, seed: int, root: Path) -> Case:
    rng = random.Random(f"{seed}:{index}")
    fmt = FORMATS[index % len(FORMATS)]
    folder = root / f"case{index}"
    folder.mkdir()
    doc = _seed_doc(fmt)
    for _ in range(rng.randint(0 if rng.random() < 0.3 else 1, 3)):
        doc = mutate_structure(doc, rng)
    data = _dump(fmt, doc, rng)
    if rng.random() < 0.45:
        data = mutate_bytes(data, rng, fmt)
    suffix = {"run": "yaml"}.get(fmt, fmt)
    path = folder / f"{'run' if fmt == 'run' else 'tasks'}.{suffix}"
    path.write_bytes(data)
    if fmt == "run":  # the task file it points at: valid, or itself a mutated one
        tasks_doc = _seed_doc("yaml") if rng.random() < 0.7 else mutate_structure(_seed_doc("yaml"), rng)
        (folder / "tasks.yaml").write_bytes(_dump("yaml", tasks_doc, rng))
    return Case(index, fmt, path)


class Hang(Exception):
    pass


def _alarm(signum: int, frame: FrameType | None) -> None:
    raise Hang()


@dataclass
class Outcome:
    kind: str  # accepted | rejected | traceback | hang | unclear | internal
    detail: str = ""
    row_level: bool = False


def classify(case: Case, code: int | None, out: str, err: str) -> Outcome:
    lines = [ln for ln in (out + err).splitlines() if ln.startswith("error: ")]
    if "internal error reading this row" in out + err:
        return Outcome("internal", next(ln for ln in lines if "internal error" in ln))
    if code == 0:
        return Outcome("accepted")
    if code == 1:
        # A run file's rows are named in its task file, which sits beside it.
        files = {p.name for p in case.path.parent.iterdir()}
        bad = [ln for ln in lines if not (m := ROW_ERROR.match(ln)) or m["file"] not in files]
        if bad:
            return Outcome("unclear", bad[0])
        if not lines and str(case.path) not in out:
            return Outcome("unclear", out[-300:])
        return Outcome("rejected", row_level=bool(lines))
    if code == 2:
        if len(lines) != 1 or str(case.path.parent) not in lines[0]:
            return Outcome("unclear", "; ".join(lines) or err[-300:])
        return Outcome("rejected")
    return Outcome("unclear", f"exit {code}: {err[-300:]}")


def run_case(case: Case, time_limit_s: float) -> Outcome:
    """Run one case. A hang is ``time_limit_s`` of CPU (a busy loop), or 6x that of wall clock (a
    blocked read): CPU time, so a machine busy with other work does not make slow cases hangs."""
    out, err = io.StringIO(), io.StringIO()
    signal.setitimer(signal.ITIMER_VIRTUAL, time_limit_s)
    signal.setitimer(signal.ITIMER_REAL, 6 * time_limit_s)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = atlas(["validate", str(case.path)])
    except Hang:
        return Outcome("hang", f"over {time_limit_s:g} s of CPU or {6 * time_limit_s:g} s")
    except BaseException:  # anything escaping the CLI is a traceback for the user
        return Outcome("traceback", traceback.format_exc(limit=-3))
    finally:
        signal.setitimer(signal.ITIMER_VIRTUAL, 0)
        signal.setitimer(signal.ITIMER_REAL, 0)
    return classify(case, code, out.getvalue(), err.getvalue())


@dataclass
class Report:
    cases: int = 0
    by_format: Counter[str] = field(default_factory=Counter)
    kinds: Counter[str] = field(default_factory=Counter)
    row_level: int = 0
    failures: list[tuple[Case, Outcome]] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not any(self.kinds[k] for k in ("traceback", "hang", "unclear", "internal"))

    def lines(self) -> list[str]:
        k = self.kinds
        return [
            f"cases: {self.cases} ({', '.join(f'{f} {self.by_format[f]}' for f in FORMATS)})",
            f"rejected with a clear error: {k['rejected']} "
            f"({self.row_level} by row/line and field, {k['rejected'] - self.row_level} whole-file)",
            f"accepted: {k['accepted']}",
            f"tracebacks: {k['traceback']}",
            f"hangs: {k['hang']}",
            f"errors without file/row/field: {k['unclear']}",
            f"rows caught by the loader's safety net: {k['internal']}",
        ]


def fuzz(cases: int, seed: int, time_limit_s: float = 10.0, only: int | None = None) -> Report:
    report = Report()
    previous = signal.signal(signal.SIGALRM, _alarm), signal.signal(signal.SIGVTALRM, _alarm)
    root = Path(tempfile.mkdtemp(prefix="atlas-fuzz-"))
    try:
        for index in [only] if only is not None else range(cases):
            case = make_case(index, seed, root)
            outcome = run_case(case, time_limit_s)
            report.cases += 1
            report.by_format[case.fmt] += 1
            report.kinds[outcome.kind] += 1
            report.row_level += outcome.row_level
            if outcome.kind not in ("accepted", "rejected"):
                report.failures.append((case, outcome))
            else:
                shutil.rmtree(case.path.parent)
    finally:
        signal.signal(signal.SIGALRM, previous[0])
        signal.signal(signal.SIGVTALRM, previous[1])
    report.root = root  # type: ignore[attr-defined]
    return report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--cases", type=int, default=6000)
    parser.add_argument("--seed", type=int, default=20261123)
    parser.add_argument(
        "--time-limit", type=float, default=10.0, help="seconds per case before it counts as a hang"
    )
    parser.add_argument("--case", type=int, help="replay one case by index")
    parser.add_argument("--keep", type=Path, help="copy failing inputs here")
    args = parser.parse_args(argv)
    report = fuzz(args.cases, args.seed, args.time_limit, args.case)
    print(f"atlas validate fuzz, seed {args.seed}")
    for line in report.lines():
        print(f"  {line}")
    for case, outcome in report.failures[:20]:
        print(f"FAIL case {case.index} ({case.fmt}, {outcome.kind}): {outcome.detail.strip()[-600:]}")
    if args.keep and report.failures:
        for case, _ in report.failures:
            shutil.copytree(case.path.parent, args.keep / case.path.parent.name, dirs_exist_ok=True)
    shutil.rmtree(report.root, ignore_errors=True)  # type: ignore[attr-defined]
    return 0 if report.ok else 1


if __name__ == "__main__":
    sys.exit(main())
