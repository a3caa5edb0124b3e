"""Confine a local MCP server process: a bubblewrap sandbox that dies with the runner.

``Sandbox.confine`` turns a server's launch (command, args, env, cwd) into the launch
that actually runs, whatever the launch strategy (fresh, pooled, stdio, HTTP):

- With ``bwrap`` (Debian ``bubblewrap``): new PID, IPC, UTS, cgroup and user namespaces
  and a new network namespace with only loopback, unless the host network is granted (below)
  to an entry that declares ``egress`` or is a ``transport: http`` server the runner reaches on
  host loopback (those keep the host network; their processes are confined otherwise). The root
  is an empty tmpfs with read-only binds of ``/usr`` (+ the ``/bin``, ``/lib`` links), a few
  ``/etc`` files, the server's install directory, a venv's base interpreter and the granted
  ``read_only_paths``; a private ``/tmp``; its scratch directory read-write; its
  data directory read-write only when it is the server's own private copy
  (``isolate_data``), read-only otherwise. Paths keep their host names, so the catalog's
  placeholders need no translation, except the data root of a ``mount_data`` entry, which is
  mounted where the model sees it (e.g. ``/data``), with its ``shared_data`` read-only over
  it. ``--die-with-parent`` kills the whole sandbox when the runner dies. A server that
  executes no code (``executes_code: false``) runs as PID 1 of its namespace (``--as-pid-1``: one bwrap process per server; where this bwrap lacks the
  option, under its reaper); a code-executing one keeps bwrap's reaper as PID 1 (then
  ``/proc/1/environ`` is that helper's, empty). Whether a server executes code is the host's
  word: a built-in catalog's ``executes_code``; every other entry (a run file's ``inline``
  servers, a catalog file) counts as executing code (``ServerSpec.may_execute_code``).
- Resources are bounded (servers/limits.py): rlimits set by ``prlimit`` inside the sandbox, a
  pids cgroup where one can be made, and a guard the instance runs (``Launch.guard``).
- The environment holds only the entry's declared ``env`` and granted ``secrets`` plus PATH,
  HOME (the scratch directory) and LANG. bwrap itself is started with that environment and
  nothing else.
- What widens the sandbox is granted by the host, never by a run file (``ServerSpec.host_grant``):
  a built-in catalog entry has the host paths, network and secrets it declares; an entry that is
  not from a built-in catalog (``servers.inline``, a catalog file) has those of the built-in
  entry it replaces, only while it runs the same program (command, args, env, package, ...),
  else none. Beyond its grant, ``Sandbox.check`` refuses before any work (``HostPolicyError``,
  naming the field and file) an entry that asks for ``read_only_paths``, for ``secrets`` the
  host has not listed in ``$ATLAS_SERVER_SECRETS`` (names, comma-separated: the host's opt-in
  for a run file's own servers), or that is a ``transport: http`` server started here (it
  cannot be reached without the host network); one that declares ``egress`` runs with only its
  own loopback, with a warning (``egress`` is also its cluster-mode NetworkPolicy).
- Without a working bwrap no local server process starts unless the host allows it
  (``--unsafe-host-exec``, never a run file); allowed, each runs unconfined (no limits either)
  with a warning. Unconfined processes still get ``PR_SET_PDEATHSIG`` (util-linux ``setpriv``)
  so they die with the runner.
"""

from __future__ import annotations

import functools
import itertools
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

from atlasrun.errors import AtlasError, InputError
from atlasrun.flags import UNSAFE_FLAG
from atlasrun.servers.catalog import ServerSpec
from atlasrun.servers.limits import Guard, bounds_for, new_pids_cgroup, prlimit_command

# Host /etc entries a server may need (dynamic linker, users, time zone, TLS roots); nothing else
# of /etc is visible. resolv.conf and hosts only matter with network access.
_ETC = ("ld.so.cache", "ld.so.conf", "ld.so.conf.d", "localtime", "timezone", "passwd", "group",
        "nsswitch.conf", "alternatives", "ssl", "ca-certificates", "mime.types")  # fmt: skip
