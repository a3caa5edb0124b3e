"""The MCP server catalog: what each server is and how to start it.

One YAML file (``catalog.yaml`` beside this module is the built-in default) lists
servers. A run file may add or override entries. Commands, args, env and cwd may use
placeholders, filled in by the launcher for each server instance:

- ``{install_dir}``: where ``atlas servers install`` put this server's pinned package
- ``{data_dir}``: the data root this instance sees (a private copy when ``isolate_data``)
- ``{scratch_dir}``: an empty private directory for this instance
- ``{port}``: a free loopback port, for ``transport: http`` servers started locally
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, ValidationError, field_validator
from pydantic.alias_generators import to_camel

from atlasrun.errors import InputError, did_you_mean, field_names
from atlasrun.naming import validate_server_name
from atlasrun.tasks.documents import decode, load_yaml
from atlasrun.tasks.files import DOCUMENT_LIMIT, read_user_file

DEFAULT_CATALOG = Path(__file__).with_name("catalog.yaml")
# Built-in catalogs by name: the starter suite's servers (the default) and MCP-Atlas's own 36
# servers under its names and pins (docs/mcp-atlas.md).
BUILTIN_CATALOGS = {
    "starter": DEFAULT_CATALOG,
    "mcp-atlas": Path(__file__).with_name("catalog-mcp-atlas.yaml"),
}
_PLACEHOLDER = re.compile(r"\{(install_dir|data_dir|scratch_dir|port)\}")
# Catalog files use snake_case; the AtlasRun resource uses camelCase. Both are accepted.
_CONFIG = ConfigDict(
    extra="forbid", alias_generator=to_camel, populate_by_name=True, use_attribute_docstrings=True
)


class Source(BaseModel):
    """Build the package from its source at a pinned commit (registries do not serve that version).

    The source is a local archive when ``$ATLAS_SOURCE_ARCHIVES`` names a directory holding
    ``archive`` (checked against ``sha256``), else a clone of ``git`` at ``commit`` (the commit
    id is the check)."""

    model_config = _CONFIG
    git: str
    """The upstream repository URL."""
    commit: str = Field(pattern=r"^[0-9a-f]{40}$")
    """The full commit id the package is built from."""
    archive: str | None = None
    """File name of a source archive of that commit (looked up in $ATLAS_SOURCE_ARCHIVES)."""
    sha256: str | None = Field(default=None, pattern=r"^[0-9a-f]{64}$")
    """The archive's sha256."""
    prebuilt: bool = False
    """npm: the commit holds the built package; pack it as is (no npm ci, no build scripts)."""


class Package(BaseModel):
    """A pinned registry package that provides the server."""

    model_config = _CONFIG
    manager: Literal["npm", "pip"]
    """The package registry: npm or pip."""
    name: str
    """The package name in its registry."""
    version: str
    """The exact pinned version."""
    extra: list[str] = Field(default_factory=list)
    """Extra pip requirements installed in the server's own venv (e.g. "mcp<2")."""
    exclude_newer: str | None = None
    """pip: resolve dependencies as of this time (RFC 3339), as uv's --exclude-newer does."""
    source: Source | None = None
    """Build from source at a pinned commit instead of downloading the version from the registry."""
    links: dict[str, str] = Field(default_factory=dict)
    """Files the package's install scripts download from elsewhere (GitHub), by path in the install
    directory: when missing after the install, linked to this system command instead (e.g.
    desktop-commander's ripgrep: Debian's rg)."""
    unavailable: str | None = None
    """Why this pin cannot be installed from the registries reachable by AtlasRun's tests (shown by
    `atlas servers list`; installing is still attempted)."""


class Egress(BaseModel):
    """Where a server or model endpoint may connect (becomes NetworkPolicy egress rules)."""

    model_config = _CONFIG
    hosts: list[str] = Field(default_factory=list)
    """Host names it connects to (FQDN rules with networkPolicy cilium)."""
    cidrs: list[str] = Field(default_factory=list)
    """IP ranges it connects to (CIDR notation)."""
    ports: list[int] = Field(default_factory=list)
    """TCP ports it connects to (empty: 443)."""


class ResourceLimits(BaseModel):
    """Bounds of one sandboxed server instance (local mode; servers/sandbox.py enforces them).
    Unset fields take the catalog's ``limits``, then the built-in defaults."""

    model_config = _CONFIG
    memory_mb: int | None = Field(default=None, ge=64, le=1_048_576)
    """Resident memory of the whole sandbox (every process in it), in MiB."""
    processes: int | None = Field(default=None, ge=8, le=100_000)
    """Processes and threads alive at once in the sandbox."""
    cpu_seconds: int | None = Field(default=None, ge=1, le=1_000_000)
    """CPU time of the processes alive in the sandbox, in seconds."""
    open_files: int | None = Field(default=None, ge=64, le=1_048_576)
    """Open files (descriptors) per process."""

    def over(self, base: ResourceLimits) -> ResourceLimits:
        """These limits, with ``base``'s where unset."""
        return base.model_copy(update=self.model_dump(exclude_none=True))


