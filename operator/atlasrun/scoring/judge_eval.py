"""Judge calibration: run a judge on hand-labelled (claim, answer) pairs and measure agreement.

A labels file is JSONL, one ``{"id", "claim", "answer", "label"}`` object a line (``label`` one of
fulfilled / partially_fulfilled / not_fulfilled; extra keys such as ``category`` are kept); a
first line that is an object with only a ``_comment`` key is a header and skipped.
Figures: exact agreement, Cohen's kappa (``scoring.agreement``), precision and recall of
``fulfilled`` (a false pass is the worst error a judge makes), and the 3x3 confusion matrix, all
on the pairs the judge answered; abstentions (a judge that can abstain, e.g. the deterministic one)
are counted apart, and ``accuracy_abstain_wrong`` counts each as a wrong answer.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError

from atlasrun.errors import InputError, format_validation
from atlasrun.judge.base import AbstentionKind, ClaimVerdict, Judge, Label
from atlasrun.scoring.agreement import LABELS, cohens_kappa
from atlasrun.tasks.documents import decode
from atlasrun.tasks.files import DOCUMENT_LIMIT, read_user_file


class LabelledPair(BaseModel):
    model_config = ConfigDict(extra="allow")

    id: str
    claim: str
    answer: str
    label: Label
    category: str | None = None


_Errors = list[tuple[int, str]]  # (line number, what is wrong there), reported in line order
_WHOLE_FILE = 1 << 30  # an error of no one line ("3 pair(s) not graded") comes last


def _records(path: Path, what: str) -> tuple[list[tuple[int, Any]], _Errors]:
    """(line number, JSON value) of every non-blank line of a JSONL file, a first line that is an
    object with only a ``_comment`` key (a header saying what the file is) left out; and an error
    for each line that is not JSON."""
    if not path.exists():  # anything else that is not a regular file: read_user_file names its kind
        raise InputError(f"{what} not found", where=str(path))
    text = decode(read_user_file(path, what, DOCUMENT_LIMIT), str(path))
    records: list[tuple[int, Any]] = []
    errors: _Errors = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            raw: Any = json.loads(line)
        except ValueError as exc:
            errors.append((number, f"line {number}: not JSON ({exc})"))
            continue
        if number == 1 and isinstance(raw, dict) and set(raw) == {"_comment"}:
            continue
        records.append((number, raw))
    return records, errors


def load_labels(path: Path) -> list[LabelledPair]:
    """Every line of a labels file; a bad line is an error naming the line, id and field."""
    records, errors = _records(path, "labels file")
    pairs: list[LabelledPair] = []
    seen: set[str] = set()
    for number, raw in records:
        ident = raw.get("id", "?") if isinstance(raw, dict) else "?"
        try:
            pair = LabelledPair.model_validate(raw)
        except ValidationError as exc:
            errors.append((number, f"line {number}, id {ident}: {format_validation(exc)}"))
            continue
        if pair.id in seen:
            errors.append((number, f"line {number}, id {pair.id}: duplicate id"))
            continue
        seen.add(pair.id)
        pairs.append(pair)
    _raise_any(errors, path)
    if not pairs:
        raise InputError("no labelled pairs", where=str(path))
    return pairs


class Grade(BaseModel):
    """Another grader's label for a pair of a labels file (``judge-eval --against``)."""

    model_config = ConfigDict(extra="allow")

    id: str
    label: Label


def load_grades(path: Path, pairs: Sequence[LabelledPair]) -> dict[str, Label]:
    """A second grader's labels (JSONL ``{"id", "label"}``) for exactly the pairs of a labels file;
    a bad line, an unknown id or a pair left unlabelled is an error naming it."""
    records, errors = _records(path, "grades file")
    grades: dict[str, Label] = {}
    wanted = {p.id for p in pairs}
    for number, raw in records:
        try:
            grade = Grade.model_validate(raw)
        except ValidationError as exc:
            errors.append((number, f"line {number}: {format_validation(exc)}"))
            continue
        if grade.id not in wanted:
            errors.append((number, f"line {number}: id {grade.id} is not in the labels file"))
        elif grade.id in grades:
            errors.append((number, f"line {number}: id {grade.id} graded twice"))
        grades[grade.id] = grade.label
    missing = [p.id for p in pairs if p.id not in grades]
    if missing:
        errors.append((_WHOLE_FILE, f"{len(missing)} pair(s) not graded: {', '.join(missing[:5])}"))
    _raise_any(errors, path)
    return grades


