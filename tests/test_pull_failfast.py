"""``atlas pull`` fails in seconds, in one line, with the README's exit codes (issue 23, part 1).

Before: an unresolvable bucket host was retried 10 times over 101 s, a refused endpoint for 126 s,
then four chained tracebacks and exit 1 ("pass rate too low"); ``atlas pull atlasrun/NAME``
without a kubeconfig ended in a ``ConfigException`` traceback. Now: exit 3 (the store or cluster
could not be reached) or exit 2 (bad input: no such bucket, no usable kubeconfig), one line each.
A real S3 server (moto, on loopback) and real closed ports; the host name ends in ``.invalid``
(RFC 6761), so it cannot resolve and nothing leaves the machine.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from atlasrun.cluster.wire.store import S3Results
from atlasrun.errors import EXIT_BAD_INPUT, EXIT_ITEM_ERRORS, EXIT_OK
from atlasrun.scoring.result import TaskResult
from test_run_task import AWS_SECRET, BUCKET, S3Server, s3  # noqa: F401  (s3: the fixture)

# Many CLI subprocesses and deliberate timeouts: `make test` runs them, `make check` does not.
pytestmark = pytest.mark.heavy

CREDENTIALS = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": AWS_SECRET, "AWS_REGION": "us-east-1"}
FAST_S = 15.0  # was 101-126 s; the CLI itself takes 1-3 s to start on a loaded 2-core machine


def pull(
    *args: str, env: dict[str, str] | None = None, prefix: tuple[str, ...] = ()
) -> tuple[subprocess.CompletedProcess[str], float]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "KUBE"))}
    started = time.monotonic()
    done = subprocess.run(
        [*prefix, sys.executable, "-m", "atlasrun.cli", "pull", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={**clean, **CREDENTIALS, **(env or {})},
        check=False,
    )
    return done, time.monotonic() - started


def closed_port() -> int:
    """A loopback port nothing listens on (bound, then released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def one_line_error(done: subprocess.CompletedProcess[str]) -> str:
    assert "Traceback" not in done.stderr, done.stderr
    (line,) = done.stderr.strip().splitlines()
    assert line.startswith("error: atlas pull SOURCE: "), line
    return line


def test_an_unresolvable_store_fails_in_seconds_with_exit_3(tmp_path: Path) -> None:
    # In a network namespace of its own (no resolver reachable): the DNS failure stays on this machine.
    if os.geteuid() != 0 or not shutil.which("unshare"):
        pytest.skip("needs root and unshare(1) for a private network namespace")
    done, took = pull(
        "s3://no-such-bucket/runs/x/",
        str(tmp_path / "out"),
        "--s3-endpoint-url",
        "http://s3.atlas.invalid",
        prefix=("unshare", "--net"),
    )
    assert done.returncode == EXIT_ITEM_ERRORS and took < FAST_S, (took, done.stderr)
    line = one_line_error(done)
    assert "cannot reach object storage at http://s3.atlas.invalid" in line
    assert "after 2 attempts" in line and "check --s3-endpoint-url / AWS_ENDPOINT_URL" in line
    assert "name resolution" in line or "Name or service not known" in line, line
    assert not (tmp_path / "out").exists()


def test_a_refused_store_fails_in_seconds_with_exit_3(tmp_path: Path) -> None:
    endpoint = f"http://127.0.0.1:{closed_port()}"
    done, took = pull(f"s3://{BUCKET}/runs/x/", str(tmp_path / "out"), "--s3-endpoint-url", endpoint)
    assert done.returncode == EXIT_ITEM_ERRORS and took < FAST_S, (took, done.stderr)
    line = one_line_error(done)
    assert f"cannot reach object storage at {endpoint}" in line and "Connection refused" in line


@pytest.mark.servers
def test_a_real_store_no_such_bucket_is_bad_input_and_a_good_pull_works(
    tmp_path: Path,
    s3: S3Server,  # noqa: F811  (the fixture imported above)
) -> None:
    done, took = pull("s3://no-such-bucket/runs/x/", str(tmp_path / "none"), "--s3-endpoint-url", s3.endpoint)
    assert done.returncode == EXIT_BAD_INPUT and took < FAST_S, done.stderr
    assert one_line_error(done).endswith(f"no bucket 'no-such-bucket' at {s3.endpoint}")
    store = S3Results(f"s3://{BUCKET}/bench/pulled/", s3.endpoint, env=CREDENTIALS)
    for i in range(3):
        store.put_result(TaskResult(task_id=f"t{i}", model="m", status="scored", passed=i > 0, coverage=1.0))
    done, _ = pull(f"s3://{BUCKET}/bench/pulled/", str(tmp_path / "out"), "--s3-endpoint-url", s3.endpoint)
    assert done.returncode == EXIT_OK, done.stderr
    assert "pulled 3 task result(s)" in done.stdout and (tmp_path / "out" / "summary.json").is_file()


def test_pull_by_name_without_a_kubeconfig_is_bad_input(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    done, took = pull("atlasrun/sweep", str(tmp_path / "out"), env={"HOME": str(home)})
    assert done.returncode == EXIT_BAD_INPUT and took < FAST_S, done.stderr
    line = one_line_error(done)
    assert "the kubeconfig ~/.kube/config cannot be used" in line
    assert "give --kubeconfig FILE, or pull the run's results URI directly" in line
    done, _ = pull("atlasrun/sweep", str(tmp_path / "out"), "--kubeconfig", str(tmp_path / "missing"))
    assert done.returncode == EXIT_BAD_INPUT and f"the kubeconfig {tmp_path / 'missing'}" in one_line_error(
        done
    )


def test_pull_by_name_from_an_unreachable_cluster_is_exit_3(tmp_path: Path) -> None:
    server = f"http://127.0.0.1:{closed_port()}"
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "c", "cluster": {"server": server}}],
                "users": [{"name": "u", "user": {"token": "t"}}],
                "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u", "namespace": "evals"}}],
                "current-context": "x",
            }
        )
    )
    done, took = pull("atlasrun/sweep", str(tmp_path / "out"), "--kubeconfig", str(kubeconfig))
    assert done.returncode == EXIT_ITEM_ERRORS and took < FAST_S, (took, done.stderr)
    line = one_line_error(done)
    assert f"cannot reach the cluster at {server}" in line and "Connection refused" in line
