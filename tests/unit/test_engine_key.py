"""REVIEW-3 M9: an engine pool's vLLM answers /v1 only with the pool's API key, and everything Barge sends carries it.

The builders reference the `<pool>-engine-key` Secret (vLLM's VLLM_API_KEY, the workers' BARGE_API_KEY); the
operator creates that Secret once (32 random bytes) and never replaces it; `barge emulator --vllm` answers 401
without the key, as vLLM does; the operator's client for `type: pool` jobs sends `Authorization: Bearer <key>`.
"""

from __future__ import annotations

import asyncio
import json
import urllib.error
import urllib.request
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import yaml

from barge.api.batchjob import LLMBatchJobSpec
from barge.api.pool import InferencePool
from barge.config import OperatorConfig
from barge.emulator.profile import Profile
from barge.emulator.server import EmulatorThread
from barge.k8s import pool as builders
from barge.k8s import workers
from barge.operator import engine_key, pools, targets
from barge.operator.cache import Watched
from barge.providers.base import Outcome, Request
from barge.providers.errors import Fatal
from barge.providers.factory import make_provider

SAMPLES = Path(__file__).resolve().parents[2] / "manifests" / "samples"
KEY_REF = {"secretKeyRef": {"name": "p-engine-key", "key": "api-key"}}


def engine_pool(**spec: Any) -> InferencePool:
    return InferencePool.model_validate(
        {
            "metadata": {"name": "p", "namespace": "ml", "uid": "u-1"},
            "spec": {"model": "m", "engine": {"image": "vllm/vllm-openai:v0.8.5"}, **spec},
        }
    )


def env_of(deployment: dict[str, Any]) -> dict[str, Any]:
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    return {e["name"]: e.get("valueFrom", e.get("value")) for e in container["env"]}


def test_the_engines_and_the_workers_reference_the_pool_key() -> None:
    doc = yaml.safe_load((SAMPLES / "inferencepool-engine-rabbitmq-worker.yaml").read_text())
    pool = engine_pool(workers=doc["spec"]["workers"])
    deployment = builders.build_deployment(pool)
    assert env_of(deployment)["VLLM_API_KEY"] == KEY_REF
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    assert not any("key" in a.lower() for a in container["args"])  # never on the command line (ps, events)
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):  # /v1 needs the key; /health does not
        assert container[probe]["httpGet"]["path"] == "/health"
    worker = workers.build_worker_deployment(pool, pool.spec.workers[0], "barge:test")
    assert env_of(worker)["BARGE_API_KEY"] == KEY_REF
    secret = builders.build_engine_key(pool, "v")
    assert secret["metadata"]["name"] == "p-engine-key"
    assert secret["metadata"]["labels"]["barge.dev/credential"] == "true"
    assert secret["metadata"]["ownerReferences"][0]["uid"] == "u-1"
    assert secret["stringData"] == {"api-key": "v"}


