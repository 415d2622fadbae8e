"""What kube-controller-manager adds to the local control plane, seen through Barge: deleting an InferencePool
garbage-collects its children (owner references followed by the real garbage collector), a pool's Deployment gets
its ReplicaSet and a Pod that stays Pending (no scheduler, no kubelet), and a deleted namespace really goes away.
Its own control plane: the Deployment controller owns Deployment status, which other modules patch by hand."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
import yaml
from tools.localcluster import Cluster

from tests.conftest import REPO
from tests.e2e.conftest import Operator, own_control_plane, wait_for
from tests.e2e.test_pools import children

pytestmark = pytest.mark.cluster
SAMPLE = REPO / "manifests" / "samples" / "inferencepool-engine-interactive.yaml"


@pytest.fixture(scope="module")
def kcm_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with own_control_plane(tmp_path_factory.mktemp("kcm") / "cluster", controllers=True) as cluster:
        yield cluster


@pytest.fixture(scope="module")
def kcm_operator(kcm_cluster: Cluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Operator]:
    op = Operator(kcm_cluster, tmp_path_factory.mktemp("kcm-operator"), "http://127.0.0.1:9/v1")
    op.start()
    yield op
    op.stop()


def names(cluster: Cluster, ns: str, kinds: str) -> set[str]:
    out = cluster.run_kubectl("-n", ns, "get", kinds, "-o", "json").stdout
    return {f"{i['kind']}/{i['metadata']['name']}" for i in json.loads(out)["items"]}


def test_deleting_a_pool_garbage_collects_its_children(kcm_cluster: Cluster, kcm_operator: Operator) -> None:
    cluster, ns = kcm_cluster, "gc"
    cluster.run_kubectl("create", "namespace", ns)
    cluster.run_kubectl("-n", ns, "apply", "-f", str(SAMPLE))
    pool = yaml.safe_load(SAMPLE.read_text())["metadata"]["name"]
    expected = {
        f"Deployment/{pool}-vllm",
        f"Service/{pool}",
        f"PersistentVolumeClaim/{pool}-model-cache",
        f"PodDisruptionBudget/{pool}-vllm",
    }
    wait_for(lambda: expected <= set(children(cluster, ns)), 60, "the pool's children")

    # Deployment -> ReplicaSet -> Pod, by the Deployment and ReplicaSet controllers; the Pod is never scheduled.
    replica_sets = wait_for(lambda: names(cluster, ns, "replicasets"), 60, "a ReplicaSet for the pool's Deployment")
    pods = wait_for(
        lambda: json.loads(cluster.run_kubectl("-n", ns, "get", "pods", "-o", "json").stdout)["items"], 60, "a Pod"
    )
    assert all(p["status"].get("phase") == "Pending" and not p["spec"].get("nodeName") for p in pods)
    assert len(replica_sets) == 1

    # the pool's timer may be mid-reconcile: Kopf re-checks it every 2 s, not every 60 s (operator/main.py)
    cluster.run_kubectl("-n", ns, "delete", "bpool", pool, "--wait=true", "--timeout=60s")
    wait_for(lambda: not children(cluster, ns), 90, "the garbage collector to delete every child")
    wait_for(lambda: not names(cluster, ns, "replicasets,pods"), 90, "the ReplicaSet and Pod to follow")


def test_a_deleted_namespace_goes_away(kcm_cluster: Cluster, kcm_operator: Operator) -> None:
    cluster, ns = kcm_cluster, "short-lived"
    cluster.run_kubectl("create", "namespace", ns)
    cluster.run_kubectl("-n", ns, "create", "configmap", "inputs", "--from-literal=a=b")
    cluster.run_kubectl("-n", ns, "apply", "-f", str(SAMPLE))
    wait_for(lambda: children(cluster, ns), 60, "the pool's children")
    cluster.run_kubectl("delete", "namespace", ns, "--wait=false")
    wait_for(
        lambda: cluster.run_kubectl("get", "namespace", ns, check=False).returncode != 0,
        120,
        "the namespace controller to empty and remove the namespace",
    )
