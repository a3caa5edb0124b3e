"""The operator's settings (``cluster/operator/settings.py``) and its retries (``retry.py``)."""

from __future__ import annotations

import logging
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from atlasrun.cluster.operator import settings as settings_module
from atlasrun.cluster.operator.retry import Backoff
from atlasrun.cluster.operator.settings import OperatorSettings, RetrySettings, settings_table
from atlasrun.errors import InputError

ARCHITECTURE = Path(__file__).resolve().parents[1] / "docs" / "architecture.md"


def test_defaults_and_the_new_prefix() -> None:
    defaults = OperatorSettings.from_env({})
    assert defaults.queue.resync_s == 300 and defaults.queue.workers == 4 and defaults.metrics_port == 8080
    assert not defaults.leader.enabled and defaults.runner_image is None
    read = OperatorSettings.from_env({"ATLASRUN_RESYNC_SECONDS": "900", "ATLASRUN_LEADER_ELECTION": "1"})
    assert read.queue.resync_s == 900 and read.leader.enabled  # above 300 is honoured


def test_old_names_are_read_with_one_warning_each(caplog: pytest.LogCaptureFixture) -> None:
    settings_module._warned.clear()
    env = {"ATLAS_RESYNC_SECONDS": "600", "ATLAS_METRICS_PORT": "0"}
    with caplog.at_level(logging.WARNING, logger="atlasrun.operator"):
        first = OperatorSettings.from_env(env)
        OperatorSettings.from_env(env)
    assert first.queue.resync_s == 600 and first.metrics_port == 0
    warnings = [r.getMessage() for r in caplog.records]
    assert len(warnings) == 2 and all("deprecated" in w for w in warnings)
    assert any("ATLASRUN_RESYNC_SECONDS" in w for w in warnings)
    both = OperatorSettings.from_env({"ATLAS_WORKERS": "2", "ATLASRUN_WORKERS": "8"})
    assert both.queue.workers == 8  # the new name wins


@pytest.mark.parametrize(
    ("env", "where"),
    [
        ({"ATLASRUN_RESYNC_SECONDS": "soon"}, "ATLASRUN_RESYNC_SECONDS"),
        ({"ATLAS_WORKERS": "0"}, "ATLAS_WORKERS"),
        (
            {"ATLASRUN_RETRY_INITIAL_SECONDS": "10", "ATLASRUN_RETRY_MAX_SECONDS": "5"},
            "ATLASRUN_RETRY_MAX_SECONDS",
        ),
    ],
)
def test_a_bad_value_names_the_variable(env: dict[str, str], where: str) -> None:
    with pytest.raises(InputError) as error:
        OperatorSettings.from_env(env)
    assert error.value.where == where


def test_the_settings_table_is_documented() -> None:
    assert settings_table() in ARCHITECTURE.read_text()


def test_backoff_grows_with_jitter_up_to_the_cap_and_resets_on_success() -> None:
    draws = iter([0.0, 0.99, 0.5] + [0.0] * 20)
    backoff = Backoff(RetrySettings(initial_s=1, max_s=300), jitter=lambda: next(draws))
    delays = [backoff.failed("ns/r")[1] for _ in range(12)]
    assert delays[0] == 1 and 1.9 < delays[1] <= 2 and delays[2] == 3.0  # 2**n * [0.5, 1]
    assert all(1 <= d <= 300 for d in delays) and delays[-1] == 150  # capped, then jittered
    assert backoff.failed("ns/other") == (1, 1)  # per run
    backoff.succeeded("ns/r")
    assert backoff.failed("ns/r")[0] == 1


KUBECONFIG = """apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:9", insecure-skip-tls-verify: true}}]
users: [{name: u, user: {token: unused}}]
contexts: [{name: c, context: {cluster: c, user: u}}]
current-context: c
"""


@pytest.mark.parametrize(
    ("variable", "value", "said"),
    [
        ("ATLASRUN_METRICS_PORT", "<taken>", "cannot serve /metrics on port"),
        ("ATLASRUN_WORKERS", "many", "ATLASRUN_WORKERS"),
    ],
)
def test_the_operator_stops_at_once_on_a_setting_a_retry_cannot_mend(
    tmp_path: Path, variable: str, value: str, said: str
) -> None:
    """Not kopf's retry every 60 s with no run reconciled: exit non-zero, the reason in one line."""
    (tmp_path / "kubeconfig").write_text(KUBECONFIG)
    with socket.socket() as taken:
        taken.bind(("0.0.0.0", 0))
        taken.listen()
        value = value.replace("<taken>", str(taken.getsockname()[1]))
        env = {**os.environ, "KUBECONFIG": str(tmp_path / "kubeconfig"), variable: value}
        operator = [sys.executable, "-m", "kopf", "run", "--standalone"]
        operator += ["-m", "atlasrun.cluster.operator.main", "--namespace", "x"]
        done = subprocess.run(operator, env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode != 0
    failed = [line for line in (done.stdout + done.stderr).splitlines() if "failed permanently" in line]
    assert failed and said in failed[0], done.stderr[-2000:]
