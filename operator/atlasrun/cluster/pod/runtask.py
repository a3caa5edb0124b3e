"""``atlas run-task``: run ONE work item (model, task, repeat) inside a Kubernetes pod.

In an Indexed Job the item comes from ``ATLAS_WORK_UNIT`` (a ``contract.WorkUnit``: the model,
the chunk's items or a reference to its plan in object storage, the pinned task document and the
results URI) and ``JOB_COMPLETION_INDEX`` (which item of the chunk). The plan and the task
document are read from object storage (or the mounted ConfigMap) and must have their pinned
sha256, else the pod exits 2 (bad input); storage failing exits 4 (retried).
Without a work unit, the inputs come one by one from the environment (see ``ENV``; each also
has a flag for debugging): the run file, the tasks file, the task id, the model name, the
repeat, the results URI (``s3://bucket/prefix/<run>/``) and the termination message path; S3
access uses the standard ``AWS_*`` variables and ``AWS_ENDPOINT_URL``. Optional knobs:
``ATLAS_S3_ATTEMPTS`` and ``ATLAS_S3_BACKOFF_SECONDS`` (storage retries).

The item runs through the local ``Engine`` unchanged, with the catalog rewritten so that
every server the task uses is its sidecar: streamable HTTP at
``http://127.0.0.1:<ServerSpec.port>/mcp``, no local process. The runner first waits (up
to ``serverStartTimeoutSeconds``) for the sidecar ports to accept connections. The full
per-task JSON goes to ``<results URI>/tasks/<model>/<task>.r<N>.json``; a summary of at
most 4 KiB goes to the termination message and to stdout. A record already stored as
``scored`` or ``excluded`` is kept and not run again (a retried pod never redoes
finished work); a stored judge failure is rejudged from its transcript, as locally.
``ATLAS_WORK_DIR`` (``--work-dir``) keeps the local results directory for debugging.

With ``spec.cluster.itemsPerPod`` > 1 a completion index names several items: they run one after
the other, each exactly as a single item runs (stored, skipped when already stored), each on fresh
server state (``fresh.py``: the sidecars' servers that keep state in their process are started
again, the data volume is reset; if that fails, the item and the rest fail as infrastructure
errors, exit 3, and the retried pod runs them), and the
termination message lists their summaries (``{"status": "batch", "exit_code", "items"}``); the
pod exits 2 only if every item's input was bad, 4 if storage failed for one, 3 if another
failed (the retried pod skips the stored ones), else 0.

Exit codes (the Job's podFailurePolicy keys on them):

- ``0``: a verdict was reached and stored: ``scored``, ``excluded``, or ``error`` because
  the judge failed (re-running the agent would not fix the judge; ``atlas rescore``
  does). Kubernetes does not retry.
- ``2``: bad input (run file, tasks file, unknown task id or model, repeat out of range,
  bad results URI, missing S3 credentials, a needed server without a port). Permanent:
  the podFailurePolicy fails the Job at once.
- ``3``: the item ended in an ``error`` that says nothing about the model: infrastructure
  (a sidecar down or broken), the model provider (after its own retries), or a harness
  failure. The error record IS stored (so the reason is visible) and the pod fails so the
  Job retries it per ``backoffLimit``; a later success overwrites the record.
- ``4``: object storage failed after retries: the result could not be stored (or the
  stored state could not be read). Nothing claims success; the Job retries the pod.
- anything else (``1``: an unexpected crash, with its traceback) is retried the same way.

The termination summary has ``task, model, repeat, status, reason, coverage, passed,
tool_calls, wall_s, tokens, cost_usd, tool_errors, provider_retries, rate_limited, infra, result,
exit_code`` (``records.TaskSummary``; the usage fields come from ``usage.summary_fields`` and
the operator folds them into ``status.models[m].usage``); ``infra`` is true for
exit codes 3 and 4 (the outcome is not the model's), ``result`` is the stored object's
URI (null when nothing was stored). Secrets (the run's key env vars, AWS credentials)
are masked in everything printed or written.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sys
import tempfile
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

from atlasrun.cluster.pod.cpu import cpu_line, pod_cpu_seconds
from atlasrun.cluster.pod.inputs import (
    DEFAULT_TERMINATION_PATH,
    ENV,
    Inputs,
    fetch_plan,
    fetch_tasks,
    read_inputs,
)
from atlasrun.cluster.pod.items import AWS_SECRETS, ItemDone, PodRun, failure
from atlasrun.cluster.pod.servers import SIDECAR_HOST, port_overrides
from atlasrun.cluster.pod.termination import batch_exit, compact, compact_batch, write_termination
from atlasrun.cluster.wire.contract import (
    ENV_CONTROL_PORTS,
    EXIT_INPUT,
    EXIT_STORE,
)
from atlasrun.cluster.wire.store import (
    StoreError,
)
from atlasrun.errors import InputError
from atlasrun.redact import Redactor
from atlasrun.scoring.result import ErrorKind


def _stderr(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


@contextlib.contextmanager
def local_dir(keep: Path | None) -> Iterator[str]:
    """The engine's local results directory: ``keep`` if given, else a temporary one."""
    if keep is None:
        with tempfile.TemporaryDirectory(prefix="atlas-task-") as tmp:
            yield tmp
        return
    keep.mkdir(parents=True, exist_ok=True)
    yield str(keep)


