"""InferencePool on the real local control plane: children accepted by the server (with the KEDA, Prometheus
Operator and Gateway API CRDs installed), readiness from the Deployment, the HPA guard, owner references, and a
job that runs on an engine pool (served by `barge emulator --vllm`). No kubelet runs here: tests patch the
Deployment's status themselves, and no garbage collector either: owner references are checked instead."""

from __future__ import annotations

import json
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
import yaml
from tools.localcluster import Cluster

from barge.emulator.server import EmulatorThread
from tests.conftest import REPO, kubectl_json, state
from tests.e2e.conftest import SECRET, Operator, credential_secret, wait_for

pytestmark = pytest.mark.cluster
SAMPLES = REPO / "manifests" / "samples"


def pool_status(cluster: Cluster, ns: str, name: str) -> dict[str, Any]:
    return kubectl_json(cluster, "-n", ns, "get", "bpool", name).get("status") or {}  # type: ignore[return-value]


def condition(cluster: Cluster, ns: str, name: str, type_: str) -> dict[str, Any]:
    return next((c for c in pool_status(cluster, ns, name).get("conditions", []) if c["type"] == type_), {})


def children(cluster: Cluster, ns: str) -> dict[str, dict[str, Any]]:
    kinds = (
        "deployments,services,persistentvolumeclaims,poddisruptionbudgets,scaledobjects.keda.sh,"
        "servicemonitors.monitoring.coreos.com,inferencepools.inference.networking.k8s.io"
    )
    items = kubectl_json(cluster, "-n", ns, "get", kinds)["items"]  # type: ignore[index]
    return {f"{i['kind']}/{i['metadata']['name']}": i for i in items if i["metadata"]["name"] != "kubernetes"}


def make_ready(cluster: Cluster, ns: str, deployment: str, replicas: int) -> None:
    body = {
        "status": {
            "replicas": replicas,
            "readyReplicas": replicas,
            "availableReplicas": replicas,
            "updatedReplicas": replicas,
            "observedGeneration": 1,
            "conditions": [
                {
                    "type": "Available",
                    "status": "True",
                    "reason": "MinimumReplicasAvailable",
                    "message": "ok",
                    "lastUpdateTime": "2026-11-30T00:00:00Z",
                    "lastTransitionTime": "2026-11-30T00:00:00Z",
                }
            ],
        }
    }
    cluster.run_kubectl(
        "-n", ns, "patch", "deployment", deployment, "--subresource=status", "--type=merge", "-p", json.dumps(body)
    )


