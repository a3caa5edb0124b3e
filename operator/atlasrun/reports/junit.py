"""``atlas run --junit FILE``: one JUnit testcase per (task, model, repeat), for CI dashboards.

A passed item is a passing testcase; a scored item below the threshold a ``failure`` whose
message lists its claims with their verdicts; an errored item an ``error`` (with its kind);
an excluded item ``skipped``. ``summary.json`` stays the machine-readable verdict.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections.abc import Sequence
from pathlib import Path

from atlasrun.errors import StorageError
from atlasrun.scoring.result import TaskResult


def claims_text(result: TaskResult) -> str:
    lines = [f"coverage {result.coverage:.2f}" if result.coverage is not None else "not scored"]
    for verdict in result.claims:
        lines.append(f"[{verdict.label or 'judge failed'}] {verdict.claim}: {verdict.reason}".rstrip(": "))
    return "\n".join(lines)


def junit_xml(run: str, results: Sequence[TaskResult]) -> ET.Element:
    suites = ET.Element("testsuites", name=run)
    for model in sorted({r.model for r in results}):
        mine = [r for r in results if r.model == model]
        suite = ET.SubElement(
            suites,
            "testsuite",
            name=f"{run}.{model}",
            tests=str(len(mine)),
            failures=str(sum(1 for r in mine if r.status == "scored" and not r.passed)),
            errors=str(sum(1 for r in mine if r.status == "error")),
            skipped=str(sum(1 for r in mine if r.status == "excluded")),
            time=f"{sum(r.wall_s for r in mine):.3f}",
        )
        for r in sorted(mine, key=lambda r: (r.task_id, r.repeat)):
            name = r.task_id if r.repeat == 0 else f"{r.task_id}#{r.repeat}"
            case = ET.SubElement(suite, "testcase", classname=model, name=name, time=f"{r.wall_s:.3f}")
            if r.status == "error":
                ET.SubElement(case, "error", type=str(r.error_kind or "error"), message=r.reason or "")
            elif r.status == "excluded":
                ET.SubElement(case, "skipped", message=r.reason or "excluded")
            elif not r.passed:
                text = claims_text(r)
                failure = ET.SubElement(case, "failure", type="below_threshold", message=text.splitlines()[0])
                failure.text = text
            else:
                ET.SubElement(case, "system-out").text = claims_text(r)
    return suites


def write_junit(path: Path, run: str, results: Sequence[TaskResult]) -> None:
    tree = ET.ElementTree(junit_xml(run, results))
    ET.indent(tree)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tree.write(path, encoding="utf-8", xml_declaration=True)
    except OSError as exc:
        raise StorageError(path, exc) from exc