@dataclass(frozen=True)
class HostGrant:
    """What the host's own configuration lets a server have in the local sandbox beyond the
    defaults: host paths to read, the host network, host environment variables."""

    read_only_paths: frozenset[str] = frozenset()
    network: bool = False
    secrets: frozenset[str] = frozenset()


# The fields that say which program a server entry runs: an entry that is not the host's keeps
# the grant of the built-in entry it replaces only while these are the same (servers/sandbox.py).
_PROGRAM = {"transport", "command", "args", "env", "cwd", "url", "package", "path_aliases"}


class ServerSpec(BaseModel):
    """One MCP server: local launch recipe plus the facts cluster mode needs."""

    model_config = _CONFIG
    # True only for entries of a built-in catalog (the host's own configuration): a run file's
    # inline servers and catalog files cannot set it, so they cannot lower the sandbox's policy.
    _host: bool = PrivateAttr(default=False)
    # Not the host's: the grant of the built-in entry it replaced while running the same program
    # (Catalog.merged), and where it was declared, (file, field path), for errors.
    _grant: HostGrant = PrivateAttr(default_factory=HostGrant)
    _origin: tuple[str | None, str] | None = PrivateAttr(default=None)
    name: str
    """Server name: lowercase letters, digits and hyphens; tools are prefixed with it."""
    description: str = ""
    """What the server does."""
    bucket: str | None = None
    """The MCP-Atlas group the server belongs to (for reports)."""
    transport: Literal["stdio", "http"] = "stdio"
    """stdio (a subprocess) or http (a streamable-HTTP endpoint)."""
    command: str | None = None
    """The command starting a stdio server (placeholders allowed)."""
    args: list[str] = Field(default_factory=list)
    """Arguments of the command (placeholders allowed)."""
    env: dict[str, str] = Field(default_factory=dict)
    """Environment variables of the server (placeholders allowed)."""
    cwd: str | None = None
    """Working directory of the server (placeholders allowed)."""
    url: str | None = None
    """For transport http: the endpoint, e.g. "http://127.0.0.1:{port}/mcp"."""
    stateful: bool = True
    """Stateful servers get a fresh process per task; stateless ones may be pooled."""
    isolate_data: bool = False
    """Give each instance a private copy of the data root (servers that write to it)."""
    fresh: Literal["respawn", "prestart", "reuse-with-fresh-data"] = "respawn"
    """How a stateful server gets fresh state per task (servers/pool.py): respawn (default): a new process per task, started when needed; prestart: a new process per task, started ahead of need by a warm pool; reuse-with-fresh-data: one process serves one task at a time and gets a fresh copy of its data between tasks (only for servers that keep no state outside their data directory, proven by tests/test_isolation_reuse.py; needs isolate_data)."""
    package: Package | None = None
    """The pinned registry package that provides the server."""
    secrets: list[str] = Field(default_factory=list)
    """Secrets by env var name; values come from the environment (or a Kubernetes Secret)."""
    egress: Egress = Field(default_factory=Egress)
    """Cluster mode: where the server may connect (NetworkPolicy egress rules)."""
    executes_code: bool = False
    """The server runs code of the model's choosing. Believed only from a built-in catalog: any
    other entry (inline in a run file, a catalog file) is treated as executing code."""
    limits: ResourceLimits = Field(default_factory=ResourceLimits)
    """Local mode: bounds of the sandboxed server (over the catalog's limits); an entry that is not
    from a built-in catalog cannot go above the built-in defaults."""
    read_only_paths: list[str] = Field(default_factory=list)
    """Local mode: extra host paths the sandboxed server may read."""
    image: str | None = None
    """Cluster mode: the server image, pinned by @sha256 digest."""
    port: int | None = None
    """Cluster mode: the port of the server's HTTP bridge."""
    check: dict[str, object] | None = None
    """A cheap call used by `atlas servers check`: tool name (unprefixed) and arguments."""
    mount_data: bool = False
    """Sandboxed, the data root is mounted where the model sees it (the run's dataMount, e.g.
    /data), so the server's paths and messages are the model's own; {data_dir} renders to that
    path. Without a sandbox: the host path, with paths mapped in arguments and results."""
    data_scope: Literal["server", "task"] = "server"
    """Whose is the private data copy (isolate_data): server (each server of a task has its own) or
    task (the task's servers share one fresh copy: what one writes, the others read, as MCP-Atlas's
    servers share its /data). A task-scoped server starts with its task (fresh: respawn)."""
    shared_data: list[str] = Field(default_factory=list)
    """Paths under the data root (e.g. a large virtual environment) that are not copied per
    instance but mounted read-only from the source at the same place (needs mount_data)."""
    path_aliases: dict[str, str] = Field(default_factory=dict)
    """Commands the server runs under another name, put on its PATH as links (e.g. python: python3
    where the system has no `python`, as MCP-Atlas's container has)."""
    results: Literal["plain", "mcp-atlas"] = "plain"
    """How a result reaches the model: plain (the server's text; its error text as is) or mcp-atlas
    (as MCP-Atlas's agent-environment and harness pass it on: an error as the HTTP error body
    {"detail":"Failed to call tool '<name>': <error>"}, an empty result as "success")."""
    start_calls: list[dict[str, object]] = Field(default_factory=list)
    """Calls made once after the server starts, before any task's call (tool, arguments), e.g.
    MCP-Atlas's agent-environment sets desktop-commander's allowedDirectories at start-up."""

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        try:
            validate_server_name(value)
        except InputError as exc:  # a ValueError names the file and entry; the value is not echoed
            raise ValueError(
                "a server name is lowercase letters, digits and hyphens (no underscores)"
            ) from exc
        return value

    def model_post_init(self, __context: object) -> None:
        if self.transport == "stdio" and not self.command:
            raise ValueError(f"server {self.name!r}: transport stdio needs 'command'")
        if self.transport == "http" and not self.url:
            raise ValueError(f"server {self.name!r}: transport http needs 'url'")
        if self.fresh == "reuse-with-fresh-data" and not (self.stateful and self.isolate_data):
            raise ValueError(
                f"server {self.name!r}: fresh 'reuse-with-fresh-data' needs stateful and isolate_data"
            )
        if self.data_scope == "task" and not (self.isolate_data and self.fresh == "respawn"):
            raise ValueError(f"server {self.name!r}: data_scope task needs isolate_data and fresh respawn")
        if self.shared_data and not self.mount_data:
            raise ValueError(f"server {self.name!r}: shared_data needs mount_data")
        if self.shared_data and self.fresh == "reuse-with-fresh-data":
            raise ValueError(f"server {self.name!r}: shared_data cannot be reused with fresh data")
        for rel in self.shared_data:
            if rel.startswith("/") or ".." in rel.split("/") or not rel.strip("/"):
                raise ValueError(
                    f"server {self.name!r}: shared_data {rel!r} must be a path under the data root"
                )

    def render(self, values: dict[str, str]) -> ServerSpec:
        """Return a copy with placeholders filled in (unknown ones are left as-is)."""

        def fill(text: str) -> str:
            return _PLACEHOLDER.sub(lambda m: values.get(m.group(1), m.group(0)), text)

        return self.model_copy(
            update={
                "command": fill(self.command) if self.command else None,
                "args": [fill(a) for a in self.args],
                "env": {k: fill(v) for k, v in self.env.items()},
                "cwd": fill(self.cwd) if self.cwd else None,
                "url": fill(self.url) if self.url else None,
            }
        )

    @property
    def host_trusted(self) -> bool:
        """The entry comes from a built-in catalog (the host's own configuration)."""
        return self._host

    @property
    def may_execute_code(self) -> bool:
        """What the sandbox assumes: ``executes_code`` as a built-in catalog declares it; every
        other entry (a run file's inline servers, a catalog file's) executes code."""
        return self.executes_code or not self._host

    @property
    def wants_network(self) -> bool:
        """The entry asks for the host network locally: it declares egress, or is an HTTP server."""
        return self.transport == "http" or bool(self.egress.hosts or self.egress.cidrs or self.egress.ports)

    @property
    def host_grant(self) -> HostGrant:
        """What the host lets this entry have: a built-in entry all it declares; any other entry
        what the built-in entry it replaced had, if it runs the same program, else nothing."""
        if not self._host:
            return self._grant
        return HostGrant(frozenset(self.read_only_paths), self.wants_network, frozenset(self.secrets))

    def runs_same_program(self, other: ServerSpec) -> bool:
        return self.model_dump(include=_PROGRAM) == other.model_dump(include=_PROGRAM)

    @property
    def origin(self) -> tuple[str | None, str]:
        """(file, field path) where an entry that is not the host's was declared, for errors."""
        return self._origin or (None, f"server {self.name!r}")

    def declared_at(self, where: str | None, path: str) -> ServerSpec:
        """A copy that names ``path`` in ``where`` (a file) as where it was declared."""
        copy = self.model_copy()
        copy._origin = (where, path)
        return copy