_ETC_NET = ("resolv.conf", "hosts", "gai.conf")
_ROOT_LINKS = ("bin", "sbin", "lib", "lib32", "lib64", "libx32")
_SYSTEM_PATH = "/usr/local/bin:/usr/bin:/bin"
# Variables the MCP SDK's stdio client adds to every server's environment: inherited when
# unconfined, unset in the sandbox unless set there.
_SDK_DEFAULTS = ("HOME", "LOGNAME", "PATH", "SHELL", "TERM", "USER")


# The host's opt-in for host environment variables a run file's own servers may receive.
SECRETS_VAR = "ATLAS_SERVER_SECRETS"


class SandboxError(AtlasError):
    """A server cannot be confined here and may not run unconfined."""


class HostPolicyError(SandboxError, InputError):
    """An entry that is not from a built-in catalog asks for more than the host grants it."""


def host_allowed_secrets() -> frozenset[str]:
    """The names ``$ATLAS_SERVER_SECRETS`` lists (comma or space separated)."""
    return frozenset(os.environ.get(SECRETS_VAR, "").replace(",", " ").split())


def permitted_secrets(spec: ServerSpec) -> list[str]:
    """The entry's declared secrets that the host grants it (all of a built-in entry's)."""
    allowed = spec.host_grant.secrets | host_allowed_secrets()
    return [name for name in spec.secrets if name in allowed]


def overreach(spec: ServerSpec) -> list[str]:
    """What a local entry that is not the host's asks for beyond its grant, by field."""
    if spec.host_trusted or not spec.command:
        return []
    grant, problems = spec.host_grant, []
    paths = [p for p in spec.read_only_paths if p not in grant.read_only_paths]
    if paths:
        problems.append(
            f"read_only_paths: {', '.join(map(repr, paths))} would be readable in the sandbox; only a "
            "built-in catalog entry can give a server host paths: put what it needs in the data root"
        )
    secrets = [name for name in spec.secrets if name not in permitted_secrets(spec)]
    if secrets:
        names = ",".join(secrets)
        problems.append(
            f"secrets: {names} would pass this host's environment variable(s) into the server; a run "
            f"file or catalog file cannot do that: the host allows it with {SECRETS_VAR}={names}"
        )
    if spec.transport == "http" and not grant.network:
        problems.append(
            "transport: an http server started here is reached over the host network, which only a "
            "built-in catalog entry gets: use stdio, or start the server yourself and give only its url"
        )
    return problems


@dataclass(frozen=True)
class Launch:
    """How to start one server process."""

    command: str
    args: list[str]
    env: dict[str, str]
    cwd: str | None = None
    guard: Guard | None = None  # sandboxed: watches its resource limits once started


@dataclass(frozen=True)
class Dirs:
    """The host directories one server instance uses."""

    scratch: Path
    data: Path
    data_writable: bool
    install: Path | None = None
    mount: Path | None = None  # where ``data`` appears inside the sandbox (default: its host path)
    shared: tuple[tuple[Path, Path], ...] = ()  # (host path, path inside): read-only binds over data


@functools.cache
def _probe(bwrap: str) -> str | None:
    """None if ``bwrap`` can create the namespaces we use here, else why not."""
    argv = [bwrap, "--unshare-all", "--die-with-parent", *system_binds(), "--", "/usr/bin/true"]
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=30, env={}, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"{bwrap} does not run: {exc}"
    if proc.returncode != 0:
        return f"{bwrap} cannot create a sandbox here: {proc.stderr.strip()[-300:]}"
    return None


