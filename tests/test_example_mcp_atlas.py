"""examples/mcp-atlas.yaml holds MCP-Atlas's own harness and judge settings.

Each value is read out of the vendored MCP-Atlas source (scaleapi/mcp-atlas at 5b6220c) and
compared with the example as the real run-spec loader reads it, so a drift on either side fails
here. Python files are read with ``ast``, TypeScript constants with anchored regexes.
"""

from __future__ import annotations

import ast
import functools
import os
import re
import tarfile
from pathlib import Path
from typing import Any

import pytest

from atlasrun.judge.base import LABEL_SCORES
from atlasrun.judge.llm import MAX_ANSWER_CHARS, TRUNCATION_NOTE
from atlasrun.judge.prompt import CLAIM_JUDGE_PROMPT
from atlasrun.runner.fingerprint import fingerprint
from atlasrun.runspec.run import RunSpec, load_run_spec
from atlasrun.tasks.fields import MIN_CLAIM_CHARS

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "mcp-atlas.yaml"
# The directory of vendored source archives, as servers/source.py's tests name it.
ARCHIVE = (
    Path(os.environ.get("ATLAS_SOURCE_ARCHIVES", "/work/shared/vendor")) / "mcp-atlas-5b6220c.src.tar.gz"
)
HARNESS = "services/agent-harness/src/"


@functools.cache
def source(path: str) -> str:
    """One file of the vendored MCP-Atlas source, by its path in the repository."""
    assert ARCHIVE.is_file(), f"MCP-Atlas source archive missing: {ARCHIVE} (set ATLAS_SOURCE_ARCHIVES)"
    with tarfile.open(ARCHIVE) as archive:
        for member in archive.getmembers():
            if member.isfile() and member.name.split("/", 1)[-1] == path:
                handle = archive.extractfile(member)
                assert handle is not None
                return handle.read().decode()
    raise AssertionError(f"{path} not in {ARCHIVE}")


def ts_number(path: str, pattern: str) -> int:
    """The number ``pattern``'s group captures in a TypeScript file (``60_000`` style allowed)."""
    found = re.findall(pattern, source(path), flags=re.MULTILINE)
    assert len(found) == 1, f"{path}: expected one match of {pattern!r}, found {found}"
    return int(found[0].replace("_", ""))


@functools.cache
def python_tree(path: str) -> ast.Module:
    return ast.parse(source(path))


def function(path: str, name: str) -> ast.FunctionDef | ast.AsyncFunctionDef:
    found = [
        node
        for node in ast.walk(python_tree(path))
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name == name
    ]
    assert len(found) == 1, f"{path}: {len(found)} functions named {name}"
    return found[0]


def calls(node: ast.AST, name: str) -> list[ast.Call]:
    """Calls of ``name`` (a plain name or an attribute) under ``node``."""
    return [
        call
        for call in ast.walk(node)
        if isinstance(call, ast.Call)
        and (
            (isinstance(call.func, ast.Name) and call.func.id == name)
            or (isinstance(call.func, ast.Attribute) and call.func.attr == name)
        )
    ]


def keyword(call: ast.Call, name: str) -> Any:
    (value,) = [k.value for k in call.keywords if k.arg == name]
    return ast.literal_eval(value)


def argparse_default_node(path: str, flag: str) -> ast.expr | None:
    """The ``default=`` expression of ``parser.add_argument(flag, ...)`` (None when it has none)."""
    found = [
        c
        for c in calls(python_tree(path), "add_argument")
        if c.args and isinstance(c.args[0], ast.Constant) and c.args[0].value == flag
    ]
    assert len(found) == 1, f"{path}: {len(found)} add_argument({flag!r})"
    defaults = [k.value for k in found[0].keywords if k.arg == "default"]
    return defaults[0] if defaults else None


def argparse_default(path: str, flag: str) -> Any:
    node = argparse_default_node(path, flag)
    return None if node is None else ast.literal_eval(node)


def module_constant(path: str, name: str) -> Any:
    (value,) = [
        node.value
        for node in python_tree(path).body
        if isinstance(node, ast.Assign)
        and any(isinstance(t, ast.Name) and t.id == name for t in node.targets)
    ]
    return ast.literal_eval(value)


def local_constant(node: ast.AST, name: str) -> Any:
    (value,) = [
        n.value
        for n in ast.walk(node)
        if isinstance(n, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in n.targets)
    ]
    return ast.literal_eval(value)


