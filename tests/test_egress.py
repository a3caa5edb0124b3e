"""Egress derivation (atlasrun.cluster.egress): every destination of a run from its spec."""

from __future__ import annotations

import json

import pytest

from atlasrun.cluster.egress import annotation, declared_egress
from atlasrun.errors import InputError
from atlasrun.runspec.run import RunSpecBody
from atlasrun.servers.catalog import Egress, ServerSpec


def test_api_bases_servers_and_object_store_are_derived() -> None:
    body = RunSpecBody.model_validate(
        {
            "tasks": {"path": "t.jsonl"},
            "models": [
                {"name": "a", "apiBase": "http://llm.internal:8000/v1"},
                {"name": "b", "egress": {"cidrs": ["10.1.0.0/16"], "ports": [8443]}},
            ],
            "judges": [{"name": "j", "model": "gpt", "apiBase": "https://api.example.com"}],
        }
    )
    server = ServerSpec(name="web", command="x", egress=Egress(hosts=["search.example.org"]))
    got = {
        where: (e.hosts, e.cidrs, e.ports)
        for where, e in declared_egress(body, [server], "http://minio:9000")
    }
    assert got == {
        "spec.models[0].apiBase": (["llm.internal"], [], [8000]),
        "spec.models[b].egress": ([], ["10.1.0.0/16"], [8443]),
        "spec.judges[0].apiBase": (["api.example.com"], [], [443]),
        "server 'web' egress": (["search.example.org"], [], []),
        "S3 endpoint": (["minio"], [], [9000]),
    }
    with pytest.raises(InputError, match="apiBase"):
        declared_egress(
            body.model_copy(update={"models": [body.models[0].model_copy(update={"api_base": "http://"})]}),
            [],
        )


def test_annotation_lists_targets_and_ports() -> None:
    text = annotation({"10.0.0.0/8": {443, 80}}, {"api.example.com": {443}})
    assert json.loads(text) == {"10.0.0.0/8": [80, 443], "api.example.com": [443]}