@functools.cache
def _offers(bwrap: str, option: str) -> bool:
    """Whether this ``bwrap`` knows ``option`` (its ``--help`` lists it; older ones lack some)."""
    try:
        proc = subprocess.run(
            [bwrap, "--help"], capture_output=True, text=True, timeout=30, env={}, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return f"{option} " in proc.stdout + proc.stderr


def system_binds() -> list[str]:
    argv = ["--ro-bind", "/usr", "/usr"]
    for name in _ROOT_LINKS:
        path = Path("/") / name
        if path.is_symlink():
            argv += ["--symlink", os.readlink(path), str(path)]
        elif path.is_dir():
            argv += ["--ro-bind", str(path), str(path)]
    return [*argv, "--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp"]


def _venv_base(install: Path) -> Path | None:
    """The base interpreter's prefix a venv at ``install`` runs on (its bin/python links there)."""
    try:
        lines = (install / "pyvenv.cfg").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        key, _, value = line.partition("=")
        if key.strip() == "home" and value.strip():
            return Path(value.strip()).resolve().parent
    return None


def find_bwrap() -> str | None:
    """``$ATLAS_BWRAP`` if set (empty: do not sandbox), else ``bwrap`` on PATH."""
    chosen = os.environ.get("ATLAS_BWRAP")
    if chosen is not None:
        return chosen or None
    return shutil.which("bwrap")


_warned: set[str] = set()
_launches = itertools.count()
_JOIN = 'echo $$ > "$1" || exit 125; shift; exec "$@"'


@dataclass(frozen=True)
class Sandbox:
    """The confinement policy for every local server of one run."""

    allow_host_exec: bool = False  # the host's decision (``--unsafe-host-exec``), never a run file's
    bwrap: str | None = field(default_factory=find_bwrap)

    @functools.cached_property
    def unavailable(self) -> str | None:
        """None when bwrap works here, else the reason it does not."""
        if self.bwrap is None:
            return "bwrap not found on PATH (Debian package bubblewrap) or ATLAS_BWRAP is empty"
        return _probe(self.bwrap)

    def refuses(self, spec: ServerSpec) -> bool:
        """True if ``spec`` starts a local process that would have to run unconfined but may not."""
        return bool(spec.command and self.unavailable and not self.allow_host_exec)

    def check(self, *specs: ServerSpec) -> None:
        """Raise ``HostPolicyError`` for the first server in ``specs`` that asks for more than the
        host grants it, else ``SandboxError`` naming every one that may not run here."""
        for spec in specs:
            if problems := overreach(spec):
                where, path = spec.origin
                raise HostPolicyError("; ".join(f"{path}.{p}" for p in problems), where=where)
        refused = ", ".join(repr(s.name) for s in specs if self.refuses(s))
        if refused:
            raise SandboxError(
                f"server(s) {refused} cannot be sandboxed here: {self.unavailable}. Install bubblewrap "
                f"(make system-deps) or pass {UNSAFE_FLAG} to run them unconfined on this host"
            )

    def confine(self, spec: ServerSpec, launch: Launch, dirs: Dirs) -> Launch:
        """The launch that runs ``launch`` (whose env is the entry's declared env) confined."""
        self.check(spec)
        if self.unavailable:  # only with --unsafe-host-exec (check above)
            if spec.name not in _warned:
                _warned.add(spec.name)
                print(
                    f"warning: server {spec.name!r} runs unconfined on this host: {self.unavailable}",
                    file=sys.stderr,
                )
            inherited = {name: os.environ[name] for name in _SDK_DEFAULTS if name in os.environ}
            env = inherited | launch.env | _secrets(spec)
            links = alias_dir(spec, dirs)
            if links is not None:
                env["PATH"] = f"{links}:{env.get('PATH', _SYSTEM_PATH)}"
            return _with_pdeathsig(Launch(launch.command, launch.args, env, launch.cwd))
        assert self.bwrap is not None
        if spec.wants_network and not spec.host_grant.network and f"{spec.name}/net" not in _warned:
            _warned.add(f"{spec.name}/net")
            where, path = spec.origin
            print(
                f"warning: server {spec.name!r} runs without network: {path}"
                f"{f' ({where})' if where else ''} declares egress, but only a built-in catalog "
                "entry gets the host network in the sandbox",
                file=sys.stderr,
            )
        env = sandbox_env(spec, launch.env, dirs)
        as_pid_1 = not spec.may_execute_code and _offers(self.bwrap, "--as-pid-1")
        argv = [*bwrap_args(spec, dirs, env, as_pid_1), "--chdir", launch.cwd or str(dirs.scratch), "--"]
        bounds = bounds_for(spec)
        prlimit = prlimit_command()
        server = [launch.command, *launch.args]
        inner = [prlimit, *bounds.prlimit(), "--", *server] if prlimit else server
        group = new_pids_cgroup(f"{dirs.scratch.name}.{next(_launches)}", bounds.processes)
        guard = Guard(bounds, marker=str(dirs.scratch), cgroup=group)
        # bwrap starts in the scratch dir on the host: the server's cwd may exist only inside.
        if group is None:
            return Launch(self.bwrap, [*argv, *inner], env, str(dirs.scratch), guard)
        # Joins the cgroup before bwrap forks anything, so everything in the sandbox is in it.
        join = ["-c", _JOIN, "atlas-sandbox", str(group / "cgroup.procs"), self.bwrap]
        return Launch("/bin/sh", [*join, *argv, *inner], env, str(dirs.scratch), guard)


def alias_dir(spec: ServerSpec, dirs: Dirs) -> Path | None:
    """A directory of links for the entry's ``path_aliases`` (in its scratch dir), or None."""
    if not spec.path_aliases:
        return None
    links = dirs.scratch / ".bin"
    links.mkdir(exist_ok=True)
    for name, target in spec.path_aliases.items():
        found = shutil.which(target, path=_SYSTEM_PATH)
        if found and not (links / name).is_symlink():
            (links / name).symlink_to(found)
    return links


def sandbox_env(spec: ServerSpec, declared: dict[str, str], dirs: Dirs) -> dict[str, str]:
    """Only what the entry declares (env, secrets) plus PATH, HOME and LANG."""
    path = _SYSTEM_PATH
    bins = [alias_dir(spec, dirs)]
    if dirs.install is not None:
        bins += [dirs.install / "bin", dirs.install / "node_modules" / ".bin"]
    path = ":".join([*(str(b) for b in bins if b is not None and b.is_dir()), path])
    base = {"PATH": path, "HOME": str(dirs.scratch), "LANG": "C.UTF-8"}
    return base | declared | _secrets(spec)


def _secrets(spec: ServerSpec) -> dict[str, str]:
    """Declared secrets the host grants pass through by name, nothing else does."""
    return {name: os.environ[name] for name in permitted_secrets(spec) if name in os.environ}


def bwrap_args(spec: ServerSpec, dirs: Dirs, env: dict[str, str], as_pid_1: bool = False) -> list[str]:
    """bwrap's options for ``spec`` (everything before ``--chdir``); ``as_pid_1``: the server
    is its PID namespace's PID 1 (only for a server that executes no code)."""
    network = spec.wants_network and spec.host_grant.network
    argv = ["--unshare-all", *(["--share-net"] if network else []), "--die-with-parent", "--new-session"]
    if as_pid_1 and not spec.may_execute_code:
        # The server is its PID namespace's PID 1 (one bwrap process per server, not two); a
        # server that runs a task's code keeps bwrap's reaper as PID 1, which reaps whatever
        # that code starts and leaves behind. Either way the namespace dies with its PID 1.
        argv.append("--as-pid-1")
    argv += system_binds()
    for name in _ETC + (_ETC_NET if network else ()):
        argv += ["--ro-bind-try", f"/etc/{name}", f"/etc/{name}"]
    read_only = [Path(p) for p in spec.read_only_paths if p in spec.host_grant.read_only_paths]
    if dirs.install is not None:
        read_only += [dirs.install, *filter(None, [_venv_base(dirs.install)])]
    for path in read_only:
        argv += ["--ro-bind-try", str(path), str(path)]
    argv += ["--bind", str(dirs.scratch), str(dirs.scratch)]
    argv += ["--bind" if dirs.data_writable else "--ro-bind", str(dirs.data), str(dirs.mount or dirs.data)]
    for host, inside in dirs.shared:
        argv += ["--ro-bind", str(host), str(inside)]
    for name in _SDK_DEFAULTS:
        if name not in env:
            argv += ["--unsetenv", name]
    return argv


def _with_pdeathsig(launch: Launch) -> Launch:
    """Unconfined: still SIGKILL the server when the runner (its parent) dies."""
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        return launch
    args = ["--pdeathsig", "KILL", "--", launch.command, *launch.args]
    return Launch(setpriv, args, launch.env, launch.cwd)
