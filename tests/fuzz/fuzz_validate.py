"""Fuzz ``atlas validate`` with seeded mutations of valid task files and run files.

Every format the loaders read is covered in equal shares: CSV, JSONL, Parquet (MCP-Atlas rows),
native YAML and JSON, and run files. Each case is a valid file with one to three structural
mutations (a field set to a hostile value, removed, retyped, nested deep, ...) and/or byte-level
ones (truncation, invalid UTF-8, NUL, alias bombs, deep flow nesting, corrupt Parquet pages).
The classes of ``hostile`` (special files, tagged YAML values, invalid Unicode in every string
field, huge integers, deep nesting, damaged results directories) take equal shares too.
Each case runs in a forked child (its peak RSS is measured; a child is killed past the time
limit) with the real ``atlas validate`` (or, for results directories, the commands that read one)
in-process, and is classified:

- accepted: exit 0;
- rejected with a clear error: exit 1 with every ``error:`` line naming file, row/line/task and
  field, or exit 2 naming the file (or the run file's spec path);
- traceback (an exception escaped), hang (over the time limit), unclear (an error without a
  where), internal (a row hit the loader's safety net), over_1gb (the child's peak RSS over
  1 GB), miscounted (a damaged results directory counted an item it never had), control (a
  message echoing a control, line-separator or bidi character from the input raw): each must be 0.

``python tests/fuzz/fuzz_validate.py --cases 6000`` (``make fuzz``) prints the counts; the same
seed gives the same cases (``--case N`` replays one, ``--keep DIR`` saves the failing inputs).
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import io
import json
import os
import random
import re
import select
import shutil
import signal
import sys
import tempfile
import time
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
from atlasrun.errors import InputError
from atlasrun.scoring.store import ResultsDir, task_record_name
from atlasrun.tasks.loader import load_tasks

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/, also when run as a script
from conftest import SUM_TASK
from fuzz.hostile import (
    VALIDATE_CLASSES,
    build_results_base,
    corrupt_utf8,
    damage_results,
    expand,
    ghost_items,
    make_special,
    mutate_class,
    results_commands,
    tag_yaml,
)

FORMATS = ("csv", "jsonl", "parquet", "yaml", "json", "run")
CLASSES = (*FORMATS, *VALIDATE_CLASSES, "results")
GB = 1024**3
MEMORY_KILL = 2 * GB  # a case's child past this peak RSS is killed: a runaway case cannot take the machine
POLL_S = 0.05
BULKY = 1024**2  # a YAML document larger than this (as JSON) is written as JSON
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
    as_json = json.dumps(doc, default=str).encode()  # JSON is YAML too
    if len(as_json) > BULKY:  # PyYAML's emitter takes seconds per megabyte
        return as_json
    try:
        return yaml.safe_dump(doc, sort_keys=False, allow_unicode=True).encode("utf-8", "surrogatepass")
    except (yaml.YAMLError, RecursionError, ValueError):
        return as_json


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
    fmt: str  # a file format, or a class of hostile input (CLASSES)
    path: Path
    base_keys: set[tuple[str, str, int]] = field(default_factory=set)  # results: the undamaged items


SeedDoc = Callable[[str], Any]  # a format -> a valid document of it, which the case mutates


def _write_case(
    fmt: str,
    doc: Any,
    rng: random.Random,
    folder: Path,
    data: bytes | None = None,
    seeds: SeedDoc = _seed_doc,
) -> Path:
    suffix = {"run": "yaml"}.get(fmt, fmt)
    path = folder / f"{'run' if fmt == 'run' else 'tasks'}.{suffix}"
    path.write_bytes(_dump(fmt, doc, rng) if data is None else data)
    if fmt == "run":  # the task file it points at: valid, or itself a mutated one
        tasks_doc = seeds("yaml") if rng.random() < 0.7 else mutate_structure(seeds("yaml"), rng)
        (folder / "tasks.yaml").write_bytes(_dump("yaml", tasks_doc, rng))
    return path


def make_case(
    index: int, seed: int | str, root: Path, cls: str | None = None, seeds: SeedDoc = _seed_doc
) -> Case:
    """Case ``index`` of class ``cls`` (by default the index's turn in ``CLASSES``), mutated from the
    valid documents ``seeds`` gives (by default ``atlas validate``'s)."""
    rng = random.Random(f"{seed}:{index}")
    cls = cls or CLASSES[index % len(CLASSES)]
    folder = root / f"case{index}"
    folder.mkdir()

    def write(fmt: str, doc: Any, data: bytes | None = None) -> Path:
        return _write_case(fmt, doc, rng, folder, data, seeds)

    if cls in FORMATS:
        doc = seeds(cls)
        for _ in range(rng.randint(0 if rng.random() < 0.3 else 1, 3)):
            doc = mutate_structure(doc, rng)
        data = _dump(cls, doc, rng)
        if rng.random() < 0.45:
            data = mutate_bytes(data, rng, cls)
        return Case(index, cls, write(cls, doc, data))
    if cls == "results":
        return Case(index, cls, folder)
    fmt = rng.choice(("yaml", "run")) if cls == "tagged" else rng.choice(FORMATS)
    doc = seeds(fmt)
    if cls == "special":
        target = folder / f"{'run' if fmt == 'run' else 'tasks'}.{ {'run': 'yaml'}.get(fmt, fmt) }"
        return Case(index, cls, make_special(folder, rng, target, lambda: write(fmt, doc) and None))
    if cls == "tagged":
        text = _dump(fmt, doc, rng).decode("utf-8", "surrogatepass")
        return Case(
            index,
            cls,
            write(fmt, doc, tag_yaml(text, rng).encode("utf-8", "surrogatepass")),
        )
    if cls == "unicode" and rng.random() < 0.3:
        return Case(index, cls, write(fmt, doc, corrupt_utf8(_dump(fmt, doc, rng), rng)))
    mutated = mutate_class(cls, doc, rng)
    return Case(index, cls, write(fmt, mutated, expand(_dump(fmt, mutated, rng), rng)))


class Hang(Exception):
    pass


def _alarm(signum: int, frame: FrameType | None) -> None:
    raise Hang()


@dataclass
class Outcome:
    # accepted | rejected | handled (a results directory) | traceback | hang | unclear | internal |
    # over_1gb | miscounted | control (a message echoing a control character raw)
    kind: str
    detail: str = ""
    row_level: bool = False
    peak_rss: int = 0  # bytes, the case's child


# What no message may echo raw: it breaks the line apart or drives the terminal (tab is fine).
CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")


def unsafe_output(text: str) -> str | None:
    """The first output line with a raw control, line-separator or bidi character, if any."""
    for line in text.split("\n"):
        if CONTROL.search(line):
            return f"echoes control characters: {line[:300]!r}"
    return None


def classify(case: Case, code: int | None, out: str, err: str) -> Outcome:
    if unsafe := unsafe_output(out + err):
        return Outcome("control", unsafe)
    lines = [ln for ln in (out + err).splitlines() if ln.startswith("error: ")]
    if "internal error reading this row" in out + err:
        return Outcome("internal", next(ln for ln in lines if "internal error" in ln))
    if code == 0:
        return unwritable(case) or Outcome("accepted")
    if code == 1:
        # A run file's rows are named in its task file, which sits beside it.
        files = {p.name for p in case.path.parent.iterdir()}
        # A message about a whole file (the case's, or the task file its run file names) names it.
        folder = f"{case.path.parent}/"
        bad = [
            ln
            for ln in lines
            if folder not in ln and (not (m := ROW_ERROR.match(ln)) or m["file"] not in files)
        ]
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


def unwritable(case: Case) -> Outcome | None:
    """An accepted task file must also be one a run can write: every task's record (its JSON and
    its file name) encodes as UTF-8. (Issue 24: a lone surrogate in an id passed validate, then
    every run died writing its record.)"""
    if case.fmt == "results" or case.path.name.startswith("run."):
        return None
    try:
        for task in load_tasks(case.path).tasks:
            task.model_dump_json().encode("utf-8")
            task_record_name("fuzz", task.id, 0).encode("utf-8")
    except (ValueError, UnicodeError, InputError) as exc:  # pydantic's serializer raises ValueError
        return Outcome("unwritable", f"{type(exc).__name__}: {str(exc)[:300]}")
    return None


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


def run_results_case(case: Case, base: Path, time_limit_s: float) -> Outcome:
    """Damage a copy of ``base``, run two reading commands on it; classify like ``run_case``."""
    rng = random.Random(f"results:{case.index}")
    case_dir = case.path / "out"
    shutil.copytree(base, case_dir)
    done = damage_results(case_dir, rng, mutate_structure)
    for argv in results_commands(base, case_dir, rng):
        out, err = io.StringIO(), io.StringIO()
        signal.setitimer(signal.ITIMER_VIRTUAL, time_limit_s)
        signal.setitimer(signal.ITIMER_REAL, 6 * time_limit_s)
        try:
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                code = atlas(argv)
        except Hang:
            return Outcome("hang", f"{argv[0]} after damage {done}: over {time_limit_s:g} s of CPU")
        except BaseException:
            return Outcome("traceback", f"{argv[0]} after damage {done}:\n{traceback.format_exc(limit=-3)}")
        finally:
            signal.setitimer(signal.ITIMER_VIRTUAL, 0)
            signal.setitimer(signal.ITIMER_REAL, 0)
        if unsafe := unsafe_output(out.getvalue() + err.getvalue()):
            return Outcome("control", f"{argv[0]} after damage {done}: {unsafe}")
        errors = [ln for ln in err.getvalue().splitlines() if ln.startswith("error: ")]
        if code not in (0, 1, 2, 3) or (code == 2 and not any(str(case_dir) in ln for ln in errors)):
            return Outcome("unclear", f"{argv[0]} after damage {done}: exit {code}: {err.getvalue()[-300:]}")
    ghosts = ghost_items(case.base_keys, case_dir)
    if ghosts:
        return Outcome("miscounted", f"after damage {done}: counted {ghosts[:3]}")
    return Outcome("handled")


def run_isolated(index: int, seed: int, root: Path, base: Path, time_limit_s: float) -> tuple[Case, Outcome]:
    """Make and run case ``index`` in a forked child; the parent measures its peak RSS (killing it
    past ``MEMORY_KILL``; an address-space limit would fail allocations that never become resident)
    and kills it past 6x the time limit (a hang the child's own timers did not end)."""
    reader, writer = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns
        os.close(reader)
        code = 0
        try:
            child_case = make_case(index, seed, root)  # here: the parent stays free of threads
            if child_case.fmt == "results":
                child_case.base_keys = set(ResultsDir(base).load())
                outcome = run_results_case(child_case, base, time_limit_s)
            else:
                outcome = run_case(child_case, time_limit_s)
            payload = json.dumps(
                [child_case.fmt, str(child_case.path), outcome.kind, outcome.detail, outcome.row_level]
            )
            os.write(writer, payload.encode("utf-8", "backslashreplace"))
        except BaseException:
            code = 70
            with contextlib.suppress(BaseException):
                os.write(
                    writer, json.dumps(["?", "", "traceback", traceback.format_exc(limit=-3), False]).encode()
                )
        finally:
            os._exit(code)
    os.close(writer)
    chunks: list[bytes] = []
    deadline = time.monotonic() + 6 * time_limit_s + 30
    killed = ""
    with os.fdopen(reader, "rb") as pipe:
        while True:
            left = deadline - time.monotonic()
            if left <= 0 or _peak_rss(pid) > MEMORY_KILL:
                killed = "hang" if left <= 0 else "over_1gb"
                os.kill(pid, signal.SIGKILL)
                break
            ready, _, _ = select.select([pipe], [], [], min(left, POLL_S))
            if ready:
                chunk = os.read(pipe.fileno(), 1 << 16)
                if not chunk:
                    break
                chunks.append(chunk)
    _, status, usage = os.wait4(pid, 0)
    peak = usage.ru_maxrss * 1024  # kilobytes on Linux
    fmt, path, kind, detail, row_level = (
        json.loads(b"".join(chunks))
        if chunks
        else ["?", "", "traceback", f"child ended with status {status}", False]
    )
    case = Case(
        index,
        fmt if fmt != "?" else CLASSES[index % len(CLASSES)],
        Path(path) if path else root / f"case{index}",
    )
    if killed == "hang":
        return case, Outcome("hang", f"killed after {6 * time_limit_s + 30:g} s of wall clock")
    if killed:
        return case, Outcome("over_1gb", f"killed at a peak RSS over {MEMORY_KILL / GB:g} GB")
    if peak > GB:
        return case, Outcome("over_1gb", f"peak RSS {peak / GB:.2f} GB ({kind}: {detail[-200:]})")
    outcome = Outcome(kind, detail, bool(row_level))
    outcome.peak_rss = peak
    return case, outcome


FAILURE_KINDS = (
    "traceback",
    "hang",
    "unclear",
    "internal",
    "over_1gb",
    "miscounted",
    "control",
    "unwritable",
)


def _peak_rss(pid: int) -> int:
    """The peak resident set (VmHWM) of a live process, in bytes (0 once it is gone)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return 0
    found = re.search(r"^VmHWM:\s+(\d+) kB", status, re.MULTILINE)
    return int(found[1]) * 1024 if found else 0


@dataclass
class Report:
    cases: int = 0
    by_format: Counter[str] = field(default_factory=Counter)
    kinds: Counter[str] = field(default_factory=Counter)
    row_level: int = 0
    failures: list[tuple[Case, Outcome]] = field(default_factory=list)

    peak_rss: int = 0

    @property
    def ok(self) -> bool:
        return not any(self.kinds[k] for k in FAILURE_KINDS)

    def failure_kinds(self) -> dict[tuple[str, str, str], tuple[int, int]]:
        """(class, kind, the detail's last line) -> (cases, an example case index)."""
        found: dict[tuple[str, str, str], tuple[int, int]] = {}
        for case, outcome in self.failures:
            last = (outcome.detail.strip().splitlines() or [""])[-1]
            signature = re.sub(r"/tmp/\S+|\d+", "N", last)[:160]
            count, example = found.get((case.fmt, outcome.kind, signature), (0, case.index))
            found[(case.fmt, outcome.kind, signature)] = (count + 1, example)
        return found

    def lines(self) -> list[str]:
        k = self.kinds
        return [
            f"cases: {self.cases} ({', '.join(f'{f} {self.by_format[f]}' for f in CLASSES)})",
            f"rejected with a clear error: {k['rejected']} "
            f"({self.row_level} by row/line and field, {k['rejected'] - self.row_level} whole-file)",
            f"accepted: {k['accepted']}",
            f"damaged results directories read by 2 commands each, no failure: {k['handled']}",
            f"tracebacks: {k['traceback']}",
            f"hangs: {k['hang']}",
            f"errors without file/row/field: {k['unclear']}",
            f"messages echoing control, line-separator or bidi characters raw: {k['control']}",
            f"rows caught by the loader's safety net: {k['internal']}",
            f"processes over 1 GB: {k['over_1gb']} (largest case peak RSS {self.peak_rss / 1024**2:.0f} MB)",
            f"damaged results directories that counted an item they never had: {k['miscounted']}",
            f"accepted task files a run could not write (a record not UTF-8): {k['unwritable']}",
        ]


def fuzz(cases: int, seed: int, time_limit_s: float = 10.0, only: int | None = None) -> Report:
    report = Report()
    previous = signal.signal(signal.SIGALRM, _alarm), signal.signal(signal.SIGVTALRM, _alarm)
    root = Path(tempfile.mkdtemp(prefix="atlas-fuzz-"))
    try:
        (root / "base").mkdir()
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            base = build_results_base(root / "base")
        for index in [only] if only is not None else range(cases):
            case, outcome = run_isolated(index, seed, root, base, time_limit_s)
            report.cases += 1
            report.by_format[case.fmt] += 1
            report.kinds[outcome.kind] += 1
            report.row_level += outcome.row_level
            report.peak_rss = max(report.peak_rss, outcome.peak_rss)
            if outcome.kind in FAILURE_KINDS:
                report.failures.append((case, outcome))
            else:
                shutil.rmtree(root / f"case{index}", ignore_errors=True)
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
    for (fmt, kind, signature), (count, example) in report.failure_kinds().items():
        print(f"KIND {count} x {fmt}/{kind} (e.g. case {example}): {signature}")
    for case, outcome in report.failures[:20]:
        print(f"FAIL case {case.index} ({case.fmt}, {outcome.kind}): {outcome.detail.strip()[-600:]}")
    keep_failures([case for case, _ in report.failures], args.keep)
    shutil.rmtree(report.root, ignore_errors=True)  # type: ignore[attr-defined]
    return 0 if report.ok else 1


def keep_failures(cases: list[Case], keep: Path | None) -> None:
    """Copy each failing case's folder under ``keep`` (``--keep``), to replay it by hand."""
    for case in cases if keep else []:
        assert keep is not None
        with contextlib.suppress(shutil.Error):  # a FIFO is not copied
            shutil.copytree(case.path.parent, keep / case.path.parent.name, symlinks=True, dirs_exist_ok=True)


if __name__ == "__main__":
    sys.exit(main())