class Catalog(BaseModel):
    model_config = _CONFIG
    limits: ResourceLimits = Field(default_factory=ResourceLimits)
    """Default bounds of every server of this catalog (each entry's ``limits`` go over them)."""
    servers: list[ServerSpec]

    def by_name(self) -> dict[str, ServerSpec]:
        return {s.name: s for s in self.servers}

    def get(self, name: str) -> ServerSpec:
        found = self.by_name().get(name)
        if found is None:
            raise InputError(f"server {name!r} is not in the catalog", where="servers")
        return found

    def merged(self, extra: list[ServerSpec]) -> Catalog:
        """Entries in ``extra`` replace same-named entries; new ones are appended. One that is not
        the host's keeps the host grant of the entry it replaces if it runs the same program."""
        table = self.by_name()
        for spec in extra:
            replaced = table.get(spec.name)
            if not spec.host_trusted:
                spec = spec.model_copy()
                spec._grant = HostGrant()
                if replaced is not None and replaced.runs_same_program(spec):
                    spec._grant = replaced.host_grant
            table[spec.name] = spec
        return Catalog(servers=list(table.values()))


def catalog_source(name_or_path: str | os.PathLike[str] | None) -> Path:
    """A built-in catalog's file (by name: starter, mcp-atlas) or the given path."""
    if not name_or_path:
        return DEFAULT_CATALOG
    return BUILTIN_CATALOGS.get(str(name_or_path)) or Path(name_or_path)


