"""A pod's CPU figure (issue 22, part 3): where a container reads its own CPU-seconds, and how the
figure travels in the termination message. The sidecar's answer on ``/healthz`` is tested with a
real sidecar in tests/test_sidecar_control.py; the figure end to end in the operator's metrics in
tests/cluster/test_metrics_operator.py and tests/cluster/test_operator_e2e.py."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from atlasrun.cluster.pod.cpu import (
    CGROUP,
    CPU_SOURCE_ENV,
    container_cpu_seconds,
    cpu_line,
    own_cpu_seconds,
    pod_cpu_seconds,
)
from atlasrun.cluster.pod.termination import compact, compact_batch
from atlasrun.cluster.wire.records import TaskSummary, read_summary
from atlasrun.servers.instance import free_port


def test_a_containers_cgroup_is_read_as_v2_or_v1_and_absent_is_none(tmp_path: Path) -> None:
    v2 = tmp_path / "v2"
    v2.mkdir()
    (v2 / "cpu.stat").write_text("usage_usec 2500000\nuser_usec 2000000\nsystem_usec 500000\n")
    assert container_cpu_seconds(v2) == 2.5
    v1 = tmp_path / "v1"
    (v1 / "cpuacct").mkdir(parents=True)
    (v1 / "cpuacct" / "cpuacct.usage").write_text("1250000000\n")
    assert container_cpu_seconds(v1) == 1.25
    (tmp_path / "none").mkdir()
    assert container_cpu_seconds(tmp_path / "none") is None
    (v2 / "cpu.stat").write_text("garbage\n")  # unreadable v2, no v1: nothing
    assert container_cpu_seconds(v2) is None


def test_outside_a_pod_a_process_counts_its_own_cpu() -> None:
    before = own_cpu_seconds({})
    deadline = time.process_time() + 0.2
    while time.process_time() < deadline:
        pass
    after = own_cpu_seconds({})
    assert after - before >= 0.2
    # With ATLAS_CPU_SOURCE=cgroup the figure is the cgroup's (here, outside a container, whatever
    # cgroup /sys/fs/cgroup shows); where none is readable, the process figure, never a failure.
    account = container_cpu_seconds()
    asked = own_cpu_seconds({CPU_SOURCE_ENV: CGROUP})
    if account is not None:
        assert asked == pytest.approx(account, rel=0.05) and asked >= account
    else:
        assert asked >= after


def test_a_sidecar_that_does_not_answer_is_named_and_left_out() -> None:
    port = free_port()  # nothing listens there
    spent, missing = pod_cpu_seconds({"git": f"http://127.0.0.1:{port}"})
    assert missing == ["git"] and list(spent) == ["runner"] and spent["runner"] > 0  # the runner's own counts
    assert (
        cpu_line({"runner": 2.25, "git": 0.5, "memory": 1.0})
        == "pod CPU: 3.8 s (runner 2.2, memory 1.0, git 0.5)"
    )


def test_the_pods_cpu_rides_on_its_summary_single_batch_and_cut_short() -> None:
    item = TaskSummary(status="scored", task="t", model="m", repeat=0, passed=True, reason="r" * 300)
    single = read_summary(compact(item.model_copy(update={"cpu_s": 4.5}).to_message()), "pod")
    assert single is not None and single.cpu_s == 4.5
    batch = read_summary(compact_batch([item] * 3, 0, 12.25), "pod")
    assert batch is not None and batch.cpu_s == 12.25
    assert batch.items is not None and all(i.cpu_s is None for i in batch.items)  # a pod's, not an item's
    cut = read_summary(compact_batch([item] * 400, 3, 9.0), "pod")
    assert cut is not None and cut.truncated and cut.cpu_s == 9.0
    huge = item.model_copy(update={"cpu_s": 1.5, "tool_errors": {f"s{i}/x": i for i in range(900)}})
    truncated = json.loads(compact(huge.to_message()))
    assert truncated["truncated"] and truncated["cpu_s"] == 1.5