@pytest.mark.parametrize(
    ("sample", "expected"),
    [
        (
            "inferencepool-engine-interactive.yaml",
            {
                "Deployment/llama-interactive-vllm",
                "Service/llama-interactive",
                "PersistentVolumeClaim/llama-interactive-model-cache",
                "PodDisruptionBudget/llama-interactive-vllm",
            },
        ),
        (
            "inferencepool-engine-throughput.yaml",
            {
                "Deployment/llama-throughput-vllm",
                "Service/llama-throughput",
                "PersistentVolumeClaim/llama-throughput-model-cache",
            },
        ),
        (
            "inferencepool-engine-scale-to-zero.yaml",
            {
                "Deployment/qwen-nightly-vllm",
                "Service/qwen-nightly",
                "ScaledObject/qwen-nightly-vllm",
                "PodDisruptionBudget/qwen-nightly-vllm",
            },
        ),
    ],
)
def test_sample_pools_get_their_children(
    cluster: Cluster, namespace: str, operator: Operator, sample: str, expected: set[str]
) -> None:
    cluster.run_kubectl("-n", namespace, "apply", "-f", str(SAMPLES / sample))
    name = yaml.safe_load((SAMPLES / sample).read_text())["metadata"]["name"]
    uid = kubectl_json(cluster, "-n", namespace, "get", "bpool", name)["metadata"]["uid"]  # type: ignore[index]
    found = wait_for(lambda: (c := children(cluster, namespace)) and expected <= set(c) and c, 60, "children")
    assert set(found) == expected
    for child in found.values():
        owner = child["metadata"]["ownerReferences"][0]
        assert (owner["kind"], owner["name"], owner["uid"], owner["controller"]) == ("InferencePool", name, uid, True)
        assert child["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "barge"
    deployment = found[next(k for k in found if k.startswith("Deployment/"))]
    wait_for(
        lambda: condition(cluster, namespace, name, "Ready").get("reason") in ("Starting", "ScaledToZero"),
        30,
        "Ready=False while no replica is ready",
    )
    make_ready(cluster, namespace, deployment["metadata"]["name"], 2)
    wait_for(lambda: condition(cluster, namespace, name, "Ready").get("status") == "True", 30, "Ready")
    st = pool_status(cluster, namespace, name)
    assert st["readyReplicas"] == 2
    assert st["endpoint"].endswith("/v1")
    row = cluster.run_kubectl("-n", namespace, "get", "bpool", name, "--no-headers").stdout.split()
    assert row[2] == "2"


def test_foreign_hpa_blocks_the_scaled_object(cluster: Cluster, namespace: str, operator: Operator) -> None:
    cluster.run_kubectl(
        "-n",
        namespace,
        "apply",
        "-f",
        "-",
        input=yaml.safe_dump(
            {
                "apiVersion": "autoscaling/v2",
                "kind": "HorizontalPodAutoscaler",
                "metadata": {"name": "hand-made"},
                "spec": {
                    "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "qwen-nightly-vllm"},
                    "minReplicas": 1,
                    "maxReplicas": 3,
                },
            }
        ),
    )
    cluster.run_kubectl("-n", namespace, "apply", "-f", str(SAMPLES / "inferencepool-engine-scale-to-zero.yaml"))
    wait_for(
        lambda: condition(cluster, namespace, "qwen-nightly", "ScalingConflict").get("status") == "True",
        60,
        "ScalingConflict",
    )
    assert "hand-made" in condition(cluster, namespace, "qwen-nightly", "ScalingConflict")["message"]
    assert not [k for k in children(cluster, namespace) if k.startswith("ScaledObject/")]
    cluster.run_kubectl("-n", namespace, "delete", "hpa", "hand-made")
    wait_for(
        lambda: [k for k in children(cluster, namespace) if k.startswith("ScaledObject/")],
        60,
        "the ScaledObject once the HPA is gone",
    )


def test_provider_pool_is_ready_with_its_secret(cluster: Cluster, namespace: str, operator: Operator) -> None:
    cluster.run_kubectl("-n", namespace, "apply", "-f", str(SAMPLES / "inferencepool-provider.yaml"))
    wait_for(
        lambda: condition(cluster, namespace, "azure-mini", "Ready").get("reason") == "SecretNotFound",
        60,
        "SecretNotFound",
    )
    credential_secret(cluster, namespace, "azure-openai", {"api-key": SECRET})
    wait_for(lambda: condition(cluster, namespace, "azure-mini", "Ready").get("status") == "True", 60, "Ready")
    st = pool_status(cluster, namespace, "azure-mini")
    assert st["endpoint"] == "https://contoso-batch.openai.azure.com"
    assert st["quota"] == {
        "tokensPerMinute": 200000,
        "requestsPerMinute": 1000,
        "enqueuedTokens": 0,  # no batch quota declared: jobs on it are not queued
        "maxLiveBatches": 0,
    }
    assert children(cluster, namespace) == {}


def test_job_on_an_engine_pool(
    cluster: Cluster, namespace: str, operator: Operator, vllm: EmulatorThread, tmp_path: Path
) -> None:
    pool = yaml.safe_load((SAMPLES / "inferencepool-engine-interactive.yaml").read_text())
    cluster.run_kubectl("-n", namespace, "apply", "-f", "-", input=yaml.safe_dump(pool))
    job = yaml.safe_load((SAMPLES / "llmbatchjob-pool.yaml").read_text())
    job["spec"]["input"]["inline"] = [{"id": str(n), "text": f"review number {n}"} for n in range(60)]
    job["spec"]["output"]["url"] = f"file://{operator.workdir}/pool-job-out/"
    cluster.run_kubectl("-n", namespace, "apply", "-f", "-", input=yaml.safe_dump(job))

    def admitted() -> dict[str, Any]:
        st = kubectl_json(cluster, "-n", namespace, "get", "lbj", "tagging-on-pool").get("status") or {}
        return next((c for c in st.get("conditions", []) if c["type"] == "Admitted"), {})  # type: ignore[union-attr]

    def phase() -> str:
        return str(
            (kubectl_json(cluster, "-n", namespace, "get", "lbj", "tagging-on-pool").get("status") or {}).get("phase")
        )

    wait_for(lambda: "not Ready" in admitted().get("message", ""), 60, "the job waiting for its pool")
    make_ready(cluster, namespace, "llama-interactive-vllm", 1)
    try:
        wait_for(lambda: phase() == "Succeeded", 120, "Succeeded on the pool")
    except TimeoutError:
        print(cluster.run_kubectl("-n", namespace, "get", "lbj,bpool", "-o", "yaml").stdout)
        raise
    st = kubectl_json(cluster, "-n", namespace, "get", "lbj", "tagging-on-pool")["status"]  # type: ignore[index]
    assert st["counts"]["succeeded"] + st["counts"]["refused"] == 60
    assert st["counts"]["viaFallback"] == 60  # an engine pool is the synchronous path
    results = [json.loads(x) for x in (operator.workdir / "pool-job-out" / "results.jsonl").read_text().splitlines()]
    assert sorted(int(r["id"]) for r in results) == list(range(60))
    assert all(r["output"].endswith(f"review number {r['id']}") for r in results)
    assert vllm.store.sync_requests >= 60
    assert st["usage"]["costUSD"] == "0"  # a self-hosted model has no list price


def test_job_with_a_budget_is_priced_by_its_provider_pool(
    cluster: Cluster, namespace: str, operator: Operator, emulator: EmulatorThread, tmp_path: Path
) -> None:
    """An Azure deployment name no price table knows: a job with a budget on it waits (PriceMissing, naming the
    pool) until the pool's spec.provider.price gives one, then runs and is costed with it."""
    credential_secret(cluster, namespace, "azure-openai", {"api-key": SECRET})
    pool = yaml.safe_load((SAMPLES / "inferencepool-provider.yaml").read_text())
    pool["metadata"]["name"] = "azure-eu"
    pool["spec"]["provider"].update({"model": "claims-eu-deployment", "baseURL": emulator.url})
    cluster.run_kubectl("-n", namespace, "apply", "-f", "-", input=yaml.safe_dump(pool))
    # 120 s: on a fresh control plane the first pool's handler may meet a 429 (storage initializing) and retry in 60
    wait_for(lambda: condition(cluster, namespace, "azure-eu", "Ready").get("status") == "True", 120, "pool Ready")
    job = yaml.safe_load((SAMPLES / "llmbatchjob-pool.yaml").read_text())
    job["metadata"]["name"] = "priced-by-pool"
    job["spec"]["provider"]["poolRef"]["name"] = "azure-eu"
    job["spec"]["input"]["inline"] = [{"id": str(n), "text": f"review number {n}"} for n in range(20)]
    job["spec"]["output"]["url"] = f"file://{operator.workdir}/priced-by-pool-out/"
    job["spec"]["budget"] = {"maxCostUSD": "5"}
    cluster.run_kubectl("-n", namespace, "apply", "-f", "-", input=yaml.safe_dump(job))

    def status() -> dict[str, Any]:
        body = kubectl_json(cluster, "-n", namespace, "get", "lbj", "priced-by-pool")
        return body.get("status") or {}  # type: ignore[no-any-return,union-attr]

    def admitted() -> dict[str, Any]:
        return next((c for c in status().get("conditions", []) if c["type"] == "Admitted"), {})

    wait_for(lambda: admitted().get("reason") == "PriceMissing", 60, "Admitted=False PriceMissing")
    assert admitted()["status"] == "False"
    assert "'claims-eu-deployment'" in admitted()["message"]
    assert "spec.provider.price of InferencePool 'azure-eu'" in admitted()["message"]
    assert state(emulator)["batches"] == []  # nothing sent (this module's emulator serves only this job)
    price = {"spec": {"provider": {"price": {"input": "0.15", "output": "0.6"}}}}
    cluster.run_kubectl("-n", namespace, "patch", "bpool", "azure-eu", "--type=merge", "-p", json.dumps(price))
    try:
        wait_for(lambda: status().get("phase") == "Succeeded", 120, "Succeeded with the pool's price")
    except TimeoutError:
        print(cluster.run_kubectl("-n", namespace, "get", "lbj,bpool", "-o", "yaml").stdout)
        raise
    st = status()
    assert next(c for c in st["conditions"] if c["type"] == "Admitted")["reason"] == "Planned"
    assert st["counts"]["succeeded"] + st["counts"]["refused"] == 20
    assert sum(len(b["custom_ids"]) for b in state(emulator)["batches"]) == 20  # the provider's batch API
    assert Decimal(st["usage"]["costUSD"]) > 0  # costed at the pool's price, not 0


def test_queue_workers_get_capped_scaled_objects(cluster: Cluster, namespace: str, operator: Operator) -> None:
    credential_secret(cluster, namespace, "openai", {"api-key": SECRET})
    cluster.run_kubectl("-n", namespace, "apply", "-f", str(SAMPLES / "inferencepool-provider-redis-worker.yaml"))
    cluster.run_kubectl("-n", namespace, "apply", "-f", str(SAMPLES / "inferencepool-engine-rabbitmq-worker.yaml"))

    def worker_status(pool: str) -> list[dict[str, Any]]:
        return list(pool_status(cluster, namespace, pool).get("workers") or [])

    wait_for(lambda: worker_status("ingest-mini") and worker_status("rescoring"), 60, "worker status")
    assert worker_status("ingest-mini") == [
        {
            "name": "doc-ingest",
            "quotaCap": 1,
            "effectiveMaxReplicas": 1,
            "scaledObject": "ingest-mini-doc-ingest-worker",
        }
    ]
    assert condition(cluster, namespace, "ingest-mini", "QuotaCapped")["status"] == "True"
    assert worker_status("rescoring")[0]["effectiveMaxReplicas"] == 6
    scaled = kubectl_json(cluster, "-n", namespace, "get", "scaledobjects.keda.sh", "ingest-mini-doc-ingest-worker")
    assert scaled["spec"]["maxReplicaCount"] == 1  # type: ignore[index]
    assert scaled["spec"]["triggers"][0]["type"] == "redis-streams"  # type: ignore[index]
    auth = kubectl_json(cluster, "-n", namespace, "get", "triggerauthentications.keda.sh", "rescoring-rescore-worker")
    assert auth["spec"]["secretTargetRef"][0]["parameter"] == "host"  # type: ignore[index]
    for kind in ("deployment", "configmap"):
        obj = kubectl_json(cluster, "-n", namespace, "get", kind, "ingest-mini-doc-ingest-worker")
        assert obj["metadata"]["ownerReferences"][0]["name"] == "ingest-mini"  # type: ignore[index]
    config = kubectl_json(cluster, "-n", namespace, "get", "configmap", "ingest-mini-doc-ingest-worker")
    assert SECRET not in json.dumps(config)

    # a hand-made HPA appears on the worker's Deployment: Barge's ScaledObject goes, ScalingConflict names the HPA
    cluster.run_kubectl(
        "-n",
        namespace,
        "apply",
        "-f",
        "-",
        input=yaml.safe_dump(
            {
                "apiVersion": "autoscaling/v2",
                "kind": "HorizontalPodAutoscaler",
                "metadata": {"name": "manual"},
                "spec": {
                    "scaleTargetRef": {
                        "apiVersion": "apps/v1",
                        "kind": "Deployment",
                        "name": "rescoring-rescore-worker",
                    },
                    "minReplicas": 1,
                    "maxReplicas": 2,
                },
            }
        ),
    )
    wait_for(
        lambda: "manual" in condition(cluster, namespace, "rescoring", "ScalingConflict").get("message", ""),
        60,
        "ScalingConflict for the worker",
    )
    assert (
        cluster.run_kubectl(
            "-n", namespace, "get", "scaledobjects.keda.sh", "rescoring-rescore-worker", check=False
        ).returncode
        != 0
    )

    # a quota change recomputes the cap
    cluster.run_kubectl(
        "-n",
        namespace,
        "patch",
        "bpool",
        "ingest-mini",
        "--type=merge",
        "-p",
        '{"spec":{"quota":{"tokensPerMinute":1800000}}}',
    )
    wait_for(lambda: worker_status("ingest-mini")[0]["effectiveMaxReplicas"] == 10, 60, "the new cap")
    wait_for(
        lambda: (
            kubectl_json(cluster, "-n", namespace, "get", "scaledobjects.keda.sh", "ingest-mini-doc-ingest-worker")[
                "spec"
            ]["maxReplicaCount"]
            == 10
        ),  # type: ignore[index]
        60,
        "maxReplicaCount 10",
    )

    # removing the worker removes its objects
    cluster.run_kubectl(
        "-n", namespace, "patch", "bpool", "ingest-mini", "--type=merge", "-p", '{"spec":{"workers":[]}}'
    )
    wait_for(
        lambda: (
            cluster.run_kubectl(
                "-n", namespace, "get", "deployment", "ingest-mini-doc-ingest-worker", check=False
            ).returncode
            != 0
        ),
        60,
        "the worker Deployment gone",
    )
