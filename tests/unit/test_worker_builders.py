"""Queue workers: the quota cap arithmetic, shared quotas, and the generated worker objects."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from barge.api.pool import InferencePool
from barge.k8s import workers

REPO = Path(__file__).resolve().parents[2]


def pool(quota: dict[str, int], *specs: dict[str, Any], provider: bool = True) -> InferencePool:
    ws = [
        {
            "name": f"w{i}",
            "queue": {"type": "redis-streams", "address": "r:6379", "stream": "s"},
            "output": {"url": "s3://b/o/"},
            **spec,
        }
        for i, spec in enumerate(specs)
    ]
    kind: dict[str, Any] = (
        {"provider": {"type": "openai", "model": "gpt-4o-mini", "secretRef": {"name": "k"}}}
        if provider
        else {"engine": {}}
    )
    return InferencePool.model_validate(
        {
            "metadata": {"name": "p", "namespace": "ns", "uid": "u"},
            "spec": {"model": "m", **kind, "quota": quota, "workers": ws},
        }
    )


@pytest.mark.parametrize(
    ("quota", "worker", "cap", "effective"),
    [
        # 200k TPM / (3,000 x 60) = 1.1 -> 1; 1000 RPM / 60 = 16.6 -> tokens bind
        (
            {"tokensPerMinute": 200_000, "requestsPerMinute": 1000},
            {"tokensPerRequest": 3000, "requestsPerMinutePerReplica": 60, "maxReplicas": 20},
            1,
            1,
        ),
        # 1M TPM / (1,000 x 60) = 16.6; 600 RPM / 60 = 10 -> requests bind
        (
            {"tokensPerMinute": 1_000_000, "requestsPerMinute": 600},
            {"tokensPerRequest": 1000, "requestsPerMinutePerReplica": 60, "maxReplicas": 20},
            10,
            10,
        ),
        # the worker asks for fewer than the quota allows
        (
            {"tokensPerMinute": 1_000_000, "requestsPerMinute": 600},
            {"tokensPerRequest": 1000, "requestsPerMinutePerReplica": 60, "maxReplicas": 4},
            10,
            4,
        ),
        # a tiny quota still allows one replica (which rate-limits itself)
        (
            {"tokensPerMinute": 1000, "requestsPerMinute": 0},
            {"tokensPerRequest": 3000, "requestsPerMinutePerReplica": 60, "maxReplicas": 5},
            1,
            1,
        ),
        # no quota: no cap
        ({"tokensPerMinute": 0, "requestsPerMinute": 0}, {"maxReplicas": 7}, 0, 7),
    ],
)
def test_quota_cap(quota: dict[str, int], worker: dict[str, Any], cap: int, effective: int) -> None:
    result = workers.quota_caps(pool(quota, worker))["w0"]
    assert (result.quota_cap, result.effective_max) == (cap, effective)


def test_workers_share_one_quota_and_replicas_limit_themselves() -> None:
    p = pool(
        {"tokensPerMinute": 600_000, "requestsPerMinute": 1200},
        {"tokensPerRequest": 1000, "requestsPerMinutePerReplica": 60, "maxReplicas": 50},
        {"tokensPerRequest": 1000, "requestsPerMinutePerReplica": 60, "maxReplicas": 50},
    )
    caps = workers.quota_caps(p)
    assert caps["w0"].quota_cap == caps["w1"].quota_cap == 5  # each gets 300k TPM: 300k / 60k = 5
    total_tpm = sum(c.tokens_per_minute * c.effective_max for c in caps.values())
    total_rpm = sum(c.requests_per_minute * c.effective_max for c in caps.values())
    assert total_tpm <= 600_000
    assert total_rpm <= 1200
    assert workers.is_capped(p.spec.workers[0], caps["w0"])


def test_scaled_object_and_trigger_auth() -> None:
    doc = yaml.safe_load((REPO / "manifests/samples/inferencepool-engine-rabbitmq-worker.yaml").read_text())
    doc["metadata"].update({"namespace": "ns", "uid": "u"})
    p = InferencePool.model_validate(doc)
    worker = p.spec.workers[0]
    cap = workers.quota_caps(p)["rescore"]
    so = workers.build_worker_scaled_object(p, worker, cap)
    assert so["spec"]["maxReplicaCount"] == cap.effective_max == 6  # 600k / (800 x 120) = 6.25; 3000 / 120 = 25
    trigger = so["spec"]["triggers"][0]
    assert trigger["type"] == "rabbitmq"
    assert trigger["metadata"]["mode"] == "QueueLength"
    assert trigger["authenticationRef"]["name"] == workers.worker_names("rescoring", "rescore")["triggerauth"]
    auth = workers.build_trigger_auth(p, worker)
    assert auth is not None
    assert auth["spec"]["secretTargetRef"] == [{"parameter": "host", "name": "rabbitmq", "key": "host"}]
    deployment = workers.build_worker_deployment(p, worker, "img:1")
    assert deployment["spec"]["template"]["spec"]["containers"][0]["args"] == [
        "worker",
        "--config",
        "/etc/barge/worker.yaml",
    ]
    config = yaml.safe_load(
        workers.build_worker_configmap(p, worker, cap, "http://{name}.{namespace}.svc:8000/v1")["data"]["worker.yaml"]
    )
    assert config["provider"]["baseURL"] == "http://rescoring.ns.svc:8000/v1"
    assert config["limits"]["requestsPerMinute"] * cap.effective_max <= 3000
    assert "host" not in yaml.safe_dump(config["queue"])  # the credential is referenced, never copied


def test_redis_trigger_and_long_names() -> None:
    name = "a-rather-long-pool-name-for-document-ingestion"
    p = pool({"tokensPerMinute": 0}, {"name": "x" * 30, "targetBacklogPerReplica": 7})
    p.metadata["name"] = name
    worker = p.spec.workers[0]
    so = workers.build_worker_scaled_object(p, worker, workers.quota_caps(p)[worker.name])
    assert len("keda-hpa-" + so["metadata"]["name"]) <= 63
    assert so["spec"]["triggers"][0] == {
        "type": "redis-streams",
        "metadata": {"address": "r:6379", "stream": "s", "consumerGroup": "barge", "lagCount": "7"},
    }
    # pending entries keep a replica too: KEDA would otherwise go to zero with a message delivered, not acknowledged
    assert so["spec"]["triggers"][1] == {
        "type": "redis-streams",
        "name": "pending",
        "metadata": {"address": "r:6379", "stream": "s", "consumerGroup": "barge", "pendingEntriesCount": "7"},
    }
