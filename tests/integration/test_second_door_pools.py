"""Second-door detection (#31.3) on InferencePools and idle credentials, on a real API server: a provider pool's
credential is scanned although no job ever ran on it (the pool as the watch delivers it, its marked Secret and
its namespace's tenant read from the API server); a batch created outside Barge on that key is counted under the
pool's tenant and announced on the pool, once; a deleted pool's credential leaves the scan and the gauge; and a
credential a finished job used is still scanned. The listing stops at its page limit."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from kubernetes_asyncio.config import kube_config
from tools import localcluster

from barge.batch import prices, second_door
from barge.batch.runner import JobRunner
from barge.config import OperatorConfig
from barge.ledger import Ledger
from barge.operator import jobs
from barge.operator import second_door as doors
from barge.operator.cache import ClientSpec
from barge.operator.kube import Kube
from barge.policy import parse
from tests.conftest import Factory, kubectl_json, state
from tests.integration.test_engine import FAST, provider_for, run_to_end
from tests.integration.test_robustness_money import claims, job_of
from tests.integration.test_second_door import outside_lines

KEY = "sk-ant-pool-key"
LOOPBACK = parse({"endpoints": {"allow": [{"host": "127.0.0.1", "private": True}]}})


def pool_body(cluster: localcluster.Cluster, namespace: str, url: str) -> dict[str, Any]:
    doc = f"""
apiVersion: barge.dev/v1alpha1
kind: InferencePool
metadata: {{name: claude-pool, namespace: {namespace}}}
spec:
  model: claude-sonnet-4-6
  provider:
    type: anthropic
    model: claude-sonnet-4-6
    secretRef: {{name: anthropic, key: api-key}}
    baseURL: {url}
  quota: {{tokensPerMinute: 200000, requestsPerMinute: 1000}}
"""
    cluster.run_kubectl("apply", "-f", "-", input=doc)
    return kubectl_json(cluster, "-n", namespace, "get", "inferencepool", "claude-pool")


async def test_an_idle_pool_credential_is_scanned_and_the_pool_warned(
    cluster: localcluster.Cluster,
    namespace: str,
    start_emulator: Factory,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(kube_config, "KUBE_CONFIG_DEFAULT_LOCATION", str(cluster.kubeconfig))
    cluster.run_kubectl("label", "namespace", namespace, "barge.dev/tenant=claims-team")
    cluster.run_kubectl("-n", namespace, "create", "secret", "generic", "anthropic", f"--from-literal=api-key={KEY}")
    cluster.run_kubectl("-n", namespace, "label", "secret", "anthropic", "barge.dev/credential=true")
    emu = start_emulator({"batch": {"processingSeconds": 3600}})
    body = pool_body(cluster, namespace, emu.url)
    config = OperatorConfig(policy=LOOPBACK)
    ledger = Ledger(str(tmp_path / "l.db"))
    kube = Kube()
    ctx = jobs.Context(config, ledger, kube, prices.load())  # type: ignore[arg-type]
    posted: dict[str, list[tuple[str, str, str]]] = {}

    def poster(pool: Any) -> doors.Poster:
        return lambda *event: posted.setdefault(pool["metadata"]["name"], []).append(event)

    try:
        ctx.pools.observe({"type": "ADDED", "object": body})
        await doors.scan_once(ctx, time.time(), poster)
        label = ("anthropic", second_door.endpoint_hash("anthropic", emu.url, ClientSpec("anthropic", KEY).key[1]))
        assert ctx.doors.foreign == {(*label, "claims-team"): 0}  # scanned with no job at all; clean
        assert posted == {}

        provider = provider_for("anthropic", emu.url, KEY)  # another team's script with the pool's key
        outside = await provider.create_batch(outside_lines(provider, "anthropic", 2), {})
        later = time.time() + second_door.YOUNG + 1
        await doors.scan_once(ctx, later, poster)
        await doors.scan_once(ctx, later, poster)  # the same id again: no second event
        assert ctx.doors.foreign == {(*label, "claims-team"): 1}
        ((reason, message, kind),) = posted["claude-pool"]
        assert (reason, kind) == ("SecondDoorBatches", "Warning")
        assert outside.id in message
        assert "pool's anthropic credential" in message
        assert KEY not in message
        listed = {b["id"]: b for b in state(emu)["batches"]}
        assert listed[outside.id]["status"] not in ("canceling", "ended")  # never touched

        ctx.pools.observe({"type": "DELETED", "object": body})
        await doors.scan_once(ctx, later, poster)
        assert ctx.doors.foreign == {}  # the deleted pool's credential left the scan and the gauge
    finally:
        await kube.close()
        ledger.close()
        ctx.stop_engine()


async def test_a_finished_jobs_credential_is_still_scanned(start_emulator: Factory, tmp_path: Path) -> None:
    emu = start_emulator()
    ledger = Ledger(str(tmp_path / "l.db"))
    ctx = jobs.Context(OperatorConfig(policy=LOOPBACK), ledger, None, prices.load())  # type: ignore[arg-type]  # no cluster
    try:
        job = job_of(tmp_path, "anthropic", "claude-sonnet-4-6", claims(5, 100))
        snap = await run_to_end(JobRunner(job, provider_for("anthropic", emu.url), ledger, prices.load(), FAST))
        assert snap.phase == "Succeeded"
        posted: list[tuple[str, str, str]] = []
        ctx.doors.saw(ClientSpec("anthropic", "k", emu.url), "claims-team", job.key, lambda *e: posted.append(e))
        provider = provider_for("anthropic", emu.url)
        outside = await provider.create_batch(outside_lines(provider, "anthropic", 1), {})
        await doors.scan_once(ctx, time.time() + second_door.YOUNG + 1)  # the job ended: its key is idle now
        assert len(posted) == 1
        assert outside.id in posted[0][1]
    finally:
        ledger.close()
        ctx.stop_engine()


async def test_the_listing_stops_at_its_page_limit(start_emulator: Factory, tmp_path: Path) -> None:
    emu = start_emulator({"batch": {"processingSeconds": 3600}})
    ledger = Ledger(str(tmp_path / "l.db"))
    try:
        provider = provider_for("openai", emu.url)
        for _ in range(4):
            await provider.create_batch(outside_lines(provider, "openai", 1), {})
        now = time.time()
        assert len(await second_door.foreign_batches(provider, ledger, now)) == 4
        assert len(await second_door.foreign_batches(provider, ledger, now, max_listed=3)) == 3
    finally:
        ledger.close()
