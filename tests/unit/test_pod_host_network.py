"""Generated pods on a node whose Pod network is the host's (BARGE_POD_HOST_NETWORK): engine pools listen on their
spec.engine.port on the node, workers declare no port and each replica serves its metrics on its own, and the
operator can address a pool at 127.0.0.1:{port}. On the Pod network everything stays as before (named ports)."""

from __future__ import annotations

import asyncio
import os
import urllib.request
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import yaml
from prometheus_client import CollectorRegistry

from barge.api.pool import InferencePool
from barge.config import OperatorConfig
from barge.k8s import pool as builders
from barge.k8s import workers
from barge.operator import jobs, pools
from barge.workers.main import serve_metrics

REPO = Path(__file__).resolve().parents[2]
GOLDEN = Path(__file__).parent / "golden"
PROM = "http://prometheus-operated.monitoring.svc:9090"
HOST_NETWORK_SAMPLES = ["inferencepool-engine-interactive", "inferencepool-engine-rabbitmq-worker"]


def load(stem: str) -> InferencePool:
    doc = yaml.safe_load((REPO / "manifests" / "samples" / f"{stem}.yaml").read_text())
    doc["metadata"].update({"namespace": "ml", "uid": "00000000-0000-0000-0000-000000000001"})
    return InferencePool.model_validate(doc)


def engine_pool(port: int | None = None, **spec: Any) -> InferencePool:
    engine: dict[str, Any] = {} if port is None else {"port": port}
    return InferencePool.model_validate(
        {"metadata": {"name": "p", "namespace": "ml", "uid": "u"}, "spec": {"model": "m", "engine": engine, **spec}}
    )


def pod_spec(deployment: dict[str, Any]) -> dict[str, Any]:
    return deployment["spec"]["template"]["spec"]  # type: ignore[no-any-return]


@pytest.mark.parametrize("stem", HOST_NETWORK_SAMPLES)
def test_golden_children_on_host_network(stem: str) -> None:
    pool = load(stem)
    cap = workers.quota_caps(pool)
    rendered = yaml.safe_dump_all(
        [
            *builders.build_children(pool, PROM, host_network=True),
            *(workers.build_worker_deployment(pool, w, "barge:dev", host_network=True) for w in pool.spec.workers),
            *(
                workers.build_worker_configmap(pool, w, cap[w.name], "http://127.0.0.1:{port}/v1", host_network=True)
                for w in pool.spec.workers
            ),
        ],
        sort_keys=True,
    )
    golden = GOLDEN / f"{stem}.host-network.yaml"
    if os.environ.get("UPDATE_GOLDEN"):
        golden.write_text(rendered)
    assert golden.exists(), f"no golden file {golden.name}: run with UPDATE_GOLDEN=1 and review it"
    assert rendered == golden.read_text(), f"{golden.name} differs: rerun with UPDATE_GOLDEN=1 and review the diff"


def test_engine_pods_on_the_pod_network_are_unchanged() -> None:
    deployment = builders.build_deployment(engine_pool())
    spec = pod_spec(deployment)
    assert "hostNetwork" not in spec
    assert "dnsPolicy" not in spec
    assert spec["containers"][0]["ports"] == [{"name": "http", "containerPort": 8000, "protocol": "TCP"}]


def test_engine_pods_on_the_host_network_listen_on_their_port_of_the_node() -> None:
    deployment = builders.build_deployment(engine_pool(port=18_123), host_network=True)
    spec = pod_spec(deployment)
    assert spec["hostNetwork"] is True
    assert spec["dnsPolicy"] == "ClusterFirstWithHostNet"  # cluster DNS, not the node's resolv.conf
    container = spec["containers"][0]
    assert container["ports"] == [{"name": "http", "containerPort": 18_123, "protocol": "TCP"}]
    assert container["args"][container["args"].index("--port") + 1] == "18123"
    assert container["readinessProbe"]["httpGet"]["port"] == "http"  # the probes follow the named port
    service = builders.build_service(engine_pool(port=18_123))
    assert service["spec"]["ports"] == [{"name": "http", "port": 8000, "targetPort": "http", "protocol": "TCP"}]


def test_the_engine_port_is_validated() -> None:
    with pytest.raises(ValueError, match="port"):
        engine_pool(port=80)  # the engine runs as a non-root user with no capabilities


def test_the_endpoint_template_names_the_engines_port() -> None:
    pool = engine_pool(port=18_123)
    assert builders.endpoint(pool) == "http://p.ml.svc:8000/v1"  # the default goes through the Service
    assert builders.endpoint(pool, "http://127.0.0.1:{port}/v1") == "http://127.0.0.1:18123/v1"


