"""Fuzz ``atlas run --limit 1`` with the hostile task and run files of ``fuzz_validate``.

Each case is one of ``fuzz_validate``'s cases (the same mutations, byte damage and hostile classes,
plus ``bulky``: a string field of 1 to 50 MB, and ``run-value``: one value of a valid run file made
hostile), seeded from documents that run for real: a starter task over the sample workspace
(``atlasrun.starter.workspace``), as a native task and as an MCP-Atlas row. A task file case runs
through a valid run file; a run file case (replay agent, deterministic judge) points at a valid
task file. The real ``atlas run RUN --limit 1 --out FRESH --data-dir WORKSPACE`` runs as a
subprocess with its MCP servers in their sandboxes, and the case is classified:

- passed through: exit 0, 1 or 3 (scored, below a bar, item errors), every message naming what;
- rejected: exit 2, nothing written to ``--out``, every error naming the file (and a bad row's
  row/line and field);
- traceback, hang (past the wall-clock limit: killed), over_1gb (the process tree's summed RSS,
  sampled every 50 ms, over 1 GB), bad_exit (an exit code outside the README's table), unclear
  (a message naming no file, row, task or field), wrote_results (exit 2 with results written),
  control (a message echoing a control, line-separator or bidi character raw): each must be 0.

``python tests/fuzz/fuzz_run.py --cases 300`` (``make fuzz``) prints the counts; ``--case N``
replays one case, ``--keep DIR`` saves the failing inputs.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from atlasrun.errors import EXIT_BAD_INPUT, EXIT_FAIL_UNDER, EXIT_INTERRUPTED, EXIT_ITEM_ERRORS, EXIT_OK
from atlasrun.starter.workspace import create_workspace

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/, also when run as a script
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))  # proctree, the /proc reader
from fuzz.fuzz_validate import (
    FORMATS,
    GB,
    MEMORY_KILL,
    NASTY,
    POLL_S,
    ROW_ERROR,
    Case,
    _dump,
    _parent,
    _paths,
    keep_failures,
    make_case,
    unsafe_output,
)
from fuzz.hostile import VALIDATE_CLASSES
from proctree import descendants, rss_mb

REPO = Path(__file__).resolve().parents[2]
RUN_CLASSES = (*FORMATS, *VALIDATE_CLASSES, "bulky", "run-value")
EXIT_CODES = (EXIT_OK, EXIT_FAIL_UNDER, EXIT_BAD_INPUT, EXIT_ITEM_ERRORS, EXIT_INTERRUPTED)
FAILURE_KINDS = ("traceback", "hang", "over_1gb", "bad_exit", "unclear", "wrote_results", "control")
MESSAGE = re.compile(r"^(error|rejected|excluded|warning): ")
# What `atlas run` says after the per-row lines it refers to ("fix the ids above", "no task to run").
SUMMARY_LINE = "error: nothing was run: "

# The first starter task, on two servers only (fewer processes per case), as the seed of every case.
STARTER_TASK: dict[str, Any] = {
    **yaml.safe_load((REPO / "examples/starter/tasks.yaml").read_text())["tasks"][0],
    "enabled_tools": ["filesystem_read_text_file", "filesystem_list_directory", "calculator_calculate"],
    "distractors": ["filesystem_list_directory"],
}
SALES = "/data/sales/sales_2024.csv"
EXPRESSION = "210750+155400+244800+220800+110600"


def _call(call_id: str, name: str, arguments: dict[str, str]) -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": json.dumps(arguments)}}


def _tool_result(call_id: str, text: str) -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": call_id, "content": [{"type": "text", "text": text}]}


STARTER_ROW: dict[str, Any] = {  # the same task in MCP-Atlas's public format
    "TASK": "atlas-q3",
    "PROMPT": STARTER_TASK["prompt"],
    "ENABLED_TOOLS": json.dumps(STARTER_TASK["enabled_tools"]),
    "GTFA_CLAIMS": repr(STARTER_TASK["claims"]),
    "TRAJECTORY": json.dumps(
        [
            {
                "role": "assistant",
                "content": "",
                "tool_calls": [_call("c1", "filesystem_read_text_file", {"path": SALES})],
            },
            _tool_result("c1", "region,q1,q2,q3,q4"),
            {
                "role": "assistant",
                "content": "",
                "tool_calls": [_call("c2", "calculator_calculate", {"expression": EXPRESSION})],
            },
            _tool_result("c2", "942350"),
            {"role": "assistant", "content": STARTER_TASK["reference_answer"]},
        ]
    ),
}
RUN_SEED: dict[str, Any] = {
    "apiVersion": "atlasrun.dev/v1alpha1",
    "kind": "AtlasRun",
    "metadata": {"name": "fuzz-run"},
    "spec": {
        "tasks": {"path": "tasks.yaml"},
        "models": [{"name": "replay"}],
        "judges": [{"name": "deterministic"}],
        "servers": {"enabled": ["filesystem", "calculator"]},
        "limits": {"maxTurns": 10, "toolTimeoutSeconds": 10},
        "repeats": 1,
        "parallelism": 1,
    },
}


def run_seed_doc(fmt: str) -> Any:
    """A valid document of ``fmt`` that ``atlas run`` runs against the sample workspace."""
    if fmt in ("csv", "parquet"):
        return [dict(STARTER_ROW), {**STARTER_ROW, "TASK": "atlas-q3-again"}]
    if fmt == "jsonl":
        return [dict(STARTER_ROW), {**copy.deepcopy(STARTER_TASK), "id": "native-q3"}]
    if fmt in ("yaml", "json"):
        return {"tasks": [copy.deepcopy(STARTER_TASK), {**copy.deepcopy(STARTER_TASK), "id": "second"}]}
    return copy.deepcopy(RUN_SEED)


def _run_value_case(index: int, seed: int, root: Path) -> tuple[Case, Path]:
    """The valid run file (with its optional fields set) with one scalar replaced by a hostile
    value: unlike most structural mutations it often passes the schema, so what checks a run file
    later (pre-flight, planning, the run itself) gets hostile values too."""
    rng = random.Random(f"run-value:{seed}:{index}")
    folder = root / f"case{index}"
    folder.mkdir()
    doc = run_seed_doc("run")
    doc["metadata"]["labels"] = {"team": "evals"}
    doc["spec"]["tasks"].update(limit=5, ids=[STARTER_TASK["id"], "second"])
    doc["spec"]["models"][0]["maxConcurrency"] = 2
    scalars = [
        p
        for p in _paths(doc)
        if p and not isinstance(_parent(doc, p)[p[-1]], (dict, list)) and p[-1] not in ("apiVersion", "kind")
    ]
    path = rng.choice(scalars)
    _parent(doc, path)[path[-1]] = rng.choice(NASTY)(rng)
    (folder / "tasks.yaml").write_text(yaml.safe_dump(run_seed_doc("yaml"), sort_keys=False))
    run_file = folder / "run.yaml"
    run_file.write_bytes(_dump("run", doc, rng))
    return Case(index, "run-value", run_file), run_file


def make_run_case(index: int, seed: int, root: Path) -> tuple[Case, Path]:
    """Case ``index`` and the run file to run it with (the case's own, or a valid one beside a
    task file case that points at it)."""
    if RUN_CLASSES[index % len(RUN_CLASSES)] == "run-value":
        return _run_value_case(index, seed, root)
    case = make_case(index, f"run:{seed}", root, RUN_CLASSES[index % len(RUN_CLASSES)], run_seed_doc)
    if case.path.name == "run.yaml":
        if case.fmt != "special":  # a fuzzed run file points at valid tasks (special: maybe a FIFO)
            (case.path.parent / "tasks.yaml").write_text(
                yaml.safe_dump(run_seed_doc("yaml"), sort_keys=False)
            )
        return case, case.path
    run_file = case.path.parent / "run.yaml"
    doc = run_seed_doc("run")
    doc["spec"]["tasks"]["path"] = case.path.name
    run_file.write_text(yaml.safe_dump(doc, sort_keys=False))
    return case, run_file


@dataclass
class RunOutcome:
    kind: str  # passed | rejected | one of FAILURE_KINDS
    detail: str = ""
    code: int | None = None
    tree_peak: int = 0  # bytes: the largest sampled sum of the process tree's RSS
    seconds: float = 0.0


def _written(out: Path) -> list[str]:
    """What a run left in ``out`` that is results (the directory itself, or empty logs, is not)."""
    if not out.is_dir():
        return []
    return sorted(str(p.relative_to(out)) for p in out.rglob("*") if p.is_file() and p.parent.name != "logs")


def _unclear(case: Case, code: int, lines: list[str]) -> str | None:
    """The first message that names nothing (no file, row and field, task or run-file field)."""
    folder = str(case.path.parent)
    files = {p.name for p in case.path.parent.iterdir()}
    messages = [ln for ln in lines if MESSAGE.match(ln)]
    for line in messages:
        kind, text = line.split(": ", 1)
        if kind == "rejected":
            named = (m := ROW_ERROR.match(f"error: {text}")) is not None and m["file"] in files
        elif kind == "excluded":
            named = text.startswith("task ")
        elif line.startswith(SUMMARY_LINE):
            named = any(ln.startswith("rejected: ") or folder in ln for ln in messages)
        else:
            # a path in the case, a run-file field, a flag, an item ("error: replay/TASK: ..."), or
            # the model or judge a pre-flight check failed on (an entry of spec.models/judges)
            named = folder in text or bool(re.match(r"(task |spec\.|--|[^\s/]+/\S+: |(model|judge) ')", text))
        if not named:
            return line
    if code == EXIT_BAD_INPUT and not any(
        re.match(rf"(rejected: |error: (model|judge) '|.*{re.escape(folder)})", ln) for ln in messages
    ):
        return "exit 2 without a message naming the file: " + " | ".join(messages)[-300:]
    return None


def classify(case: Case, code: int, out: str, err: str, written: list[str]) -> RunOutcome:
    text = out + err
    if "Traceback (most recent call last)" in text:
        return RunOutcome("traceback", text[text.index("Traceback") :][-1500:], code)
    if code not in EXIT_CODES:
        return RunOutcome("bad_exit", f"exit {code}: {err[-400:]}", code)
    if unsafe := unsafe_output(text):
        return RunOutcome("control", unsafe, code)
    if code == EXIT_BAD_INPUT and written:
        return RunOutcome("wrote_results", f"exit 2, yet wrote {written[:5]}: {err[-300:]}", code)
    if line := _unclear(case, code, text.splitlines()):
        return RunOutcome("unclear", f"exit {code}: {line[:400]}", code)
    return RunOutcome("rejected" if code == EXIT_BAD_INPUT else "passed", code=code)


def _kill_tree(proc: subprocess.Popen[bytes]) -> None:
    for pid in [*reversed(descendants(proc.pid)), proc.pid]:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def run_case(case: Case, run_file: Path, workspace: Path, wall_limit_s: float) -> RunOutcome:
    """Run ``atlas run`` on the case, sampling its process tree's summed RSS every ``POLL_S``."""
    folder = case.path.parent
    out = folder / "out"
    argv = [sys.executable, "-m", "atlasrun", "run", str(run_file), "--limit", "1"]
    argv += ["--out", str(out), "--data-dir", str(workspace)]
    env = {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    started, peak, killed = time.monotonic(), 0, ""
    with (folder / "stdout.txt").open("wb") as stdout, (folder / "stderr.txt").open("wb") as stderr:
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=stdout,
            stderr=stderr,
            cwd=folder,
            env=env,
            start_new_session=True,
        )
        try:
            while proc.poll() is None:
                peak = max(peak, int(rss_mb([proc.pid, *descendants(proc.pid)]) * 1024**2))
                if peak > MEMORY_KILL or time.monotonic() - started > wall_limit_s:
                    killed = "over_1gb" if peak > MEMORY_KILL else "hang"
                    break
                time.sleep(POLL_S)
        finally:
            if proc.poll() is None:
                _kill_tree(proc)
            code = proc.wait()
    seconds = time.monotonic() - started
    read = lambda name: (folder / name).read_bytes().decode("utf-8", "backslashreplace")  # noqa: E731
    if killed:
        detail = f"killed after {seconds:.0f} s" if killed == "hang" else f"killed at {peak / GB:.2f} GB"
        outcome = RunOutcome(killed, f"{detail}: {read('stderr.txt')[-300:]}", None)
    elif peak > GB:
        outcome = RunOutcome("over_1gb", f"process tree peak {peak / GB:.2f} GB (exit {code})", code)
    else:
        outcome = classify(case, code, read("stdout.txt"), read("stderr.txt"), _written(out))
    outcome.tree_peak, outcome.seconds = peak, seconds
    return outcome


