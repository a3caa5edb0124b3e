"""The local run engine: (task x model x repeat) items -> servers -> agent -> judge -> results.

Concurrency: at most ``parallelism`` items run at once, and at most each
model's ``maxConcurrency``. Server start-up is admitted a little ahead of the
run slots (``lookahead``), so the next tasks' servers start while the current
tasks run. Every item ends as a line in results.jsonl; one failing item never
stops the run.
"""

from __future__ import annotations

import asyncio
import errno
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from atlasrun import naming
from atlasrun.agent.base import Agent
from atlasrun.agent.litellm_agent import PROVIDER_NOTE, PROVIDER_TIMEOUT_NOTE, LiteLLMAgent
from atlasrun.agent.replay import BUILTIN_AGENTS, PartialReplayAgent, ReplayAgent
from atlasrun.agent.transcript import Transcript
from atlasrun.errors import StorageError, did_you_mean
from atlasrun.judge.base import Judge
from atlasrun.judge.deterministic import DeterministicJudge
from atlasrun.judge.llm import LLMJudge
from atlasrun.provider import Endpoint
from atlasrun.redact import Redactor, declare
from atlasrun.runner.plan import Plan
from atlasrun.runspec.run import JudgeSpec, ModelSpec, RunSpec
from atlasrun.scoring.claims import judge_task
from atlasrun.scoring.result import ErrorKind, TaskResult
from atlasrun.scoring.store import ResultsDir
from atlasrun.servers.instance import ServerStartError
from atlasrun.servers.manager import ServerBackend, ServerManager
from atlasrun.servers.remote import RemoteBackend
from atlasrun.servers.sandbox import Sandbox
from atlasrun.servers.selection import task_servers
from atlasrun.servers.surface import ToolSurface
from atlasrun.tasks.model import Task

REPLAY = "replay"
DETERMINISTIC = "deterministic"
# A public-format MCP-Atlas task has no reference answer (its trajectory's final text is narration):
# replaying it can only score 0, so it is excluded rather than scored.
NO_REFERENCE_ANSWER = "no reference answer to replay"


def make_agent(model: ModelSpec) -> Agent:
    if model.litellm_model == REPLAY:
        return ReplayAgent()
    if model.litellm_model == PartialReplayAgent.name:
        return PartialReplayAgent()
    endpoint = Endpoint(
        model.litellm_model, model.api_base, model.api_key_env, tuple(sorted(model.params.items()))
    )
    return LiteLLMAgent(model.name, endpoint)


def make_judge(spec: JudgeSpec, retries: int, backoff_s: float) -> Judge:
    if (spec.model or spec.name) == DETERMINISTIC:
        return DeterministicJudge(spec.name)
    params = {"temperature": spec.temperature, **spec.params}
    endpoint = Endpoint(
        spec.model or spec.name, spec.api_base, spec.api_key_env, tuple(sorted(params.items()))
    )
    return LLMJudge(
        spec.name, endpoint, retries=retries, backoff_base_s=backoff_s, max_concurrency=spec.max_concurrency
    )


@dataclass
class Item:
    task: Task
    model: ModelSpec
    repeat: int
    previous: TaskResult | None = None


