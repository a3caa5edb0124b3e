"""`atlas judge-eval`: the figures it prints, and the deterministic judge's quality gate."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from atlasrun.cli import main
from atlasrun.errors import InputError
from atlasrun.scoring.judge_eval import PairOutcome, load_labels, summarize

DATA = Path(__file__).parent / "data"


def _eval_json(path: Path, capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    assert main(["judge-eval", str(path), "--judge", "deterministic", "--json"]) == 0
    body: dict[str, Any] = json.loads(capsys.readouterr().out)
    return body


@pytest.mark.parametrize(
    "name", ["judge_labels.jsonl", "judge_labels_holdout.jsonl", "judge_labels_dev2.jsonl"]
)
def test_deterministic_judge_meets_the_goal(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 20's goal: fulfilled precision >= 0.95 and accuracy >= 0.90 on the answered pairs, at
    most 30% abstained. (These sets were used for tuning: the held-out measure is the blind set.)"""
    body = _eval_json(DATA / name, capsys)
    assert set(body) >= {"n", "accuracy", "kappa", "fulfilled_precision", "fulfilled_recall", "confusion"}
    assert set(body) >= {"abstained", "abstention_rate", "accuracy_abstain_wrong", "abstained_by_kind"}
    assert body["n"] + body["abstained"] + body["failed"] == len(load_labels(DATA / name))
    assert body["accuracy"] >= 0.90, body
    assert body["fulfilled_precision"] >= 0.95, body
    assert body["abstention_rate"] <= 0.30, body
    assert body["accuracy_abstain_wrong"] == pytest.approx(
        body["accuracy"] * body["n"] / (body["n"] + body["abstained"])
    )


