"""The tests' node stand-in: it plays kubelet for the operator's pods, because no kubelet runs here.

For every pod of the watched namespace it binds the pod to its Node, then runs it *as
processes on this machine*: each native sidecar (an initContainer with ``restartPolicy:
Always`` and ``ATLAS_SERVER_NAME``/``ATLAS_SERVER_PORT``) becomes the server image's entrypoint
(images/mcp-server/sidecar.py) running the catalog's local server on free loopback ports (pods
share this loopback, so ports are remapped and passed to the runner in ``ATLAS_SERVER_PORTS``
and ``ATLAS_CONTROL_PORTS``); the runner container becomes
``atlas run-task`` with the container's env (Secret references resolved through the API,
the spec ConfigMap written to a directory standing in for its volume). Finally it reports
the pod's status through the API the way a kubelet does: phase, and the runner's
termination state with exit code and termination message. Images are not pulled: a
sidecar's image stands for the catalog server named in its env.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx

from atlasrun.servers.catalog import load_catalog
from atlasrun.servers.install import install_dir
from atlasrun.servers.instance import free_port

NODE = "standin-node"
SIDECAR = Path(__file__).resolve().parents[2] / "images" / "mcp-server" / "sidecar.py"
RUNNER = "runner"


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


class NodeStandIn:
    def __init__(
        self,
        api: httpx.Client,
        namespace: str,
        data_dir: Path | None,
        *,
        max_pods: int = 4,
        extra_env: dict[str, str] | None = None,
        instant: Callable[[dict[str, Any]], tuple[int, str]] | None = None,
        poll_s: float = 0.2,
        pending_only: bool = False,
    ) -> None:
        """``instant``: don't run pods, finish each at once with (exit code, termination message)
        from this function (for benchmarking the operator without MCP servers or models)."""
        self.api = api
        self.namespace = namespace
        self.data_dir = data_dir
        self.extra_env = extra_env or {}
        self.instant = instant
        self.poll_s = poll_s
        # Only Pending pods are listed (a benchmark's thousands of finished pods would make every
        # poll slow); deletions of bound, running pods are then not confirmed (instant pods never run).
        self.params = {"fieldSelector": "status.phase=Pending"} if pending_only else {}
        self.catalog = load_catalog()
        self._pool = ThreadPoolExecutor(max_pods, thread_name_prefix="standin-pod")
        self._seen: set[str] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="standin-node", daemon=True)
        self.ran: list[str] = []
        self._running: dict[str, subprocess.Popen[str]] = {}  # pod uid -> runner process
        self.errors: list[str] = []

    def __enter__(self) -> NodeStandIn:
        node = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": NODE}}
        response = self.api.post("/api/v1/nodes", json=node)
        if response.status_code not in (201, 409):
            response.raise_for_status()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self._pool.shutdown(wait=True, cancel_futures=False)

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                pods = (
                    self.api.get(f"/api/v1/namespaces/{self.namespace}/pods", params=self.params)
                    .json()
                    .get("items", [])
                )
                for pod in pods:
                    uid = pod["metadata"]["uid"]
                    if pod["metadata"].get("deletionTimestamp"):
                        self._finish_deletion(pod)
                        continue
                    if uid in self._seen or pod.get("status", {}).get("phase") not in (None, "Pending"):
                        continue
                    self._seen.add(uid)
                    self._bind(pod)
                    self._pool.submit(self._run_safely, pod)
            except httpx.HTTPError as exc:
                self.errors.append(f"list pods: {exc!r}")
            self._stop.wait(self.poll_s)

    def _finish_deletion(self, pod: dict[str, Any]) -> None:
        """A kubelet confirms a bound pod's graceful deletion once its containers stopped."""
        meta = pod["metadata"]
        if meta.get("finalizers"):
            return  # the owner (e.g. the Job controller) removes its finalizer first
        if pod["spec"].get("nodeName") == NODE:
            process = self._running.get(meta["uid"])
            if process is not None and process.poll() is None:
                process.terminate()
            self.api.delete(
                f"/api/v1/namespaces/{self.namespace}/pods/{meta['name']}", params={"gracePeriodSeconds": "0"}
            )

    def _bind(self, pod: dict[str, Any]) -> None:
        if pod["spec"].get("nodeName"):
            return
        name = pod["metadata"]["name"]
        binding = {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": {"name": name},
            "target": {"apiVersion": "v1", "kind": "Node", "name": NODE},
        }
        self.api.post(
            f"/api/v1/namespaces/{self.namespace}/pods/{name}/binding", json=binding
        ).raise_for_status()

    def _run_safely(self, pod: dict[str, Any]) -> None:
        try:
            self._run(pod)
        except Exception as exc:
            self.errors.append(f"{pod['metadata']['name']}: {exc!r}")

    # --- running a pod -------------------------------------------------------------------------

    def _secret_value(self, name: str, key: str, optional: bool) -> str | None:
        response = self.api.get(f"/api/v1/namespaces/{self.namespace}/secrets/{name}")
        if response.status_code == 404 and optional:
            return None
        response.raise_for_status()
        data = response.json().get("data") or {}
        if key not in data:
            if optional:
                return None
            raise KeyError(f"secret {name} has no key {key}")
        return base64.b64decode(data[key]).decode()

    def _env(
        self, container: dict[str, Any], mounts: dict[str, Path], pod: dict[str, Any] | None = None
    ) -> dict[str, str]:
        env: dict[str, str] = {}
        for item in container.get("env") or []:
            field = ((item.get("valueFrom") or {}).get("fieldRef") or {}).get("fieldPath", "")
            if field.startswith(("metadata.annotations[", "metadata.labels[")) and pod is not None:
                kind, _, key = field[len("metadata.") : -1].partition("[")  # e.g. the completion index
                env[item["name"]] = str((pod["metadata"].get(kind) or {}).get(key.strip("'\""), ""))
                continue
            if "value" in item:
                value = str(item["value"])
                for mount_path, local in mounts.items():
                    value = value.replace(mount_path, str(local))
                env[item["name"]] = value
            elif "secretKeyRef" in (item.get("valueFrom") or {}):
                ref = item["valueFrom"]["secretKeyRef"]
                secret = self._secret_value(ref["name"], ref["key"], bool(ref.get("optional")))
                if secret is not None:
                    env[item["name"]] = secret
        return env

    def _configmap_dir(self, pod: dict[str, Any], container: dict[str, Any], root: Path) -> dict[str, Path]:
        """ConfigMap volumes of the container, written out; returns {mountPath: local dir}."""
        volumes = {v["name"]: v for v in pod["spec"].get("volumes") or []}
        mounts: dict[str, Path] = {}
        for mount in container.get("volumeMounts") or []:
            volume = volumes.get(mount["name"]) or {}
            if "configMap" in volume:
                cm = self.api.get(
                    f"/api/v1/namespaces/{self.namespace}/configmaps/{volume['configMap']['name']}"
                )
                cm.raise_for_status()
                local = root / mount["name"]
                local.mkdir(parents=True, exist_ok=True)
                for key, value in (cm.json().get("data") or {}).items():
                    (local / key).write_text(value)
                mounts[mount["mountPath"]] = local
        return mounts

    def _start_sidecar(
        self, container: dict[str, Any], data: Path, scratch: Path
    ) -> tuple[str, int, int, subprocess.Popen[bytes]]:
        """The server image's own entrypoint (images/mcp-server/sidecar.py, control endpoint
        included) with the catalog's local server as its spec, on free loopback ports."""
        env = {e["name"]: str(e.get("value", "")) for e in container.get("env") or []}
        server = self.catalog.get(env["ATLAS_SERVER_NAME"])
        tmp = scratch / f"{server.name}-tmp"  # the container's own /tmp (its control /stop empties it)
        tmp.mkdir()
        values = {"data_dir": str(data), "scratch_dir": str(tmp), "port": "0"}
        if server.package is not None:
            values["install_dir"] = str(install_dir(server))
        local = server.render(values)
        spec = scratch / f"{server.name}.json"
        spec.write_text(json.dumps({"command": str(local.command), "args": local.args, "cwd": local.cwd}))
        port, control = free_port(), free_port()
        log = open(scratch / f"{server.name}.log", "wb")  # noqa: SIM115 - closed with the process
        proc = subprocess.Popen(
            [sys.executable, str(SIDECAR)],
            stdout=log,
            stderr=log,
            stdin=subprocess.DEVNULL,
            env={
                "PATH": os.environ["PATH"],
                "HOME": str(tmp),
                "TMPDIR": str(tmp),
                **local.env,
                "ATLAS_SIDECAR_SPEC": str(spec),
                "ATLAS_SERVER_HOST": "127.0.0.1",
                "ATLAS_SERVER_PORT": str(port),
                "ATLAS_CONTROL_PORT": str(control),
                "ATLAS_DATA_DIR": str(data),
            },
        )
        return server.name, port, control, proc

    def _finish(self, name: str, started: str, code: int, message: str, sidecars: list[str]) -> None:
        terminated = {
            "exitCode": code,
            "reason": "Completed" if code == 0 else "Error",
            "message": message,
            "startedAt": started,
            "finishedAt": _now(),
        }
        self._patch_status(
            name,
            {
                "phase": "Succeeded" if code == 0 else "Failed",
                "containerStatuses": [self._state(RUNNER, {"terminated": terminated})],
                "initContainerStatuses": [
                    self._state(
                        s,
                        {
                            "terminated": {
                                "exitCode": 0,
                                "reason": "Completed",
                                "startedAt": started,
                                "finishedAt": _now(),
                            }
                        },
                    )
                    for s in sidecars
                ],
            },
        )
        self.ran.append(name)

    def _run(self, pod: dict[str, Any]) -> None:
        name = pod["metadata"]["name"]
        if self.instant is not None:
            code, message = self.instant(pod)
            self._finish(name, _now(), code, message, [])
            return
        assert self.data_dir is not None
        root = Path(tempfile.mkdtemp(prefix=f"standin-{name[:20]}-"))
        data = root / "data"
        shutil.copytree(self.data_dir, data, symlinks=True)  # the pod's own data volume
        sidecars, procs = [], []
        started = _now()
        try:
            ports: dict[str, int] = {}
            controls: dict[str, int] = {}
            for container in pod["spec"].get("initContainers") or []:
                if container.get("restartPolicy") == "Always":
                    server, port, controls[server], proc = self._start_sidecar(container, data, root)
                    ports[server] = port
                    procs.append(proc)
                    sidecars.append(container["name"])
            runner = next(c for c in pod["spec"]["containers"] if c["name"] == RUNNER)
            mounts = self._configmap_dir(pod, runner, root)
            termination = root / "termination-log"
            env = {
                "PATH": os.environ["PATH"],
                **self._env(runner, mounts, pod),
                **self.extra_env,
                "ATLAS_SERVER_PORTS": json.dumps(ports),
                "ATLAS_CONTROL_PORTS": json.dumps(controls),
                # containers here are processes of this host: their CPU is their process trees',
                # never the host's root cgroup
                "ATLAS_CPU_SOURCE": "process",
                "ATLAS_DATA_ROOT": str(data),
                "ATLAS_DATA_SOURCE": str(self.data_dir),  # what the pod's data was seeded from
                "ATLAS_TERMINATION_PATH": str(termination),
                "HOME": str(root),
            }
            self._patch_status(
                name,
                {
                    "phase": "Running",
                    "startTime": started,
                    "hostIP": "127.0.0.1",
                    "containerStatuses": [self._state(RUNNER, {"running": {"startedAt": started}})],
                },
            )
            if runner["command"][:2] != ["atlas", "run-task"]:
                raise ValueError(f"runner command {runner['command']} is not atlas run-task")
            command = [sys.executable, "-m", "atlasrun.cli", *runner["command"][1:], *runner.get("args", [])]
            runner_proc = subprocess.Popen(
                command, env=env, cwd=root, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
            )
            self._running[pod["metadata"]["uid"]] = runner_proc
            try:
                _, stderr = runner_proc.communicate(timeout=600)
            finally:
                self._running.pop(pod["metadata"]["uid"], None)
            done = subprocess.CompletedProcess(command, runner_proc.returncode, "", stderr)
            message = termination.read_text() if termination.exists() else (done.stderr or "")[-4096:]
            self._finish(name, started, done.returncode, message, sidecars)
        finally:
            for proc in procs:
                proc.terminate()
            for proc in procs:
                try:
                    proc.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
            shutil.rmtree(root, ignore_errors=True)

    @staticmethod
    def _state(name: str, state: dict[str, Any]) -> dict[str, Any]:
        return {
            "name": name,
            "state": state,
            "ready": "running" in state,
            "restartCount": 0,
            "image": "standin",
            "imageID": "",
            "started": "running" in state,
        }

    def _patch_status(self, pod: str, status: dict[str, Any]) -> None:
        response = self.api.patch(
            f"/api/v1/namespaces/{self.namespace}/pods/{pod}/status",
            json={"status": status},
            headers={"Content-Type": "application/strategic-merge-patch+json"},
        )
        response.raise_for_status()