def run_task(inputs: Inputs, warn: Callable[[str], None] = _stderr) -> int:
    """Run the pod's item(s), store each, write the termination message (one item's summary, or a
    ``batch`` summary listing each item's); returns the exit code (see the module docstring)."""
    aws = Redactor(AWS_SECRETS)
    fetched = tempfile.TemporaryDirectory(prefix="atlas-tasks-")
    try:
        inputs = fetch_plan(inputs)
        inputs = fetch_tasks(inputs, Path(fetched.name))
        items = list(inputs.batch) or [(inputs.task_id, inputs.repeat)]
        with local_dir(inputs.work_dir) as tmp:
            pod = PodRun(inputs, items, Path(tmp), warn)
            done = asyncio.run(pod.run())
            mask = pod.mask
    except InputError as exc:
        done, mask = _all_failed(inputs, ErrorKind.INPUT, f"input: {exc}", EXIT_INPUT), aws
        warn(mask(f"error: {exc}"))
    except StoreError as exc:
        done, mask = _all_failed(inputs, ErrorKind.STORAGE, f"storage: {exc}", EXIT_STORE), aws
        warn(mask(f"error: storage: {exc}"))
    finally:
        fetched.cleanup()
    cpu_s = _pod_cpu(warn)
    if inputs.batch:
        for item in done:  # one line per item in the pod's log
            print(mask(compact(item.summary.to_message())), flush=True)
        code = batch_exit([item.code for item in done])
        text = mask(compact_batch([item.summary for item in done], code, cpu_s, inputs.termination_limit))
    else:
        (item,) = done
        summary = item.summary.model_copy(update={"cpu_s": cpu_s})
        message = json.loads(mask(json.dumps(summary.to_message())))
        code, text = item.code, compact(message, inputs.termination_limit)
    print(text, flush=True)
    write_termination(inputs.termination_path, text, warn)
    return code


def _pod_cpu(warn: Callable[[str], None]) -> float | None:
    """The pod's CPU-seconds so far (runner and sidecars, cluster/pod/cpu.py); None if not known."""
    try:
        ports = port_overrides(ENV_CONTROL_PORTS)
    except InputError as exc:
        warn(f"warning: CPU not reported: {exc}")
        return None
    spent, missing = pod_cpu_seconds({n: f"http://{SIDECAR_HOST}:{p}" for n, p in ports.items()})
    print(cpu_line(spent), flush=True)
    if missing:
        warn(f"warning: CPU of sidecar(s) {', '.join(missing)} not known: the pod's figure leaves them out")
    return round(sum(spent.values()), 3)


def _all_failed(inputs: Inputs, kind: ErrorKind, reason: str, code: int) -> list[ItemDone]:
    """Every item of the pod, when what they share (plan, task document, spec, store) failed."""
    items = list(inputs.batch) or [(inputs.task_id, inputs.repeat)]
    return [ItemDone(failure(t, inputs.model, r, kind, reason, code), code) for t, r in items]


def main(overrides: Mapping[str, Any] | None = None, env: Mapping[str, str] | None = None) -> int:
    env = os.environ if env is None else env
    try:
        inputs = read_inputs(env, overrides)
    except InputError as exc:
        _stderr(f"error: {exc}")
        path = Path(
            (overrides or {}).get("termination_path")
            or env.get(ENV["termination_path"])
            or DEFAULT_TERMINATION_PATH
        )
        text = compact(failure("", "", None, ErrorKind.INPUT, f"input: {exc}", EXIT_INPUT).to_message())
        write_termination(path, text, _stderr)
        return EXIT_INPUT
    return run_task(inputs)
