"""An engine pool's NetworkPolicy on a real API server (review 3, M9): the operator creates it beside the vLLM
Deployment, owned by the pool, selecting the engine pods and admitting only the operator's pods (by namespace and
labels), the pool's own workers, the gateway and the monitoring namespace on the engine port; the garbage
collector (kube-controller-manager, real) removes it with its pool, and the operator deletes the ones its pools
own when the setting turns the policy off.

What this does not show, and cannot here: that traffic is refused. The API server only stores NetworkPolicies;
a network plugin enforces them, and this control plane has no CNI, no kubelet and no Pods running. Enforcement
is the plugin's; the engines' API key (test_engine_key, the emulator's 401) is the control that needs none."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
import yaml
from tools.localcluster import Cluster

from tests.conftest import REPO, kubectl_json
from tests.e2e.conftest import Operator, own_control_plane, wait_for

pytestmark = pytest.mark.cluster
SAMPLE = REPO / "manifests" / "samples" / "inferencepool-engine-interactive.yaml"
OPERATOR_LABELS = {"app.kubernetes.io/name": "barge", "app.kubernetes.io/instance": "barge"}
SETTING = {
    "enabled": True,
    "operator": {"namespace": "barge-system", "podLabels": OPERATOR_LABELS},
    "gateways": [{"namespace": "gateway-system", "podLabels": {"app": "inference-gateway"}}],
    "monitoringNamespaces": ["monitoring"],
}


@pytest.fixture(scope="module")
def gc_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with own_control_plane(tmp_path_factory.mktemp("netpol") / "cluster", controllers=True) as cluster:
        yield cluster


@pytest.fixture(scope="module")
def fenced_operator(gc_cluster: Cluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Operator]:
    env = {"BARGE_POOL_NETWORK_POLICY": json.dumps(SETTING)}
    op = Operator(gc_cluster, tmp_path_factory.mktemp("netpol-operator"), "http://127.0.0.1:9/v1", env=env)
    op.start()
    yield op
    op.stop()


def policy(cluster: Cluster, ns: str, name: str) -> dict[str, Any] | None:
    found = cluster.run_kubectl("-n", ns, "get", "networkpolicy", name, "-o", "json", check=False)
    return json.loads(found.stdout) if found.returncode == 0 else None


def apply_pool(cluster: Cluster, ns: str, name: str, *, gateway: bool) -> dict[str, Any]:
    doc = yaml.safe_load(SAMPLE.read_text())
    doc["metadata"]["name"] = name
    if gateway:
        doc["spec"]["gateway"] = {"inferencePool": True}
    cluster.run_kubectl("-n", ns, "apply", "-f", "-", input=yaml.safe_dump(doc))
    return kubectl_json(cluster, "-n", ns, "get", "bpool", name)


def test_the_engine_policy_is_owned_by_the_pool_and_admits_only_its_peers(
    gc_cluster: Cluster, fenced_operator: Operator
) -> None:
    cluster, ns = gc_cluster, "team-a"
    cluster.run_kubectl("create", "namespace", ns)
    pool = apply_pool(cluster, ns, "fenced", gateway=True)
    found = wait_for(lambda: policy(cluster, ns, "fenced-engine"), 60, "the pool's NetworkPolicy")

    [owner] = found["metadata"]["ownerReferences"]
    assert (owner["kind"], owner["name"], owner["uid"]) == ("InferencePool", "fenced", pool["metadata"]["uid"])
    assert owner["controller"] is True
    deployment = wait_for(
        lambda: kubectl_json(cluster, "-n", ns, "get", "deployment", "fenced-vllm"), 30, "the vLLM Deployment"
    )
    pod_labels = deployment["spec"]["template"]["metadata"]["labels"]  # type: ignore[index]
    selected = found["spec"]["podSelector"]["matchLabels"]
    assert selected.items() <= pod_labels.items()  # it selects the engine pods
    assert found["spec"]["policyTypes"] == ["Ingress"]
    [rule] = found["spec"]["ingress"]
    assert rule["ports"] == [{"port": 8000, "protocol": "TCP"}]
    assert rule["from"] == [
        {"podSelector": {"matchLabels": {"app.kubernetes.io/name": "barge-worker", "barge.dev/pool": "fenced"}}},
        {
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "barge-system"}},
            "podSelector": {"matchLabels": OPERATOR_LABELS},
        },
        {
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "gateway-system"}},
            "podSelector": {"matchLabels": {"app": "inference-gateway"}},
        },
        {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}},
    ]

    # deleting the pool: the real garbage collector follows the owner reference
    cluster.run_kubectl("-n", ns, "delete", "bpool", "fenced", "--wait=true", "--timeout=60s")
    wait_for(lambda: policy(cluster, ns, "fenced-engine") is None, 90, "the garbage collector to delete the policy")


def test_turning_the_policy_off_deletes_what_pools_own(gc_cluster: Cluster, fenced_operator: Operator) -> None:
    cluster, ns = gc_cluster, "team-b"
    cluster.run_kubectl("create", "namespace", ns)
    apply_pool(cluster, ns, "open", gateway=False)
    found = wait_for(lambda: policy(cluster, ns, "open-engine"), 60, "the pool's NetworkPolicy")
    gateway = {"kubernetes.io/metadata.name": "gateway-system"}
    peers = found["spec"]["ingress"][0]["from"]
    assert all(p.get("namespaceSelector", {}).get("matchLabels") != gateway for p in peers)  # no inferencePool

    fenced_operator.stop()
    fenced_operator.extra_env["BARGE_POOL_NETWORK_POLICY"] = json.dumps({**SETTING, "enabled": False})
    fenced_operator.start()  # Kopf resumes the pool: the reconcile no longer wants the policy, and it is the pool's
    wait_for(lambda: policy(cluster, ns, "open-engine") is None, 60, "the operator to delete the pool's policy")
    assert kubectl_json(cluster, "-n", ns, "get", "deployment", "open-vllm")["metadata"]["name"] == "open-vllm"
