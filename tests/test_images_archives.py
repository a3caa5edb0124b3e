"""images/archives.py without buildah: the run file made ready from images.lock (``pin``) and the
content key that decides whether an image is rebuilt. The build and push themselves run in
tests/cluster/test_node_quickstart.py (docs/cluster.md's ``make images PUSH=...``)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from images import archives, context

from atlasrun.cluster.operator.images import unpinned_images
from atlasrun.runspec.run import RunSpecBody
from atlasrun.servers.catalog import load_catalog

REPO = Path(__file__).resolve().parents[1]
QUICKSTART = REPO / "examples" / "quickstart"


def lock(targets: list[str]) -> dict[str, str]:
    return {t: f"registry.test:5001/atlasrun/{t}@sha256:{'ab' * 32}" for t in targets}


def test_pin_gives_every_enabled_server_its_catalog_entry_image_and_own_port() -> None:
    (run,) = yaml.safe_load_all(archives.pin((QUICKSTART / "run.yaml").read_text(), lock(context.targets())))
    body = RunSpecBody.model_validate(run["spec"])
    inline = {s.name: s for s in body.servers.inline}
    assert list(inline) == body.servers.enabled
    assert len({s.port for s in inline.values()}) == len(inline)
    catalog = load_catalog()
    for name, server in inline.items():
        assert server.image == lock([f"mcp-{name}"])[f"mcp-{name}"]
        assert server.command == catalog.get(name).command and server.env == catalog.get(name).env
    assert not unpinned_images(
        body, catalog.merged(body.servers.inline), runner_image=lock(["runner"])["runner"]
    )
    # Every server a starter task uses is there: no task would be excluded for a missing server.
    tasks = yaml.safe_load((REPO / "examples" / "starter" / "tasks.yaml").read_text())["tasks"]
    used = {tool.split("_", 1)[0] for t in tasks for tool in t["enabled_tools"]}
    assert used <= set(inline), used - set(inline)


def test_pin_replaces_placeholders_and_names_what_the_lock_lacks() -> None:
    docs = list(
        yaml.safe_load_all(archives.pin((QUICKSTART / "workspace.yaml").read_text(), lock(["runner"])))
    )
    job = next(d for d in docs if d["kind"] == "Job")
    assert job["spec"]["template"]["spec"]["containers"][0]["image"] == lock(["runner"])["runner"]
    with pytest.raises(context.ContextError, match="has no mcp-memory: run make images PUSH=REGISTRY"):
        archives.pin((QUICKSTART / "run.yaml").read_text(), lock(["runner", "mcp-filesystem"]))


def test_content_key_follows_the_bases_and_the_target() -> None:
    key = archives.content_key("mcp-time", "python-a", "node-a")
    assert key == archives.content_key("mcp-time", "python-a", "node-a")
    assert key != archives.content_key("mcp-time", "python-b", "node-a")
    assert key != archives.content_key("mcp-time", "python-a", "node-b")
    assert key != archives.content_key("mcp-git", "python-a", "node-a")
    # The runner does not depend on the Node.js base; a local base is known by its tag.
    assert archives.content_key("runner", "p", "n1") == archives.content_key("runner", "p", "n2")
    assert archives.bases({"BASE_ROOTFS": "/x.tar", "NODE_IMAGE": "localhost/b/node:abc"}) == (
        archives.rootfs_recipe_key(),
        "abc",
    )


def test_pre_pull_values_list_the_starter_servers_images_of_the_lock(tmp_path: Path) -> None:
    path = tmp_path / "images.lock"
    digest = "sha256:" + "ab" * 32
    for name in ("runner", "operator", "mcp-git", "mcp-calculator", "mcp-atlas-filesystem"):
        context.lock_set(name, f"ghcr.io/atlasrun/{name}@{digest}", {"published": "test"}, path=path)
    assert archives.pre_pull_values(path) == {
        "prePull": {
            "enabled": True,
            "images": [f"ghcr.io/atlasrun/mcp-calculator@{digest}", f"ghcr.io/atlasrun/mcp-git@{digest}"],
        }
    }