class Engine:
    def __init__(
        self,
        spec: RunSpec,
        plan: Plan,
        out: Path,
        data_dir: Path,
        on_result: Callable[[TaskResult], None] | None = None,
        sandbox: Sandbox | None = None,
        *,
        replay_needs_answer: bool = True,
    ) -> None:
        self.spec = spec
        # False for `atlas audit`: it replays trajectories for drift, whatever the answer is.
        self.replay_needs_answer = replay_needs_answer
        self.body = spec.spec
        self.plan = plan
        secrets = [m.api_key_env for m in self.body.models] + [j.api_key_env for j in self.body.judges]
        secrets += [name for server in plan.catalog.servers for name in server.secrets]
        declare(secrets)  # every writer in this process masks them (logs, diagnoses, report)
        self.store = ResultsDir(out, Redactor(secrets))
        self.data_dir = data_dir
        self.on_result = on_result or (lambda r: None)
        self.agents = {m.name: make_agent(m) for m in self.body.models}
        limits = self.body.limits
        self.judges = [make_judge(j, limits.judge_retries, limits.retry_backoff_s) for j in self.body.judges]
        self.judge = self.judges[0]
        url = self.body.servers.environment_url  # backend mcp-atlas-env: its servers, shared state
        self.manager: ServerBackend = (
            RemoteBackend(url, sandbox)
            if url
            else ServerManager(
                plan.catalog,
                data_dir,
                self.body.data_mount,
                self.body.limits.server_start_timeout_s,
                log_dir=out / "logs",
                sandbox=sandbox,
            )
        )
        self._write_lock = asyncio.Lock()

    def items(self, finished: dict[tuple[str, str, int], TaskResult]) -> list[Item]:
        """Work still to do: everything not already scored (errors are redone)."""
        todo = []
        for repeat in range(self.body.repeats):
            for task in self.plan.tasks:
                for model in self.body.models:
                    previous = finished.get((model.name, task.id, repeat))
                    if previous is None or previous.status != "scored":
                        todo.append(Item(task, model, repeat, previous))
        return todo

    def excluded_results(self) -> list[TaskResult]:
        return [
            TaskResult(
                task_id=e.task.id,
                model=m.name,
                repeat=r,
                status="excluded",
                error_kind=ErrorKind.SERVER_NOT_ENABLED,
                reason=e.reason,
                domain=e.task.domain,
                category=e.task.category,
                servers=e.task.required_servers,
            )
            for r in range(self.body.repeats)
            for e in self.plan.excluded
            for m in self.body.models
        ]

    async def run(self, items: list[Item]) -> None:
        (self.store.root / "logs").mkdir(parents=True, exist_ok=True)
        parallelism = self.body.parallelism
        lookahead = max(1, min(parallelism, 4))
        run_slots = asyncio.Semaphore(parallelism)
        prep_slots = asyncio.Semaphore(parallelism + lookahead)
        model_run = {m.name: asyncio.Semaphore(m.max_concurrency) for m in self.body.models}
        model_prep = {m.name: asyncio.Semaphore(m.max_concurrency + lookahead) for m in self.body.models}

        async def one(item: Item) -> None:
            try:
                async with model_prep[item.model.name], prep_slots:
                    result = await self._run_item(item, model_run[item.model.name], run_slots)
            except Exception as exc:
                result = self._base(
                    item, status="error", error_kind=ErrorKind.HARNESS, reason=f"harness error: {exc!r}"
                )
            await self._record(result)

        try:
            async with asyncio.TaskGroup() as group:
                for item in items:
                    group.create_task(one(item))
        except BaseExceptionGroup as failed:
            # A results write failed (disk full, read-only): the run stops (the other items are
            # cancelled) with that error, not an exception group.
            storage = failed.subgroup(StorageError)
            raise (storage or failed).exceptions[0] from None
        finally:
            await self.manager.close()

    async def _record(self, result: TaskResult) -> None:
        async with self._write_lock:
            try:
                await asyncio.to_thread(self.store.append, result)
            except StorageError as exc:
                if exc.errno != errno.ENAMETOOLONG:
                    raise
                # This item's own file name is unusable: record the verdict as an error, run the rest.
                result = result.as_error(ErrorKind.STORAGE, f"storage: {exc}")
                await asyncio.to_thread(self.store.append_verdict, result)
        self.on_result(result)

    def _base(self, item: Item, **fields: Any) -> TaskResult:
        task = item.task
        return TaskResult(
            task_id=task.id,
            model=item.model.name,
            repeat=item.repeat,
            domain=task.domain,
            category=task.category,
            servers=task.required_servers,
            task=task,
            **fields,
        )

    async def _run_item(
        self, item: Item, model_slot: asyncio.Semaphore, run_slot: asyncio.Semaphore
    ) -> TaskResult:
        if (
            self.replay_needs_answer
            and item.model.litellm_model in BUILTIN_AGENTS
            and not (item.task.reference_answer or "").strip()
        ):
            return self._base(
                item, status="excluded", error_kind=ErrorKind.NO_REFERENCE, reason=NO_REFERENCE_ANSWER
            )
        previous = item.previous
        if previous is not None and previous.error_kind in (ErrorKind.JUDGE, ErrorKind.UNJUDGED):
            transcript = self.store.load_transcript(previous)
            if transcript is not None:  # only the judge failed: rejudge the saved transcript
                return await self.score_transcript(item, transcript)
        limits = self.body.limits.for_task(item.task.limits)
        needs = task_servers(item.task, self.plan.enabled_servers)
        dropped = needs.hidden_tools
        enabled = self.plan.surface(item.task)
        try:
            instances = await self.manager.acquire(needs.connect)
        except ServerStartError as exc:
            return self._base(item, status="error", error_kind=ErrorKind.SERVER_START, reason=f"infra: {exc}")
        try:
            surface = ToolSurface(
                enabled,
                instances,
                max_tool_calls=limits.max_tool_calls,
                tool_timeout_s=limits.tool_timeout_s,
                output_cap=limits.tool_output_chars,
                reacquire=self.manager.reacquire,
            )
            offered = [naming.qualify(n, t.name) for n, inst in instances.items() for t in inst.tools]
            drift = [c.name for c in item.task.reference_calls() if c.name in surface.missing]
            if drift:
                return self._base(
                    item,
                    status="excluded",
                    error_kind=ErrorKind.SERVER_DRIFT,
                    reason="server drift: reference tool(s) not offered: "
                    + ", ".join(f"{t}{did_you_mean(t, offered)}" for t in sorted(set(drift))),
                )
            async with model_slot, run_slot:
                surface.started = time.perf_counter()
                transcript = await self.agents[item.model.name].run(item.task, surface, limits)
            used = [*instances.values(), *surface.instances.values()]
            infra_kind = (
                ErrorKind.SERVER_RESOURCE if any(i.exhausted for i in used) else ErrorKind.SERVER_TRANSPORT
            )
            transcript.tools = surface.openai_tools()
            if surface.missing:
                transcript.notes.append(
                    "enabled tools not offered by the servers: "
                    + ", ".join(f"{t}{did_you_mean(t, offered)}" for t in surface.missing)
                )
            if dropped:
                transcript.notes.append(
                    f"tools of servers not enabled were hidden: {', '.join(sorted(dropped))}"
                )
        finally:
            self.manager.release(instances)
        return await self.score_transcript(item, transcript, infra_kind)

    async def score_transcript(
        self, item: Item, transcript: Transcript, infra_kind: ErrorKind = ErrorKind.SERVER_TRANSPORT
    ) -> TaskResult:
        """Judge a finished transcript (also used by ``atlas rescore``): the one path to a score.
        ``infra_kind``: the error kind of its infrastructure errors (server_resource when a
        server's sandbox hit a limit)."""
        measured = {
            "transcript": transcript,
            "tool_calls": len(transcript.calls),
            "tool_errors": sum(1 for c in transcript.calls if c.is_error),
            "turns": transcript.turns,
            "stop_reason": transcript.stop_reason,
            "wall_s": transcript.wall_s,
            "model_s": transcript.model_s,
            "tool_s": transcript.tool_s,
            "prompt_tokens": transcript.prompt_tokens,
            "completion_tokens": transcript.completion_tokens,
            "cost_usd": transcript.cost_usd,
            "cost_known": transcript.cost_known,
            "infra_errors": transcript.infra_errors,
        }
        if transcript.infra_errors:
            return self._base(
                item,
                status="error",
                error_kind=infra_kind,
                reason=f"infra: {transcript.infra_errors[0]}",
                **measured,
            )
        if transcript.stop_reason == "provider_error":
            note = next((n for n in transcript.notes if n.startswith(PROVIDER_NOTE)), PROVIDER_NOTE)
            kind = transcript.provider_error_kind
            return self._base(item, status="error", error_kind=kind, reason=f"{kind}: {note}", **measured)
        if transcript.stop_reason == "provider_timeout":
            # An infrastructure fault, never a score: excluded from scoring and retried on resume.
            note = next(
                (n for n in transcript.notes if n.startswith(PROVIDER_TIMEOUT_NOTE)), PROVIDER_TIMEOUT_NOTE
            )
            return self._base(
                item,
                status="error",
                error_kind=ErrorKind.PROVIDER_TIMEOUT,
                reason=f"provider_timeout: {note}",
                **measured,
            )
        primary, *others = await judge_task(
            self.judges,
            item.task.claims,
            transcript.final_answer,
            self.body.pass_threshold,
            self.body.scoring,
        )
        verdicts = {"claims": primary.claims, "judge": primary.judge, "secondary": others}
        if primary.judge_failures:
            return self._base(
                item,
                status="error",
                error_kind=ErrorKind.JUDGE,
                reason=primary.failure_reason or "judge failed",
                **verdicts,
                **measured,
            )
        return self._base(
            item,
            status="scored",
            coverage=primary.coverage,
            passed=primary.passed,
            passed_at=primary.passed_at,
            # scoring.judgeFailure: zero scored the claims the judge failed on as 0: say so
            zeroed_error_kind=ErrorKind.JUDGE if primary.judge_failures_zeroed else None,
            **verdicts,
            **measured,
        )


def default_data_dir(out: Path) -> Path:
    path = out / "data"
    os.makedirs(path, exist_ok=True)
    return path
