"""The chart's operator.poolNetworkPolicy (review 3, M9): the operator is told its own namespace and the labels its
pods really carry, so each engine pool's NetworkPolicy admits exactly this release's operator; off when asked."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from tools import localcluster

from barge.k8s import pool_network
from tests.integration.test_chart import CHART, _run, container, helm_home, one, render  # noqa: F401 (helm_home: autouse)


@pytest.fixture(scope="module")
def helm() -> Path:
    return localcluster.build(argocd=False)["helm"]


def setting(docs: list[dict[str, Any]]) -> pool_network.PoolNetwork:
    env = {e["name"]: e.get("value") for e in container(docs)["env"]}
    return pool_network.parse(env[pool_network.ENV])


def test_the_operator_peer_is_this_releases_pods(helm: Path, tmp_path: Path) -> None:
    docs = render(helm, tmp_path)
    network = setting(docs)
    assert network.enabled is True
    assert network.operator is not None
    assert network.operator.namespace == "barge-system"
    pod_labels = one(docs, "Deployment")["spec"]["template"]["metadata"]["labels"]
    assert network.operator.pod_labels
    assert dict(network.operator.pod_labels).items() <= pod_labels.items()
    assert network.monitoring_namespaces == ("monitoring",)
    gateway_pods = [
        d["spec"]["template"]["metadata"]["labels"]
        for d in render(helm, tmp_path, {"gateway": {"enabled": True}})
        if d["kind"] == "Deployment" and d["metadata"]["name"].endswith("-gateway")
    ]
    assert gateway_pods
    assert not dict(network.operator.pod_labels).items() <= gateway_pods[0].items()


def test_gateways_and_off(helm: Path, tmp_path: Path) -> None:
    values = {
        "operator": {
            "poolNetworkPolicy": {
                "enabled": False,
                "gateways": [{"namespace": "gateway-system", "podLabels": {"app": "inference-gateway"}}],
                "monitoringNamespaces": [],
            }
        }
    }
    network = setting(render(helm, tmp_path, values))
    assert network.enabled is False
    assert network.gateways == (pool_network.Peer("gateway-system", {"app": "inference-gateway"}),)
    assert network.monitoring_namespaces == ()


def test_a_misspelt_key_is_refused_by_the_schema(helm: Path, tmp_path: Path) -> None:
    path = tmp_path / "v.yaml"
    path.write_text("operator:\n  poolNetworkPolicy:\n    enable: false\n")
    out = _run(helm, "template", "barge", str(CHART), "--values", str(path))
    assert out.returncode != 0
    assert "enable" in out.stderr