def provider_pool_with_worker() -> InferencePool:
    return InferencePool.model_validate(
        {
            "metadata": {"name": "p", "namespace": "ns", "uid": "u"},
            "spec": {
                "model": "m",
                "provider": {"type": "openai", "model": "gpt-4o-mini", "secretRef": {"name": "k"}},
                "workers": [
                    {
                        "name": "w",
                        "queue": {"type": "redis-streams", "address": "r:6379", "stream": "s"},
                        "output": {"url": "s3://b/o/"},
                    }
                ],
            },
        }
    )


def test_workers_on_the_pod_network_keep_the_named_metrics_port() -> None:
    pool = provider_pool_with_worker()
    worker = pool.spec.workers[0]
    spec = pod_spec(workers.build_worker_deployment(pool, worker, "img"))
    assert "hostNetwork" not in spec
    assert spec["containers"][0]["ports"] == [{"name": "metrics", "containerPort": 9100}]  # the PodMonitor's port
    config = workers.worker_config(pool, worker, workers.quota_caps(pool)["w"], "")
    assert config["metricsPort"] == 9100


def test_workers_on_the_host_network_declare_no_port_and_pick_their_own() -> None:
    pool = provider_pool_with_worker()
    worker = pool.spec.workers[0]
    spec = pod_spec(workers.build_worker_deployment(pool, worker, "img", host_network=True))
    assert spec["hostNetwork"] is True
    assert spec["dnsPolicy"] == "ClusterFirstWithHostNet"
    assert "ports" not in spec["containers"][0]  # no host port: the scheduler fits any number of replicas
    cm = workers.build_worker_configmap(pool, worker, workers.quota_caps(pool)["w"], "", host_network=True)
    assert yaml.safe_load(cm["data"]["worker.yaml"])["metricsPort"] == 0


def test_two_workers_with_metrics_port_0_each_serve_on_their_own_port() -> None:
    ports = [serve_metrics({"metricsPort": 0}, CollectorRegistry()) for _ in range(2)]
    assert None not in ports
    assert ports[0] != ports[1]
    for port in ports:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
            assert response.status == 200
    assert serve_metrics({}, CollectorRegistry()) is None


def test_the_operator_setting_comes_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    assert OperatorConfig.from_env().pod_host_network is False
    monkeypatch.setenv("BARGE_POD_HOST_NETWORK", "true")
    assert OperatorConfig.from_env().pod_host_network is True


class FakeObjects:
    """Records server-side applies; nothing exists yet."""

    def __init__(self) -> None:
        self.applied: list[dict[str, Any]] = []

    async def get(self, *_: Any) -> None:
        return None

    async def list(self, *_: Any) -> list[dict[str, Any]]:
        return []

    async def apply(self, obj: dict[str, Any]) -> None:
        self.applied.append(obj)

    async def create(self, obj: dict[str, Any]) -> bool:  # the engine key Secret (REVIEW-3 M9): no pod in it
        return True

    async def delete(self, *_: Any) -> None:
        return None


def body(pool: InferencePool) -> dict[str, Any]:
    return {
        "metadata": {**pool.metadata, "generation": 1},
        "spec": pool.model_dump(by_alias=True, exclude_none=True)["spec"],
    }


@pytest.mark.parametrize("host_network", [False, True])
def test_the_operator_setting_reaches_every_generated_pod(monkeypatch: pytest.MonkeyPatch, host_network: bool) -> None:
    """jobs.reconcile_pool -> pools.reconcile -> the builders, with the Context's config."""
    applied = FakeObjects()
    engine = load("inferencepool-engine-rabbitmq-worker")
    patched: list[dict[str, Any]] = []

    async def admit(*_: Any) -> workers.WorkerTenancy:
        return workers.WorkerTenancy("ml", (), 1 << 20)

    async def patch_status(*args: Any) -> None:
        patched.append(args[-1])

    monkeypatch.setattr(jobs.admission, "admit_pool", admit)
    ctx = SimpleNamespace(
        objects=applied,
        config=OperatorConfig(pod_host_network=host_network, pool_endpoint_template="http://127.0.0.1:{port}/v1"),
        kube=SimpleNamespace(patch_status=patch_status),
    )
    asyncio.run(jobs.reconcile_pool(ctx, body(engine)))  # type: ignore[arg-type]
    deployments = [o for o in applied.applied if o["kind"] == "Deployment"]
    assert len(deployments) == 2  # the engine and its worker
    for deployment in deployments:
        assert pod_spec(deployment).get("hostNetwork", False) is host_network
    assert patched[-1]["endpoint"] == "http://127.0.0.1:8000/v1"


def test_reconcile_defaults_to_the_pod_network() -> None:
    applied = FakeObjects()

    async def exists(*_: Any) -> None:
        return None

    asyncio.run(pools.reconcile(applied, body(load("inferencepool-engine-interactive")), PROM, "", exists))  # type: ignore[arg-type]
    deployment = next(o for o in applied.applied if o["kind"] == "Deployment")
    assert "hostNetwork" not in pod_spec(deployment)
