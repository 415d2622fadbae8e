"""The chart where the Pod network is the host's (single-node labs, edge clusters; issue #34): hostNetwork,
dnsPolicy, hostAliases, extra env, volumes and mounts, the operator setting for the pods it generates, and
ledger.sqlite.ephemeral rendering no PVC. Rendered by the real helm (built from its Go module)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from tools import localcluster

from barge.api.pool import InferencePool
from barge.k8s import pool as builders
from barge.k8s import workers
from tests.integration.test_chart import (  # noqa: F401 (helm_home: autouse)
    CHART,
    REPO,
    _run,
    container,
    env,
    helm_home,
    kinds,
    notes,
    one,
    refused,
    render,
)

#: What a test on the real local node sets (tools/localnode.py: every Pod host-network, API on 127.0.0.1).
LAB: dict[str, Any] = {
    "image": {"repository": "localhost/barge", "tag": "dev", "pullPolicy": "Never"},
    "hostNetwork": True,
    "dnsPolicy": "ClusterFirstWithHostNet",
    "extraEnv": [
        {"name": "KUBERNETES_SERVICE_HOST", "value": "127.0.0.1"},
        {"name": "KUBERNETES_SERVICE_PORT", "value": "39127"},
    ],
    "hostAliases": [{"ip": "127.0.0.1", "hostnames": ["emulator.barge.local"]}],
    "extraVolumes": [{"name": "data", "hostPath": {"path": "/srv/barge-data", "type": "Directory"}}],
    "extraVolumeMounts": [{"name": "data", "mountPath": "/data"}],
    "operator": {"podHostNetwork": True, "poolEndpointTemplate": "http://127.0.0.1:{port}/v1"},
    "ledger": {"sqlite": {"persistence": {"enabled": True, "storageClass": "barge-hostpath"}}},
}


@pytest.fixture(scope="module")
def helm() -> Path:
    return localcluster.build(argocd=False)["helm"]


@pytest.fixture
def tmp(tmp_path: Path) -> Path:
    return tmp_path


def pod(docs: list[dict[str, Any]]) -> dict[str, Any]:
    return one(docs, "Deployment")["spec"]["template"]["spec"]  # type: ignore[no-any-return]


def test_defaults_stay_on_the_pod_network(helm: Path, tmp: Path) -> None:
    docs = render(helm, tmp)
    spec = pod(docs)
    assert "hostNetwork" not in spec
    assert spec["dnsPolicy"] == "ClusterFirst"
    assert "hostAliases" not in spec
    assert "BARGE_POD_HOST_NETWORK" not in env(docs)
    assert [v["name"] for v in spec["volumes"]] == ["tmp", "ledger"]
    assert [m["name"] for m in container(docs)["volumeMounts"]] == ["tmp", "ledger"]


def test_the_lab_values_put_the_operator_on_the_hosts_network(helm: Path, tmp: Path) -> None:
    docs = render(helm, tmp, LAB)
    spec = pod(docs)
    assert spec["hostNetwork"] is True
    assert spec["dnsPolicy"] == "ClusterFirstWithHostNet"
    assert spec["hostAliases"] == [{"ip": "127.0.0.1", "hostnames": ["emulator.barge.local"]}]
    variables = env(docs)
    assert variables["KUBERNETES_SERVICE_HOST"] == "127.0.0.1"  # the operator logs in there (operator/login.py)
    assert variables["KUBERNETES_SERVICE_PORT"] == "39127"
    assert variables["BARGE_POD_HOST_NETWORK"] == "true"  # the pods it generates too
    assert variables["BARGE_POOL_ENDPOINT_TEMPLATE"] == "http://127.0.0.1:{port}/v1"
    names = [e["name"] for e in container(docs)["env"]]
    assert names.index("KUBERNETES_SERVICE_HOST") > names.index("BARGE_LEDGER_URL")  # extra env last: it wins
    assert container(docs)["image"] == "localhost/barge:dev"
    assert container(docs)["imagePullPolicy"] == "Never"
    volumes = {v["name"]: v for v in spec["volumes"]}
    assert volumes["data"] == {"name": "data", "hostPath": {"path": "/srv/barge-data", "type": "Directory"}}
    assert volumes["ledger"]["persistentVolumeClaim"] == {"claimName": "barge-ledger"}
    assert {"name": "data", "mountPath": "/data"} in container(docs)["volumeMounts"]
    pvc = one(docs, "PersistentVolumeClaim")
    assert pvc["spec"]["storageClassName"] == "barge-hostpath"


def test_ephemeral_sqlite_alone_renders_no_pvc(helm: Path, tmp: Path) -> None:
    docs = render(helm, tmp, {"ledger": {"sqlite": {"ephemeral": True}}})  # persistence.enabled stays true
    assert "PersistentVolumeClaim" not in kinds(docs)
    volumes = {v["name"]: v for v in pod(docs)["volumes"]}
    assert volumes["ledger"] == {"name": "ledger", "emptyDir": {}}


def test_notes_say_an_ephemeral_ledger_is_lost_with_the_pod(helm: Path, tmp: Path) -> None:
    assert "SQLite on an emptyDir: DEVELOPMENT ONLY" in notes(helm, tmp, {"ledger": {"sqlite": {"ephemeral": True}}})


@pytest.mark.parametrize(
    ("values", "says"),
    [
        ({"hostNetwork": "yes"}, "hostNetwork"),
        ({"dnsPolicy": "None"}, "dnsPolicy"),  # None needs a dnsConfig the chart does not take
        ({"hostAliases": [{"ip": "127.0.0.1"}]}, "hostnames"),
        ({"hostAliases": [{"ip": "127.0.0.1", "hostnames": ["a"], "extra": 1}]}, "extra"),
        ({"extraVolumes": [{"name": "data"}]}, "extraVolumes"),  # a name and no source
        ({"extraVolumes": [{"name": "data", "emptyDir": {}, "bogus": {}}]}, "bogus"),
        ({"extraVolumes": [{"name": "Data", "emptyDir": {}}]}, "extraVolumes"),
        ({"extraVolumes": [{"name": "data", "emptyDir": {}, "hostPath": {"path": "/x"}}]}, "extraVolumes"),
        ({"extraVolumes": [{"name": "data", "hostPath": {"path": "relative"}}]}, "path"),
        ({"extraVolumes": [{"name": "data", "emptyDir": {"medium": "Disk"}}]}, "medium"),
        ({"extraVolumeMounts": [{"name": "data"}]}, "mountPath"),
        ({"extraVolumeMounts": [{"name": "data", "mountPath": "relative"}]}, "mountPath"),
        ({"extraEnv": [{"value": "x"}]}, "name"),
        ({"operator": {"podHostNetwork": "true"}}, "podHostNetwork"),
    ],
)
def test_schema_refuses(helm: Path, tmp: Path, values: dict[str, Any], says: str) -> None:
    assert says in refused(helm, tmp, values)


def test_the_lab_render_is_accepted_by_the_api_server(
    helm: Path, tmp: Path, cluster: localcluster.Cluster, namespace: str
) -> None:
    """Server-side dry run of the chart with the lab values (hostNetwork, hostAliases, extra volumes and env)."""
    out = _run(helm, "template", "barge", str(CHART), "--namespace", namespace, values=LAB, tmp=tmp)
    assert out.returncode == 0, out.stderr
    applied = cluster.run_kubectl(
        "apply", "--server-side", "--dry-run=server", "-f", "-", input=out.stdout, check=False
    )
    assert applied.returncode == 0, applied.stderr


def test_generated_host_network_pods_are_accepted_by_the_api_server(
    cluster: localcluster.Cluster, namespace: str
) -> None:
    """The engine and worker Deployments the operator makes with BARGE_POD_HOST_NETWORK, server-side dry run."""
    doc = yaml.safe_load((REPO / "manifests" / "samples" / "inferencepool-engine-rabbitmq-worker.yaml").read_text())
    doc["metadata"].update({"namespace": namespace, "uid": "00000000-0000-0000-0000-000000000001"})
    doc["spec"]["engine"]["port"] = 18_123
    pool = InferencePool.model_validate(doc)
    deployments = [builders.build_deployment(pool, host_network=True)] + [
        workers.build_worker_deployment(pool, w, "localhost/barge:dev", host_network=True) for w in pool.spec.workers
    ]
    applied = cluster.run_kubectl(
        "apply",
        "--dry-run=server",
        "-o",
        "json",
        "-f",
        "-",
        input=json.dumps({"apiVersion": "v1", "kind": "List", "items": deployments}),
        check=False,
    )
    assert applied.returncode == 0, applied.stderr
    for item in json.loads(applied.stdout)["items"]:
        spec = item["spec"]["template"]["spec"]
        assert spec["hostNetwork"] is True
        assert spec["dnsPolicy"] == "ClusterFirstWithHostNet"
