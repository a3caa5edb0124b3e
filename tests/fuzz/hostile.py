"""Hostile inputs an outside generator found crashes and hangs with (issue 24 §2-§4), as fuzz classes.

``atlas validate`` classes (each case a valid file, then one hostile change):

- ``special``: the task file, run file, the run file's task file or server catalog is a FIFO,
  a symlink to /dev/zero or /dev/urandom, a directory, a symlink loop or a dangling symlink;
- ``tagged``: a tagged or implicitly typed YAML value where a scalar was (``!!timestamp zzz``,
  ``2024-02-30``, ``!!bool maybe``, ``!!int abc``, ``!<tag:yaml.org,2002:int> 12x``, ...);
- ``unicode``: a lone surrogate, a noncharacter, bidi or control characters in one string field
  (every string field of the document is a candidate), or invalid UTF-8 bytes (overlong,
  encoded surrogates, above U+10FFFF) in its text;
- ``huge`` / ``nested``: a field's value replaced, in the written bytes, by an integer of 4,301 to
  100,000 digits or an out-of-range float, or by a structure nested 1,000 to 200,000 deep (JSON
  and flow YAML; inside a CSV field it is text).

``atlas run`` also gets ``bulky``: a string field 1 to 50 MB long (``fuzz_run``).

``results``: a results directory (imported, so no servers) damaged on disk — invalid UTF-8,
garbage and truncated lines, tampered typed fields (the structural mutations of
``fuzz_validate``), records of other models/tasks/repeats, deleted or corrupt per-task records,
special files in place of results.jsonl, run.json or a per-task record — then ``report``,
``diagnose``, ``compare``, ``rescore`` and ``export-atlas`` run on it. Each must end with exit
0-3 and no traceback; a run counts nothing it should not: every item any command's store loads is
one of the undamaged directory's items.
"""

from __future__ import annotations

import contextlib
import copy
import csv
import json
import os
import random
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from atlasrun.cli import main as atlas
from atlasrun.errors import AtlasError
from atlasrun.scoring.store import ResultsDir

VALIDATE_CLASSES = ("special", "tagged", "unicode", "huge", "nested")

TAGGED = [
    "!!timestamp zzz",
    "2024-02-30",
    "2024-13-01 25:61:61",
    "!!bool maybe",
    "!!int abc",
    "!<tag:yaml.org,2002:int> 12x",
    "!!float one",
    "!!binary zz==",
    "!!set {a, b}",
    "!!omap [a, b]",
    "!!python/name:os.system",
    "!!python/object/apply:os.system ['true']",
    "!custom value",
    "!!null nope",
    "!!str",
    "!!map [1, 2]",
    "!!seq {a: 1}",
    "1" * 4301,
    "0x" + "f" * 5000,
    "0o" + "7" * 5000,
    "1_000_" * 1000 + "1",
    "1e99999",
    "2001-12-14t21:59:43.10-05:00",
]

# Text no later stage can write or show: what a hand-edited or generated file puts in a field.
BAD_TEXT = [
    "\ud800",
    "a\udfffb",
    "\udc80\udcff",
    "\ufffe\uffff",
    "\U0010ffff",
    "\u202eevil\u202c",
    "\x00nul",
    "\x1b[2J\x1b[31mred",
    "\u0085next\u2028line\u2029para",
    "\ufeffbom",
    "e\u0301" * 200,
    "\u200b" * 50,
]
BAD_UTF8 = [
    b"\xc0\xaf",
    b"\xed\xa0\x80",
    b"\xed\xbf\xbf",
    b"\xf4\x90\x80\x80",
    b"\xff\xfe",
    b"\x80",
    b"\xf8\x88\x80\x80\x80",
]


SENTINEL = "@@HOSTILE@@"  # set in the document, replaced in the written bytes (no writer can write these)


def _huge(rng: random.Random) -> bytes:
    """An integer of 4,301+ digits or an out-of-range float, as the file's own text."""
    digits = rng.choice([4301, 5000, 20_000, 100_000])
    return rng.choice(
        [b"1" * digits, b"-" + b"9" * digits, b"1e99999", b"-1e400", b"0." + b"0" * digits + b"1"]
    )