@dataclass
class RunReport:
    cases: int = 0
    by_class: Counter[str] = field(default_factory=Counter)
    kinds: Counter[str] = field(default_factory=Counter)
    exit_codes: Counter[int | None] = field(default_factory=Counter)
    failures: list[tuple[Case, RunOutcome]] = field(default_factory=list)
    by_class_code: Counter[tuple[str, int | None]] = field(default_factory=Counter)
    tree_peak: int = 0
    tree_peak_case: str = ""
    slowest: float = 0.0
    seconds: float = 0.0

    def add(self, case: Case, outcome: RunOutcome) -> None:
        self.cases += 1
        self.by_class[case.fmt] += 1
        self.kinds[outcome.kind] += 1
        self.exit_codes[outcome.code] += 1
        self.by_class_code[(case.fmt, outcome.code)] += 1
        if outcome.tree_peak > self.tree_peak:
            self.tree_peak, self.tree_peak_case = outcome.tree_peak, f"case {case.index}, {case.fmt}"
        self.slowest = max(self.slowest, outcome.seconds)
        if outcome.kind in FAILURE_KINDS:
            self.failures.append((case, outcome))

    @property
    def ok(self) -> bool:
        return not any(self.kinds[k] for k in FAILURE_KINDS)

    def lines(self) -> list[str]:
        k = self.kinds
        codes = ", ".join(f"{c}: {n}" for c, n in sorted(self.exit_codes.items(), key=lambda i: str(i[0])))
        return [
            f"cases: {self.cases} ({', '.join(f'{c} {self.by_class[c]}' for c in RUN_CLASSES)}) in {self.seconds:.0f} s",
            f"exit codes: {codes}",
            "exit codes by class: "
            + "; ".join(
                f"{c} "
                + " ".join(
                    f"{code}x{n}" for (k, code), n in sorted(self.by_class_code.items(), key=str) if k == c
                )
                for c in RUN_CLASSES
            ),
            f"ran (exit 0, 1 or 3), every message naming what: {k['passed']}",
            f"rejected (exit 2) naming file and row/field, nothing written: {k['rejected']}",
            f"tracebacks: {k['traceback']}",
            f"hangs: {k['hang']} (slowest case {self.slowest:.1f} s)",
            f"process trees over 1 GB: {k['over_1gb']} (largest sampled tree {self.tree_peak / 1024**2:.0f} MB, {self.tree_peak_case})",
            f"exit codes outside the README's table: {k['bad_exit']}",
            f"messages naming no file, row, task or field: {k['unclear']}",
            f"exit 2 with results written: {k['wrote_results']}",
            f"messages echoing control, line-separator or bidi characters raw: {k['control']}",
        ]