def _raise_any(errors: _Errors, path: Path) -> None:
    """One error naming the first ten problems in line order (a file's JSON errors are found before
    its field errors), and how many more there are."""
    if not errors:
        return
    said = [message for _, message in sorted(errors, key=lambda e: e[0])]
    more = f" (+{len(said) - 10} more)" if len(said) > 10 else ""
    raise InputError("; ".join(said[:10]) + more, where=str(path))


def compare_graders(name: str, pairs: Sequence[LabelledPair], grades: dict[str, Label]) -> JudgeEval:
    """A second grader's labels measured as a judge would be: the agreement two graders reach is
    what a judge's figures on the same pairs can be read against."""
    outcomes = [
        PairOutcome(id=p.id, category=p.category, expected=p.label, got=grades[p.id], reason=name)
        for p in pairs
    ]
    return summarize(name, outcomes)


class PairOutcome(BaseModel):
    id: str
    category: str | None
    expected: Label
    got: Label | None  # None: the judge failed or abstained on this pair
    abstained: AbstentionKind | None = None
    reason: str


class JudgeEval(BaseModel):
    judge: str
    n: int  # pairs the judge labelled (answered)
    failed: int  # pairs the judge failed on (left out of every figure)
    abstained: int  # pairs the judge abstained on (left out of every figure but the two below)
    abstention_rate: float | None  # abstained / (answered + abstained)
    accuracy: float | None  # on the answered pairs
    accuracy_abstain_wrong: float | None  # an abstention counted as a wrong answer
    kappa: float | None
    fulfilled_precision: float | None
    fulfilled_recall: float | None
    confusion: dict[str, dict[str, int]]  # expected label -> judge label -> count
    by_category: dict[str, float]  # category -> exact agreement on answered pairs
    abstained_by_kind: dict[str, int]
    outcomes: list[PairOutcome]


async def _judge_all(judge: Judge, pairs: Sequence[LabelledPair]) -> list[ClaimVerdict]:
    return list(await asyncio.gather(*(judge.judge(p.claim, p.answer) for p in pairs)))


def evaluate(judge: Judge, pairs: Sequence[LabelledPair]) -> JudgeEval:
    verdicts = asyncio.run(_judge_all(judge, pairs))
    outcomes = [
        PairOutcome(
            id=p.id,
            category=p.category,
            expected=p.label,
            got=v.label,
            abstained=v.abstention.kind if v.abstention else None,
            reason=v.error or v.reason,
        )
        for p, v in zip(pairs, verdicts, strict=True)
    ]
    return summarize(judge.info.name, outcomes)


def _ratio(num: int, den: int) -> float | None:
    return num / den if den else None


def summarize(judge_name: str, outcomes: list[PairOutcome]) -> JudgeEval:
    judged = [(o.expected, o.got) for o in outcomes if o.got is not None]
    confusion = {e: {g: 0 for g in LABELS} for e in LABELS}
    for expected, got in judged:
        confusion[expected][got] += 1
    said_fulfilled = sum(confusion[e]["fulfilled"] for e in LABELS)
    truly_fulfilled = sum(confusion["fulfilled"].values())
    hits = confusion["fulfilled"]["fulfilled"]
    categories: dict[str, list[bool]] = {}
    for o in outcomes:
        if o.got is not None:
            categories.setdefault(o.category or "(none)", []).append(o.got == o.expected)
    abstained = [o for o in outcomes if o.abstained is not None]
    kinds: dict[str, int] = {}
    for o in abstained:
        kinds[str(o.abstained)] = kinds.get(str(o.abstained), 0) + 1
    right = sum(1 for e, g in judged if e == g)
    return JudgeEval(
        judge=judge_name,
        n=len(judged),
        failed=len(outcomes) - len(judged) - len(abstained),
        abstained=len(abstained),
        abstention_rate=_ratio(len(abstained), len(judged) + len(abstained)),
        accuracy=_ratio(right, len(judged)),
        accuracy_abstain_wrong=_ratio(right, len(judged) + len(abstained)),
        kappa=cohens_kappa([(e, str(g)) for e, g in judged]),
        fulfilled_precision=_ratio(hits, said_fulfilled),
        fulfilled_recall=_ratio(hits, truly_fulfilled),
        confusion=confusion,
        by_category={c: sum(v) / len(v) for c, v in sorted(categories.items())},
        abstained_by_kind=kinds,
        outcomes=outcomes,
    )