def test_abstentions_are_counted_apart_and_as_wrong(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A header line is skipped; an answer in another language is abstained on: out of the answered figures, in
    ``abstained`` and by kind, and wrong in ``accuracy_abstain_wrong``."""
    rows = [
        {"_comment": "a header: what this set is for"},
        {"id": "a", "claim": "The sum is 42", "answer": "The sum is 42.", "label": "fulfilled"},
        {"id": "b", "claim": "The sum is 42", "answer": "The sum is 30.", "label": "not_fulfilled"},
        {
            "id": "c",
            "claim": "The sum is 42",
            "answer": "La somme n'est pas 42 selon le fichier.",
            "label": "partially_fulfilled",
        },
    ]
    labels = tmp_path / "labels.jsonl"
    labels.write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert [p.id for p in load_labels(labels)] == ["a", "b", "c"]
    body = _eval_json(labels, capsys)
    assert (body["n"], body["abstained"], body["failed"]) == (2, 1, 0)
    assert (body["accuracy"], body["fulfilled_precision"]) == (1.0, 1.0)
    assert body["accuracy_abstain_wrong"] == pytest.approx(2 / 3) and body[
        "abstention_rate"
    ] == pytest.approx(1 / 3)
    assert body["abstained_by_kind"] == {"language": 1}
    assert main(["judge-eval", str(labels), "--judge", "deterministic", "-v"]) == 0
    out = capsys.readouterr().out
    assert "2 pair(s) answered, 1 abstained (0.333)" in out and "abstentions by kind: language 1" in out
    assert (
        "accuracy counting an abstention as wrong 0.667" in out
        and "  c: label partially_fulfilled: uncertain (language)" in out
    )
    labels.write_text(json.dumps({"_comment": "x", "id": "z"}) + "\n")  # not a header: more than a comment
    with pytest.raises(InputError, match="line 1, id z"):
        load_labels(labels)


def test_labelled_sets_cover_every_category() -> None:
    wanted = {
        "negation", "wrong_entity", "swapped_roles", "direction", "number_words", "number_formats",
        "dates_times", "units", "percent_points", "tolerance", "partial_list", "hedged_refusing",
        "empty", "number_dump",
    }  # fmt: skip
    main_set, holdout = (
        load_labels(DATA / "judge_labels.jsonl"),
        load_labels(DATA / "judge_labels_holdout.jsonl"),
    )
    assert len(main_set) >= 300 and len(holdout) >= 80
    assert wanted <= {p.category for p in main_set} and wanted <= {p.category for p in holdout}
    assert not {(p.claim, p.answer) for p in main_set} & {(p.claim, p.answer) for p in holdout}


def test_figures_hand_computed() -> None:
    # 4 pairs: F->F, F->P, N->F, P->P. accuracy 2/4; fulfilled precision 1/2 (one of two F verdicts
    # right), recall 1/2; kappa: p_o = .5, p_e = (2/4*2/4) + (1/4*2/4) + (1/4*0) = .375 -> .2
    rows = [("fulfilled", "fulfilled"), ("fulfilled", "partially_fulfilled"), ("not_fulfilled", "fulfilled")]
    rows.append(("partially_fulfilled", "partially_fulfilled"))
    outcomes = [
        PairOutcome(id=str(i), category=None, expected=e, got=g, reason="") for i, (e, g) in enumerate(rows)
    ]
    result = summarize("x", outcomes)
    assert (result.n, result.accuracy, result.fulfilled_precision, result.fulfilled_recall) == (
        4,
        0.5,
        0.5,
        0.5,
    )
    assert result.kappa == pytest.approx(0.2)
    assert result.confusion["not_fulfilled"]["fulfilled"] == 1


def test_table_output_and_bad_lines(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    good = tmp_path / "good.jsonl"
    good.write_text(
        json.dumps({"id": "a", "claim": "The sum is 42", "answer": "The sum is 42.", "label": "fulfilled"})
        + "\n"
        + json.dumps({"id": "b", "claim": "The sum is 42", "answer": "", "label": "not_fulfilled"})
        + "\n"
    )
    assert main(["judge-eval", str(good), "--judge", "deterministic"]) == 0
    out = capsys.readouterr().out
    assert "accuracy 1.000" in out and "fulfilled precision 1.000" in out
    bad = tmp_path / "bad.jsonl"
    bad.write_text(good.read_text() + '{"id": "c", "claim": "x", "answer": "y", "label": "maybe"}\n')
    with pytest.raises(InputError, match="line 3, id c: label"):
        load_labels(bad)
    assert main(["judge-eval", str(good), "--judge", "gpt-judge"]) == 2
    assert "needs --run" in capsys.readouterr().err


def test_an_llm_judge_of_a_run_file_is_measured_and_a_lenient_one_exposed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--judge NAME --run run.yaml``: the run's LLM judge, through litellm to the scripted
    provider. This judge says ``fulfilled`` to everything (and garbage for one claim): judge-eval
    shows its precision is just the share of fulfilled labels, kappa near 0, and counts the
    garbage as failed pairs, never as a label."""
    from atlasrun.testing.scripted_provider import Reply, ScriptedProvider

    labels = load_labels(DATA / "judge_labels_holdout.jsonl")
    garbage_claim = next(p.claim for p in labels if p.answer.strip())

    def lenient(body: dict[str, object]) -> Reply:
        prompt = str(body["messages"][0]["content"])  # type: ignore[index]
        if garbage_claim in prompt:
            return Reply(content="I think so")
        return Reply(content=json.dumps({"coverage_outcome": "fulfilled", "justification": "looks fine"}))

    with ScriptedProvider(lenient) as provider:
        run_file = tmp_path / "run.yaml"
        run_file.write_text(
            "apiVersion: atlasrun.dev/v1alpha1\nkind: AtlasRun\nmetadata: {name: je}\nspec:\n"
            "  tasks: {path: tasks.yaml}\n  models: [{name: replay}]\n"
            f"  judges: [{{name: lenient, model: openai/judge, apiBase: '{provider.api_base}'}}]\n"
            "  limits: {judgeRetries: 0, retryBackoffSeconds: 0}\n"
        )
        code = main(["judge-eval", str(DATA / "judge_labels_holdout.jsonl"), "--judge", "lenient",
                     "--run", str(run_file), "--json"])  # fmt: skip
    assert code == 0
    body = json.loads(capsys.readouterr().out)
    garbage = [p for p in labels if p.claim == garbage_claim and p.answer.strip()]
    judged = [p for p in labels if not (p.claim == garbage_claim and p.answer.strip())]
    called = [p for p in judged if p.answer.strip()]  # an empty answer is not_fulfilled without a call
    assert body["failed"] == len(garbage) and body["n"] == len(judged)
    assert len(provider.requests) >= len(called) + len(garbage)
    assert body["fulfilled_recall"] == 1.0
    share = sum(p.label == "fulfilled" for p in called) / len(called)
    assert body["fulfilled_precision"] == pytest.approx(share)
    assert body["kappa"] < 0.2 and body["accuracy"] < 0.85


@pytest.mark.parametrize(("name", "floor"), [("dev6", 0.92), ("dev7", 0.95)])
def test_a_second_grader_is_measured_like_a_judge(
    name: str, floor: float, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--against``: two graders' labels of the same pairs, each blind to the other's: the ceiling
    a judge's figures on that set are read against (the judge's own are far below it)."""
    labels, grades = DATA / f"judge_labels_{name}.jsonl", DATA / f"judge_regrade_{name}.jsonl"
    assert main(["judge-eval", str(labels), "--against", str(grades), "--json"]) == 0
    body = json.loads(capsys.readouterr().out)
    assert body["judge"] == f"grader judge_regrade_{name}.jsonl"
    assert body["abstained"] == 0 and body["n"] == len(load_labels(labels))
    assert body["accuracy"] >= floor and body["fulfilled_precision"] >= 0.94, body
    judge = _eval_json(labels, capsys)
    assert judge["accuracy"] < body["accuracy"] - 0.1


def test_bad_grades_are_named(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    labels = tmp_path / "labels.jsonl"
    labels.write_text(
        "".join(
            json.dumps(
                {"id": i, "claim": "The job took 4 minutes.", "answer": "4 minutes.", "label": "fulfilled"}
            )
            + "\n"
            for i in ("a", "b", "c")
        )
    )
    grades = tmp_path / "grades.jsonl"
    grades.write_text(
        json.dumps({"id": "a", "label": "fulfilled"})
        + "\n"
        + json.dumps({"id": "a", "label": "not_fulfilled"})
        + "\n{oops\n"
        + json.dumps({"id": "zz", "label": "fulfilled"})
        + "\n"
        + json.dumps({"id": "b", "label": "great"})
        + "\n"
    )
    assert main(["judge-eval", str(labels), "--against", str(grades)]) == 2
    text = capsys.readouterr().err
    for expected in (
        "id a graded twice",
        "line 3: not JSON",
        "id zz is not in the labels file",
        "line 5",
        "not graded: b, c",
    ):
        assert expected in text, text
    assert str(grades) in text
    assert main(["judge-eval", str(labels)]) == 2
    assert "either --judge" in capsys.readouterr().err
    assert main(["judge-eval", str(labels), "--judge", "deterministic", "--against", str(grades)]) == 2
    assert "either --judge" in capsys.readouterr().err
    grades.write_text("".join(json.dumps({"id": i, "label": "fulfilled"}) + "\n" for i in ("a", "b", "c")))
    assert main(["judge-eval", str(labels), "--against", str(grades)]) == 0
    assert "columns: second grader" in capsys.readouterr().out


@pytest.mark.parametrize("path", sorted(DATA.glob("judge_labels*.jsonl")), ids=lambda p: p.stem)
def test_the_rules_never_fault_on_any_labelled_text(path: Path) -> None:
    """Every pair of every set, the blind ones included (only faults are read here, never a label):
    a fault in the rules would be that claim's judge failure in a run."""
    from atlasrun.judge.deterministic import DeterministicJudge

    judge = DeterministicJudge()
    faults = [(p.id, str(e)) for p in load_labels(path) if (e := _fault(judge, p.claim, p.answer))]
    assert not faults, faults[:3]


def _fault(judge: Any, claim: str, answer: str) -> Exception | None:
    try:
        judge.judge_sync(claim, answer)
    except Exception as exc:  # the judge's async entry point turns this into a failed verdict
        return exc
    return None