def fuzz_run(cases: int, seed: int, wall_limit_s: float = 60.0, only: int | None = None) -> RunReport:
    report, started = RunReport(), time.monotonic()
    root = Path(tempfile.mkdtemp(prefix="atlas-fuzz-run-"))
    try:
        workspace = create_workspace(root / "workspace")
        for index in [only] if only is not None else range(cases):
            case, run_file = make_run_case(index, seed, root)
            outcome = run_case(case, run_file, workspace, wall_limit_s)
            report.add(case, outcome)
            if outcome.kind not in FAILURE_KINDS:
                shutil.rmtree(case.path.parent, ignore_errors=True)
    finally:
        report.seconds = time.monotonic() - started
    report.root = root  # type: ignore[attr-defined]
    return report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--cases", type=int, default=300)
    parser.add_argument("--seed", type=int, default=20261123)
    parser.add_argument(
        "--wall-limit", type=float, default=60.0, help="seconds per case before it counts as a hang"
    )
    parser.add_argument("--case", type=int, help="replay one case by index")
    parser.add_argument("--keep", type=Path, help="copy failing inputs here")
    args = parser.parse_args(argv)
    report = fuzz_run(args.cases, args.seed, args.wall_limit, args.case)
    print(f"atlas run --limit 1 fuzz, seed {args.seed}")
    for line in report.lines():
        print(f"  {line}")
    for case, outcome in report.failures[:20]:
        print(f"FAIL case {case.index} ({case.fmt}, {outcome.kind}): {outcome.detail.strip()[-600:]}")
    keep_failures([case for case, _ in report.failures], args.keep)
    shutil.rmtree(report.root, ignore_errors=True)  # type: ignore[attr-defined]
    return 0 if report.ok else 1


if __name__ == "__main__":
    sys.exit(main())