def _nested(rng: random.Random) -> bytes:
    """A structure nested 1,000 to 200,000 deep, as the file's own text (JSON and flow YAML)."""
    depth = rng.choice([1000, 5000, 50_000, 200_000])
    opener, closer = rng.choice([(b"[", b"]"), (b'{"k": ', b"}")])
    return opener * depth + b"1" + closer * depth


def expand(data: bytes, rng: random.Random) -> bytes:
    """The written file with the sentinel (quoted or not) replaced by the hostile text."""
    if SENTINEL.encode() not in data:
        return data
    value = _huge(rng) if rng.random() < 0.5 else _nested(rng)
    for quoted in (b'"' + SENTINEL.encode() + b'"', b"'" + SENTINEL.encode() + b"'", SENTINEL.encode()):
        data = data.replace(quoted, value)
    return data


def _string_paths(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Paths of every string value (and of every key, as (..., ('key', name)))."""
    found: list[tuple[Any, ...]] = []
    if isinstance(value, str):
        found.append(prefix)
    elif isinstance(value, dict):
        for key, child in value.items():
            found.append((*prefix, ("key", key)))
            found += _string_paths(child, (*prefix, key))
    elif isinstance(value, list):
        for i, child in enumerate(value[:8]):
            found += _string_paths(child, (*prefix, i))
    return found


def _all_paths(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    found = [prefix] if prefix else []
    if isinstance(value, dict):
        for key, child in value.items():
            found += _all_paths(child, (*prefix, key))
    elif isinstance(value, list):
        for i, child in enumerate(value[:8]):
            found += _all_paths(child, (*prefix, i))
    return found


def _set(doc: Any, path: tuple[Any, ...], make: Callable[[Any], Any]) -> None:
    parent = doc
    for key in path[:-1]:
        parent = parent[key]
    last = path[-1]
    if isinstance(last, tuple):  # a key: renamed, value kept
        name = last[1]
        parent[make(name)] = parent.pop(name)
    else:
        parent[last] = make(parent[last])


def bulky_text(rng: random.Random) -> str:
    """Plain text of 1 to 50 MB: a field an outside generator filled (issue 24: 50 MB fields)."""
    size = rng.choice([1, 10, 50]) * 1024**2
    sentence = "Lorem ipsum dolor sit amet, the sum is 42. "
    return (sentence * (size // len(sentence) + 1))[:size]


def mutate_class(cls: str, doc: Any, rng: random.Random) -> Any:
    """``doc`` (a copy) with one change of class ``cls`` at a random place."""
    doc = copy.deepcopy(doc)
    if cls == "bulky":  # a string value (not a key) becomes megabytes long
        values = [p for p in _string_paths(doc) if not (p and isinstance(p[-1], tuple))]
        if values:
            _set(doc, rng.choice(values), lambda old: bulky_text(rng))
        return doc
    if cls == "unicode":
        paths = _string_paths(doc)
        if paths:
            bad = rng.choice(BAD_TEXT)
            _set(doc, rng.choice(paths), lambda text: rng.choice([bad, f"{text}{bad}", f"{bad}{text}"]))
        return doc
    paths = _all_paths(doc)
    if not paths:
        return doc
    _set(doc, rng.choice(paths), lambda old: SENTINEL)  # huge or nested: see ``expand``
    return doc


def tag_yaml(text: str, rng: random.Random) -> str:
    """A scalar value of a YAML document replaced by a tagged or implicitly typed one."""
    lines = text.splitlines()
    candidates = [i for i, line in enumerate(lines) if ": " in line or line.lstrip().startswith("- ")]
    if not candidates:
        return rng.choice(TAGGED) + "\n" + text
    i = rng.choice(candidates)
    line = lines[i]
    cut = line.index(": ") + 2 if ": " in line else line.index("- ") + 2
    lines[i] = line[:cut] + rng.choice(TAGGED)
    return "\n".join(lines) + "\n"


def corrupt_utf8(data: bytes, rng: random.Random) -> bytes:
    """Invalid UTF-8 bytes inside the text (a string field's bytes when there is one)."""
    quotes = [i for i, b in enumerate(data) if b == ord('"')] or list(range(len(data) + 1))
    pos = rng.choice(quotes) + 1 if quotes else 0
    return data[:pos] + rng.choice(BAD_UTF8) + data[pos:]


def make_special(folder: Path, rng: random.Random, target: Path, seed_files: Callable[[], None]) -> Path:
    """Write the case's valid files, then make one of them (or what it points at) special.
    Returns the path to validate."""
    seed_files()
    victim = rng.choice([p for p in folder.iterdir() if p.is_file()] + [folder / "catalog.yaml"])
    if victim.name == "catalog.yaml":  # the run file names a catalog that is the special file
        run_file = folder / "run.yaml"
        if run_file.exists():
            doc = yaml.safe_load(run_file.read_text())
            doc["spec"]["servers"]["catalog"] = "catalog.yaml"
            run_file.write_text(yaml.safe_dump(doc))
    victim.unlink(missing_ok=True)
    kind = rng.choice(["fifo", "zero", "urandom", "dir", "loop", "dangling", "null"])
    if kind == "fifo":
        os.mkfifo(victim)
    elif kind in ("zero", "urandom", "null"):
        victim.symlink_to(f"/dev/{kind}")
    elif kind == "dir":
        victim.mkdir()
    elif kind == "loop":
        victim.symlink_to(victim.name)
    else:
        victim.symlink_to(folder / "no-such-file")
    return target


# --- damaged results directories -------------------------------------------------------------------

RESULTS_TASKS = 6
MODEL = "gpt-x"


def build_results_base(root: Path) -> Path:
    """An imported results directory (no servers): 6 scored tasks, some below the threshold."""
    rows = []
    tasks = []
    for i in range(RESULTS_TASKS):
        task_id = f"t{i}"
        tasks.append(
            {
                "TASK": task_id,
                "PROMPT": f"What is in file {i}?",
                "ENABLED_TOOLS": json.dumps(["filesystem_read_text_file"]),
                "GTFA_CLAIMS": "['The file says hello', 'The sum is 2']",
                "TRAJECTORY": json.dumps([]),
            }
        )
        conversation = [
            {"role": "user", "content": f"What is in file {i}?"},
            {
                "role": "assistant",
                "content": "The file says hello and the sum is 2." if i % 2 else "No idea.",
            },
        ]
        rows.append(
            {
                "task_id": task_id,
                "raw_conversation_history": json.dumps(conversation),
                "response": conversation[-1]["content"],
                "coverage_score": ["1.0", "0.5", "0.0"][i % 3],
            }
        )
    for name, table in (("tasks.csv", tasks), ("results.csv", rows)):
        with (root / name).open("w", newline="") as fh:
            writer = csv.DictWriter(fh, fieldnames=list(table[0]))
            writer.writeheader()
            writer.writerows(table)
    out = root / "base"
    code = atlas(
        [
            "import-atlas",
            str(root / "results.csv"),
            "--tasks",
            str(root / "tasks.csv"),
            "--model",
            MODEL,
            "--out",
            str(out),
        ]
    )
    assert code == 0, f"the base results directory did not import (exit {code})"
    return out


def damage_results(
    case_dir: Path, rng: random.Random, mutate_line: Callable[[Any, random.Random], Any]
) -> list[str]:
    """One to three kinds of damage to ``case_dir``; returns what was done (for failure reports)."""
    jsonl = case_dir / "results.jsonl"
    records = sorted((case_dir / "tasks").rglob("*.json"))
    done = []
    for _ in range(rng.randint(1, 3)):
        action = rng.randrange(12)
        data = jsonl.read_bytes() if jsonl.is_file() and not jsonl.is_symlink() else b""
        lines = data.splitlines()
        if action == 0:
            jsonl.write_bytes(data + rng.choice(BAD_UTF8) + b'{"task_id": "t0"}\n')
        elif action == 1:
            jsonl.write_bytes(data + bytes(rng.randrange(256) for _ in range(rng.randint(1, 200))) + b"\n")
        elif action == 2 and data:
            jsonl.write_bytes(data[: rng.randrange(len(data))])  # truncated mid-line
        elif action in (3, 4, 5) and (records_now := _objects(lines)):  # tampered, appended: the newest
            line = rng.choice(records_now)
            tampered = mutate_line(line, rng)
            text = json.dumps(tampered, default=str, ensure_ascii=rng.random() < 0.5).encode(
                "utf-8", "surrogatepass"
            )
            jsonl.write_bytes(data + text + b"\n")
        elif action == 6 and (records_now := _objects(lines)):  # another model, task or repeat
            line = rng.choice(records_now)
            field, value = rng.choice(
                [("model", "ghost"), ("task_id", "made-up"), ("repeat", 7), ("repeat", -1)]
            )
            jsonl.write_bytes(data + json.dumps({**line, field: value}).encode() + b"\n")
        elif action == 7 and records:
            victim = rng.choice(records)
            if victim.exists():
                victim.unlink()
        elif action == 8 and records:
            victim = rng.choice(records)
            if victim.is_file():
                raw = victim.read_bytes()
                victim.write_bytes(
                    raw[: rng.randrange(len(raw) + 1)] + rng.choice([b"", b"\xff", b"[" * 5000])
                )
        elif action == 9:
            victim = rng.choice([jsonl, case_dir / "run.json", case_dir / "summary.json", *records[:2]])
            _make_special(victim, rng)
        elif action == 10:
            (case_dir / "run.json").write_bytes(
                rng.choice([b"", b"{", b"[]", b'{"spec": 5, "scope": {"models": 3}}', b"\xff\xfe"])
            )
        else:
            (case_dir / "diagnoses.jsonl").write_bytes(
                rng.choice([b"\xff\n", b"{}\n", b"[" * 100_000 + b"\n", b'{"model": 1}\n'])
            )
        done.append(str(action))
    return done


def _objects(lines: list[bytes]) -> list[dict[str, Any]]:
    """The lines that are still JSON objects (earlier damage may have cut or garbled some)."""
    found = []
    for line in lines:
        with contextlib.suppress(ValueError):
            value = json.loads(line)
            if isinstance(value, dict):
                found.append(value)
    return found


def _make_special(victim: Path, rng: random.Random) -> None:
    if victim.is_dir() and not victim.is_symlink():
        shutil.rmtree(victim)
    else:
        victim.unlink(missing_ok=True)
    kind = rng.choice(["fifo", "zero", "dir", "loop"])
    if kind == "fifo":
        os.mkfifo(victim)
    elif kind == "zero":
        victim.symlink_to("/dev/zero")
    elif kind == "dir":
        victim.mkdir()
    else:
        victim.symlink_to(victim.name)


def results_commands(base: Path, case_dir: Path, rng: random.Random) -> list[list[str]]:
    """Two of the commands that read a results directory, on the damaged one."""
    all_commands = [
        ["report", str(case_dir)],
        ["diagnose", str(case_dir)],
        ["compare", str(base), str(case_dir), "--resamples", "50", "--allow-different"],
        [
            "rescore",
            str(case_dir),
            "--judge",
            "deterministic",
            "--out",
            str(case_dir.parent / f"{case_dir.name}-rescored"),
        ],
        ["export-atlas", str(case_dir), "--out", str(case_dir.parent / f"{case_dir.name}.csv")],
    ]
    return rng.sample(all_commands, 2)


def ghost_items(base_keys: set[tuple[str, str, int]], case_dir: Path) -> list[tuple[str, str, int]]:
    """Items a damaged directory's store counts that the undamaged one never had."""
    try:
        loaded = ResultsDir(case_dir).load()
    except AtlasError:  # refused with a message (a special file, a newer schema): nothing counted
        return []
    return sorted(set(loaded) - base_keys)
