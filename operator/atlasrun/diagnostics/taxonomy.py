"""The 11-mode failure taxonomy (MCP-Atlas Appendix E, Table 6): the one source of truth.

Four tool-call modes and seven cognitive modes. Ids are what judges answer and
what ``diagnoses.jsonl`` stores; labels are the short column headers of the
paper's Tables 3 and 4; descriptions and examples are the definitions the LLM
diagnostic judge is given.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Family = Literal["tool_call", "cognitive"]
FAMILIES: tuple[Family, ...] = ("tool_call", "cognitive")
FAMILY_LABELS: dict[Family, str] = {"tool_call": "Tool%", "cognitive": "Cog%"}

# The deterministic diagnoser's answer when no signal applies. Not a taxonomy mode.
UNCLASSIFIED = "unclassified"


@dataclass(frozen=True)
class FailureMode:
    id: str
    family: Family
    label: str  # short label used in the paper's tables
    description: str
    example: str


MODES: tuple[FailureMode, ...] = (
    FailureMode(
        "malformed_call",
        "tool_call",
        "Malformed",
        "Right tool, wrong parameters: missing arguments, bad types, or wrong values.",
        "Called mongodb_find with column name 'revenue' when the schema field is 'Revenue_USD'.",
    ),
    FailureMode(
        "wrong_tool",
        "tool_call",
        "Wrong Tool",
        "Picked a tool that cannot answer the subtask, even though a correct tool was available.",
        "Used wikipedia_search for a fact that lives only in the Airtable database.",
    ),
    FailureMode(
        "no_tool_use",
        "tool_call",
        "No Tool Use",
        "Answered from internal knowledge without calling any tool, even though tools were required.",
        "Reported a historical date directly without querying any source.",
    ),
    FailureMode(
        "err_recovery",
        "tool_call",
        "Err. Recovery",
        "A tool returned an error and the model could not adapt: it retried identically, looped, or gave up.",
        "Retried the same call five times instead of backing off or trying a different server.",
    ),
    FailureMode(
        "task_misunderstanding",
        "cognitive",
        "Task Misund.",
        "Answered a different question than the one asked, or missed a key requirement in the prompt.",
        "Prompt asked for 'average revenue in December'; the model returned total revenue for the full year.",
    ),
    FailureMode(
        "faulty_synthesis",
        "cognitive",
        "Faulty Synth.",
        "Had the right tool outputs but combined or interpreted them incorrectly. Not a logic error.",
        "Queried the right table, got the right rows, then averaged the wrong column in the final answer.",
    ),
    FailureMode(
        "response_misparsing",
        "cognitive",
        "Misparsing",
        "Got valid tool output but misread its structure or extracted the wrong field.",
        "Tool returned a list of 10 records but the model picked the wrong row or read the wrong field.",
    ),
    FailureMode(
        "early_termination",
        "cognitive",
        "Early Term.",
        "Understood the task but stopped before completing all the required steps.",
        "Found one half of a two-part answer and produced a final answer without addressing the other half.",
    ),
    FailureMode(
        "hallucinated_fact",
        "cognitive",
        "Hallucinated",
        "Stated something in the final answer that did not appear in any tool output.",
        "Tool returned a population of 45,000 but the model wrote 54,000 in its answer.",
    ),
    FailureMode(
        "logical_error",
        "cognitive",
        "Logical Err.",
        "Multi-step reasoning chain was flawed even though the underlying data were correct.",
        "Correctly retrieved the date and database records, then applied the wrong conditional to filter "
        "them.",
    ),
    FailureMode(
        "constraint_violation",
        "cognitive",
        "Constraint",
        "Ignored an explicit condition or filter stated in the prompt.",
        "Prompt said 'only premium units built in 2017' but the model queried all units across all years.",
    ),
)

BY_ID: dict[str, FailureMode] = {m.id: m for m in MODES}
MODE_IDS: tuple[str, ...] = tuple(BY_ID)


def modes_of(family: Family) -> tuple[FailureMode, ...]:
    return tuple(m for m in MODES if m.family == family)


def get(mode_id: str) -> FailureMode:
    """The mode with this id; ValueError (usable in pydantic validators) names the valid ids."""
    try:
        return BY_ID[mode_id]
    except KeyError:
        raise ValueError(f"unknown failure mode {mode_id!r}; valid: {', '.join(MODE_IDS)}") from None


def normalize(text: str) -> str:
    """Case/spacing-insensitive form of a mode id ("Early Termination" -> "early_termination")."""
    return "_".join(text.strip().lower().replace("-", " ").split())


def definitions_text() -> str:
    """The FAILURE MODE DEFINITIONS block of the diagnosis prompt (Appendix E.1), built from MODES."""
    intro = {
        "tool_call": "TOOL CALL FAMILY -- Problems with how the model interacted with tools:",
        "cognitive": "COGNITIVE FAMILY -- Problems with how the model reasoned about the task:",
    }
    blocks = []
    for family in FAMILIES:
        lines = [intro[family]]
        lines += [f"- {m.id}: {m.description} (e.g., {m.example})" for m in modes_of(family)]
        blocks.append("\n".join(lines))
    return "\n".join(blocks)