@pytest.fixture(scope="module")
def example() -> RunSpec:
    return load_run_spec(EXAMPLE)


def test_agent_loop_limits_are_the_harness_defaults(example: RunSpec) -> None:
    agent_eval = HARNESS + "mcp-agent/agent-evals/agent-eval.ts"
    config = HARNESS + "config.ts"
    limits = example.spec.limits
    assert limits.max_turns == ts_number(agent_eval, r"^const DEFAULT_MAX_TURNS = ([\d_]+);")
    assert limits.max_tool_calls == ts_number(agent_eval, r"^const DEFAULT_MAX_TOOL_CALLS = ([\d_]+);")
    # run_eval.py forwards its limits only when given: the harness defaults above are the ones used.
    assert argparse_default("run_eval.py", "--max-turns") is None
    assert argparse_default("run_eval.py", "--max-tool-calls") is None
    ms = r"\) \|\| ([\d_]+),"
    assert limits.tool_timeout_s * 1000 == ts_number(
        config, r"toolCallTimeoutMs: Number\(process\.env\.TOOL_CALL_TIMEOUT_MS" + ms
    )
    assert limits.provider_timeout_s * 1000 == ts_number(
        config, r"llmTimeoutMs: Number\(process\.env\.LLM_TIMEOUT_MS" + ms
    )
    assert limits.server_start_timeout_s * 1000 == ts_number(
        config, r"listToolsTimeoutMs: Number\(process\.env\.LIST_TOOLS_TIMEOUT_MS" + ms
    )
    assert limits.task_timeout_s == argparse_default("run_eval.py", "--timeout")
    assert example.spec.parallelism == argparse_default("run_eval.py", "--concurrency")
    assert example.spec.tasks.dataset == module_constant("run_eval.py", "DEFAULT_DATASET")


def test_tool_output_is_uncapped_as_in_the_harness(example: RunSpec) -> None:
    assert argparse_default("run_eval.py", "--tool-output-cap") is None
    assert argparse_default("run_eval.py", "--context-window-management") is None
    agent_eval = source(HARNESS + "mcp-agent/agent-evals/agent-eval.ts")
    assert "const cappedContent = toolOutputCap\n" in agent_eval  # capped only when a cap is given
    strategy = HARNESS + "mcp-agent/agent-evals/strategies/litellm-strategy.ts"
    assert example.spec.limits.tool_output_chars == ts_number(strategy, r"^const MAX_BODY_SIZE = ([\d_]+);")


def test_model_gets_no_sampling_parameters_and_no_system_prompt(example: RunSpec) -> None:
    strategy = source(HARNESS + "mcp-agent/agent-evals/strategies/litellm-strategy.ts")
    payload = re.search(r"const payload: Record<string, any> = \{(.*?)\n    \};", strategy, re.DOTALL)
    assert payload is not None
    keys = re.findall(r"^\s+(\w+):", payload.group(1), flags=re.MULTILINE)
    assert keys == ["model", "messages", "tools"] and "...extraLlmParamsRest" in payload.group(1)
    assert argparse_default("run_eval.py", "--extra-llm-params") is None
    assert argparse_default("run_eval.py", "--system-prompt") is None
    (model,) = example.spec.models
    assert model.params == {}


def test_judge_model_temperature_concurrency_and_retries(example: RunSpec) -> None:
    scorer = "services/scoring/score_claims.py"
    (judge,) = example.spec.judges
    config = next(
        n
        for n in ast.walk(python_tree(scorer))
        if isinstance(n, ast.ClassDef) and n.name == "EvaluatorConfig"
    )
    (model_default,) = [
        n.value
        for n in config.body
        if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name) and n.target.id == "model_name"
    ]
    assert model_default is not None and judge.model == ast.literal_eval(model_default)
    # --evaluator-model defaults to os.getenv("EVAL_LLM_MODEL", <the same model>).
    flag_default = argparse_default_node(scorer, "--evaluator-model")
    assert isinstance(flag_default, ast.Call) and ast.unparse(flag_default.func) == "os.getenv"
    assert judge.model == ast.literal_eval(flag_default.args[1])
    (judge_call,) = calls(function(scorer, "evaluate_single_claim"), "generate_structured_content")
    assert judge.temperature == keyword(judge_call, "temperature") == 0.0
    (stop,) = calls(function(scorer, "generate_structured_content"), "stop_after_attempt")
    assert example.spec.limits.judge_retries + 1 == ast.literal_eval(stop.args[0])
    # __main__: a judge model with "pro" in its name gets concurrency 12.
    auto = re.search(r'if "pro" in model:\n\s+args\.concurrency = (\d+)', source(scorer))
    assert auto is not None and "pro" in (judge.model or "")
    assert judge.max_concurrency == int(auto.group(1))