class Secrets:
    """Objects for Secrets and the rest of a pool's children: records creates and applies."""

    def __init__(self, existing: dict[str, Any] | None = None) -> None:
        self.existing = existing
        self.created: list[dict[str, Any]] = []
        self.applied: list[dict[str, Any]] = []

    async def get(self, api_version: str, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        if kind == "Secret":
            return self.existing or (self.created[-1] if self.created else None)
        return None

    async def create(self, obj: dict[str, Any]) -> bool:
        self.created.append(obj)
        return True

    async def apply(self, obj: dict[str, Any]) -> None:
        self.applied.append(obj)

    async def list(self, *_: Any) -> list[dict[str, Any]]:
        return []

    async def delete(self, *_: Any) -> None:
        return None


def test_the_operator_creates_the_key_once_and_never_replaces_it() -> None:
    objects = Secrets()
    pool = engine_pool()
    assert asyncio.run(engine_key.ensure(objects, pool)) == ""
    assert asyncio.run(engine_key.ensure(objects, pool)) == ""  # it exists now: not created again, not changed
    assert len(objects.created) == 1
    value = objects.created[0]["stringData"]["api-key"]
    assert len(value) >= 43
    assert value != engine_key.new_key()
    foreign = Secrets({"metadata": {"name": "p-engine-key", "ownerReferences": [{"uid": "someone-else"}]}})
    assert "not created by this pool" in asyncio.run(engine_key.ensure(foreign, pool))
    assert foreign.created == []


def test_reconcile_makes_the_key_and_a_foreign_one_keeps_the_pool_unready() -> None:
    pool = engine_pool()
    body = {"metadata": {**pool.metadata, "generation": 1}, "spec": pool.model_dump(by_alias=True)["spec"]}

    async def never(*_: Any) -> None:
        return None

    objects = Secrets()
    asyncio.run(pools.reconcile(objects, body, "http://prom:9090", "http://{name}.{namespace}.svc:8000/v1", never))
    assert [s["metadata"]["name"] for s in objects.created] == ["p-engine-key"]
    foreign = Secrets({"metadata": {"name": "p-engine-key", "ownerReferences": []}})
    status = asyncio.run(
        pools.reconcile(foreign, body, "http://prom:9090", "http://{name}.{namespace}.svc:8000/v1", never)
    )
    assert "p-engine-key" in json.dumps(status["conditions"])
    assert not pools.is_ready({**body, "status": status})


def post(url: str, key: str | None) -> int:
    body = json.dumps({"model": "m", "max_tokens": 8, "messages": [{"role": "user", "content": "hi"}]}).encode()
    headers = {"Content-Type": "application/json", **({"Authorization": f"Bearer {key}"} if key else {})}
    try:
        with urllib.request.urlopen(urllib.request.Request(url, body, headers), timeout=10) as resp:  # noqa: S310
            return int(resp.status)
    except urllib.error.HTTPError as exc:
        return exc.code


@pytest.fixture
def keyed_vllm(monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.setenv("VLLM_API_KEY", "k-123")
    with EmulatorThread(Profile(), vllm_model="m") as emu:
        yield emu


def test_the_vllm_emulator_requires_the_key(keyed_vllm: EmulatorThread) -> None:
    url = f"{keyed_vllm.url}/v1/chat/completions"
    assert post(url, None) == 401
    assert post(url, "wrong") == 401
    assert post(url, "k-123") == 200
    with urllib.request.urlopen(f"{keyed_vllm.url}/health", timeout=10) as resp:  # noqa: S310 - open, as in vLLM
        assert resp.status == 200


def test_the_pool_client_sends_the_key(keyed_vllm: EmulatorThread) -> None:
    async def call(key: str) -> Outcome:
        provider = make_provider("openai", key, base_url=f"{keyed_vllm.url}/v1", engine_pool=True, sync_retries=0)
        try:
            return (await provider.complete(Request("c1", "m", "hi", 8))).outcome
        finally:
            await provider.close()

    assert asyncio.run(call("k-123")) == Outcome.SUCCEEDED
    with pytest.raises(Fatal, match="401"):  # "none", what every pool client sent before: the whole job stops
        asyncio.run(call("none"))


def test_a_pool_job_target_carries_the_pool_key() -> None:
    pool = engine_pool()
    body = {
        "metadata": pool.metadata,
        "spec": pool.model_dump(by_alias=True)["spec"],
        "status": {"readyReplicas": 1},
    }
    read: list[tuple[str, str, str]] = []

    class Kube:
        async def secret_value(self, namespace: str, name: str, key: str, *, fresh: bool = False) -> str:
            read.append((namespace, name, key))
            return "k-123"

    watched = Watched()
    watched.observe({"type": "ADDED", "object": body})
    ctx = SimpleNamespace(kube=Kube(), pools=watched, config=OperatorConfig())
    spec = LLMBatchJobSpec.model_validate(
        {
            "provider": {"type": "pool", "poolRef": {"name": "p"}, "model": "m"},
            "input": {"url": "file:///in.jsonl"},
            "output": {"url": "file:///out/"},
        }
    )
    target = asyncio.run(targets.target_for(ctx, "ml", spec))  # type: ignore[arg-type]
    assert read == [("ml", "p-engine-key", "api-key")]
    assert target.provider.secret == "k-123"
    assert not target.provider.guarded


def test_the_emulator_flag_key_wins_and_no_key_means_open(monkeypatch: pytest.MonkeyPatch) -> None:
    """`barge emulator --vllm M --api-key K` (make_app's api_key); without any key the emulator stays open."""
    from aiohttp.test_utils import TestClient, TestServer

    from barge.emulator.server import make_app

    monkeypatch.delenv("VLLM_API_KEY", raising=False)

    async def statuses(api_key: str | None) -> list[int]:
        async with TestClient(TestServer(make_app(Profile(), vllm_model="m", api_key=api_key))) as client:
            out = []
            for headers in ({}, {"Authorization": "Bearer flag-key"}):
                resp = await client.get("/v1/models", headers=headers)
                out.append(resp.status)
            return out

    assert asyncio.run(statuses("flag-key")) == [401, 200]
    assert asyncio.run(statuses(None)) == [200, 200]


def test_objects_create_posts_the_secret_and_a_409_changes_nothing() -> None:
    """The key is created with POST to the namespace's secrets (never PATCH/PUT), and an existing one is kept."""
    from kubernetes_asyncio.client.exceptions import ApiException

    from barge.operator.kube import Objects

    calls: list[tuple[str, str]] = []
    answer: list[int] = []

    async def call(path: str, method: str, **_: Any) -> Any:
        calls.append((path, method))
        if answer:
            raise ApiException(status=answer[0])
        return {}

    objects = Objects(None)  # type: ignore[arg-type]
    objects._call = call  # type: ignore[method-assign]
    secret = builders.build_engine_key(engine_pool(), "v")
    assert asyncio.run(objects.create(secret)) is True
    answer.append(409)
    assert asyncio.run(objects.create(secret)) is False
    assert calls == [("/api/v1/namespaces/ml/secrets", "POST")] * 2
