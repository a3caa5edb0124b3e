"""Ctrl-C during a run ends the process within a bound (runner/interrupt.py), in a real process
receiving a real SIGINT. The whole CLI path (servers up, provider hung) is test_cli_rundir.py's
Ctrl-C test; here the clean-up itself is made to hang, which the real servers never do on cue."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

from atlasrun.errors import EXIT_INTERRUPTED

SCRIPT = textwrap.dedent(
    """
    import asyncio, sys
    from atlasrun.cli import _dispatch
    from atlasrun.runner.interrupt import run_interruptibly

    async def stubborn_cleanup():
        await asyncio.sleep(3600)  # cancelled by Ctrl-C ...

    async def main(hang):
        try:
            print("ready", flush=True)
            await stubborn_cleanup()
        finally:
            while hang:  # ... and a clean-up that never ends
                try:
                    await asyncio.sleep(3600)
                except asyncio.CancelledError:
                    pass

    class Args:  # what argparse hands the CLI's _dispatch
        @staticmethod
        def func(args):
            run_interruptibly(main(sys.argv[1] == "hang"), grace_s=float(sys.argv[2]))
            return 0

    sys.exit(_dispatch(Args()))
    """
)


def _interrupt(*args: str, signals: int = 1) -> tuple[int, str, float]:
    proc = subprocess.Popen(
        [sys.executable, "-c", SCRIPT, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout is not None and proc.stdout.readline() == "ready\n"
        started = time.monotonic()
        for _ in range(signals):
            os.kill(proc.pid, signal.SIGINT)
            time.sleep(0.2)
        _, err = proc.communicate(timeout=120)
        return proc.returncode, err, time.monotonic() - started
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_a_clean_ctrl_c_prints_one_line() -> None:
    code, err, _ = _interrupt("clean", "60")
    assert code == EXIT_INTERRUPTED
    assert err.splitlines() == [
        "interrupted: finished results are kept; run the same command again to resume"
    ]


def test_a_hung_clean_up_ends_after_the_grace_period_naming_what_it_waited_on() -> None:
    code, err, elapsed = _interrupt("hang", "1")
    assert code == EXIT_INTERRUPTED, err
    assert err.startswith("interrupted: stopping took over 1 s; exiting anyway"), err
    assert "still waiting on:" in err and "(main)" in err, err  # the stuck task and where it is
    assert elapsed < 60  # a bound, not a timing measurement: without it the process never ends


def test_a_second_ctrl_c_ends_a_hung_clean_up_at_once() -> None:
    code, err, _ = _interrupt("hang", "3600", signals=2)
    assert code == EXIT_INTERRUPTED, err
    assert err.startswith("interrupted: a second Ctrl-C; exiting anyway"), err