def test_judge_prompt_is_mcp_atlas_text_line_for_line() -> None:
    prompt_fn = function("services/scoring/score_claims.py", "_get_single_claim_evaluation_prompt")
    (returned,) = [n.value for n in ast.walk(prompt_fn) if isinstance(n, ast.Return)]
    assert isinstance(returned, ast.JoinedStr)
    # The f-string's literal parts, with its fields back as {claim} and {response} placeholders.
    parts = []
    for part in returned.values:
        if isinstance(part, ast.FormattedValue):
            parts.append("{" + ast.unparse(part.value) + "}")
        else:
            assert isinstance(part, ast.Constant)
            parts.append(str(part.value))
    text = "".join(parts)
    theirs = [line for line in text.splitlines() if line.strip()]
    ours = [line for line in CLAIM_JUDGE_PROMPT.splitlines() if line.strip()]
    # The same lines in the same order; AtlasRun only adds blank lines and the JSON answer format.
    assert ours[: len(theirs)] == theirs
    assert ours[len(theirs)].startswith("Answer with a JSON object only")
    labels = local_constant(function("services/scoring/score_claims.py", "evaluate"), "coverage_to_score")
    assert labels == LABEL_SCORES


def test_judge_input_truncation_and_claim_filter_match() -> None:
    scorer = "services/scoring/score_claims.py"
    safe_evaluate = function(scorer, "safe_evaluate")
    assert local_constant(safe_evaluate, "MAX_RESPONSE_CHARS") == MAX_ANSWER_CHARS
    (note,) = [
        str(n.right.value)
        for n in ast.walk(safe_evaluate)
        if isinstance(n, ast.BinOp)
        and isinstance(n.right, ast.Constant)
        and "TRUNCATED" in str(n.right.value)
    ]
    # AtlasRun's note spells MCP-Atlas's em dash as an ASCII hyphen; otherwise the same text.
    assert note.replace("\u2014", "-") == TRUNCATION_NOTE
    assert "len(cleaned) > 3" in ast.unparse(function(scorer, "extract_claims"))
    assert MIN_CLAIM_CHARS == 3 + 1


def test_pass_threshold_and_coverage_rounding(example: RunSpec) -> None:
    scorer = "services/scoring/score_claims.py"
    stats = ast.unparse(function(scorer, "_compute_split_stats"))
    headline = re.search(r"'pass_rate_0\.75': round\(float\(\(scores >= ([\d.]+)\)", stats)
    assert headline is not None and example.spec.pass_threshold == float(headline.group(1))
    (rounding,) = [
        c for c in calls(function(scorer, "evaluate"), "round") if "total_score" in ast.unparse(c.args[0])
    ]
    assert example.spec.scoring.coverage_decimals == ast.literal_eval(rounding.args[1]) == 3


def test_judge_failure_is_scored_zero_as_mcp_atlas_does(example: RunSpec) -> None:
    scorer = "services/scoring/score_claims.py"
    single = function(scorer, "evaluate_single_claim")
    (handler,) = [n for n in ast.walk(single) if isinstance(n, ast.ExceptHandler)]
    (fallback,) = [n.value for n in ast.walk(handler) if isinstance(n, ast.Return)]
    assert isinstance(fallback, ast.Dict)
    outcome = {ast.literal_eval(k): v for k, v in zip(fallback.keys, fallback.values, strict=True) if k}
    assert ast.literal_eval(outcome["coverage_outcome"]) == "not_fulfilled"
    assert LABEL_SCORES["not_fulfilled"] == 0.0
    assert example.spec.scoring.judge_failure == "zero"


def test_example_selects_mcp_atlas_servers_and_its_scoring_is_fingerprinted(example: RunSpec) -> None:
    assert example.spec.servers.catalog == "mcp-atlas" and example.spec.servers.enabled is None
    changed = example.model_copy(deep=True)
    changed.spec.scoring.judge_failure = "exclude"
    assert fingerprint(changed)["fields"]["scoring"] != fingerprint(example)["fields"]["scoring"]