def is_builtin(name_or_path: str | None) -> bool:
    return str(name_or_path) in BUILTIN_CATALOGS


def load_catalog(path: str | os.PathLike[str] | None = None) -> Catalog:
    """Load a catalog: a built-in one by name ("starter", the default; "mcp-atlas") or a file.

    Each entry's ``limits`` go over the catalog's. Errors name the file, the entry and its line,
    never the file's text (``servers.catalog: /etc/shadow`` must not print the file)."""
    source = catalog_source(path)
    text = decode(read_user_file(source, "server catalog", DOCUMENT_LIMIT), str(source))
    raw = load_yaml(text, str(source))
    if not isinstance(raw, dict) or "servers" not in raw:
        raise InputError("not a server catalog: a catalog is a mapping with 'servers:'", where=str(source))
    try:
        catalog = Catalog.model_validate(raw)
    except ValidationError as exc:
        raise InputError(_problems(exc, text), where=str(source)) from exc
    host = source.resolve() in {p.resolve() for p in BUILTIN_CATALOGS.values()}
    for spec in catalog.servers:
        spec.limits = spec.limits.over(catalog.limits)
        spec._host = host
        spec._origin = None if host else (str(source), f"servers[{spec.name}]")
    return catalog


_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_-]{0,40}")


def _problems(exc: ValidationError, text: str) -> str:
    """Validation errors as 'servers.2.command (line 14): message': keys that are not plain names
    are shown as <key>, and no value of the file is quoted."""
    root = yaml.compose(text, Loader=yaml.SafeLoader)  # parsed once already: cannot fail here
    known = field_names(Catalog)
    found = []
    for err in exc.errors():
        loc = err["loc"]
        shown = ".".join(str(p) if isinstance(p, int) or _KEY.fullmatch(str(p)) else "<key>" for p in loc)
        line = _line(root, loc)
        hint = ""
        if err["type"] == "extra_forbidden" and loc and _KEY.fullmatch(str(loc[-1])):
            hint = did_you_mean(str(loc[-1]), known)
        found.append(f"{shown or '(root)'}{f' (line {line})' if line else ''}: {err['msg']}{hint}")
    return "; ".join(found)


def _line(node: yaml.Node | None, loc: tuple[int | str, ...]) -> int | None:
    """The 1-based line of the YAML node at ``loc`` (or of the nearest enclosing one)."""
    line = node.start_mark.line + 1 if node is not None else None
    for part in loc:
        if isinstance(node, yaml.MappingNode):
            node = next(
                (v for k, v in node.value if isinstance(k, yaml.ScalarNode) and k.value == part), None
            )
        elif isinstance(node, yaml.SequenceNode) and isinstance(part, int) and 0 <= part < len(node.value):
            node = node.value[part]
        else:
            node = None
        if node is None:
            break
        line = node.start_mark.line + 1
    return line
