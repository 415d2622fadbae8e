"""Quota-aware admission in-process: JobRunners stepped the way the operator steps them (a new runner and a new
gate from one shared `Queues` per step), real Azure adapters against the emulator's enqueued-token quota, a real
ledger. The e2e twin is tests/e2e/test_admission.py; these add the oversized job and the outside submitter."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

from barge.admission_policy import AdmissionPolicy, SharedDeployment
from barge.api.batchjob import LLMBatchJobSpec
from barge.batch import prices
from barge.batch.admission_queue import BatchQuota
from barge.batch.job import EngineSettings, Job
from barge.batch.runner import JobRunner
from barge.batch.snapshot import Snapshot
from barge.ledger import Ledger
from barge.operator import quota
from barge.providers import make_provider
from barge.providers.base import Request
from barge.storage import StoragePolicy
from tests.conftest import Factory, state

DEPLOYMENT = "gpt-4o-mini-batch"
FAST = EngineSettings(min_batch_window=0)
SYSTEM = "Classify."


def make_job(tmp_path: Path, name: str, tenant: str, n: int, text: str, created: float, **spec: Any) -> Job:
    raw: dict[str, Any] = {
        "provider": {"type": "pool", "poolRef": {"name": "azure"}},
        "input": {"url": "unused"},
        "output": {"url": str(tmp_path / name)},
        "request": {"system": SYSTEM, "template": "{{ text }}", "maxTokens": 20},
        **spec,
    }
    lines = [(i + 1, json.dumps({"id": f"{name}-{i}", "text": f"{text} {i:03d}"}).encode()) for i in range(n)]
    return Job(
        key=f"ns-{tenant}/{name}/uid-{name}",
        spec=LLMBatchJobSpec.model_validate(raw),
        tenant=tenant,
        run_date="2026-11-30",
        model=DEPLOYMENT,
        lines=lambda: iter(lines),
        storage=StoragePolicy(),
    )


async def drive(
    jobs: list[tuple[Job, float]],
    emu_url: str,
    ledger: Ledger,
    queues: quota.Queues,
    at: quota.Where,
    *,
    gather: float = 0.0,
    backoff: float = 0.5,
    seen: list[tuple[str, quota.Held]] | None = None,
) -> dict[str, Snapshot]:
    """Step every job until it is terminal, each in its own task, as the operator's daemons do."""

    async def daemon(job: Job, created: float) -> Snapshot:
        while True:
            gate = queues.gate(
                ledger,
                job.key,
                tenant=job.tenant,
                priority=job.spec.priority,
                created=created,
                namespace=f"ns-{job.tenant}",
                at=at,
                gather=gather,
                backoff=backoff,
                ttl=60,
                policy=shared(at),
            )
            provider = make_provider("azure-openai", "k", base_url=emu_url, sync_retries=0)
            try:
                snap = await JobRunner(job, provider, ledger, prices.load(), FAST, admission=gate).step()
            finally:
                await provider.close()
            gate.done(snap)
            held = snap.extra.get(quota.SNAPSHOT_KEY)
            if seen is not None and isinstance(held, quota.Held):
                seen.append((job.key, held))
            if snap.terminal:
                return snap
            await asyncio.sleep(0.05)

    async with asyncio.timeout(60):
        done = await asyncio.gather(*(daemon(job, created) for job, created in jobs))
    return {job.key: snap for (job, _), snap in zip(jobs, done, strict=True)}


def shared(at: quota.Where) -> AdmissionPolicy:
    """The admin's policy: the emulator's deployment is shared by acme and globex, with the pool's quota, and
    priority counts between tenants (else each tenant has a queue of its own: barge/admission_policy.py)."""
    provider, base_url, model = at.deployment
    deployment = SharedDeployment(provider, base_url, model, at.quota.enqueued_tokens, at.quota.max_live_batches)
    return AdmissionPolicy(max_priority=1000, shared=(deployment,))


def first_batches(emu: Any) -> list[str]:
    """Job names in the order their first batch reached the emulator."""
    order: list[str] = []
    for b in state(emu)["batches"]:
        name = b["custom_ids"][0].split("-")[0]
        if name not in order:
            order.append(name)
    return order


async def test_three_jobs_two_tenants_are_admitted_by_priority_then_fair_share(
    start_emulator: Factory, tmp_path: Path
) -> None:
    emu = start_emulator({"batch": {"processingSeconds": 0.5, "azureEnqueuedTokenLimit": 1000}})
    text = "x" * 150  # (9 + 154) / 4 -> 41 tokens an item, 20 items: 820 tokens a job; two never fit together
    a = make_job(tmp_path, "a", "acme", 20, text, 1.0)
    b = make_job(tmp_path, "b", "acme", 20, text, 2.0, priority=1)
    c = make_job(tmp_path, "c", "globex", 20, text, 3.0)
    ledger = Ledger(str(tmp_path / "l.db"))
    at = quota.where("azure-openai", emu.url, DEPLOYMENT, BatchQuota(enqueued_tokens=1000), "azure")
    seen: list[tuple[str, quota.Held]] = []
    # The admission window must hold all three first arrivals: each job plans (a forked planner) before it reaches
    # the gate, and on a loaded machine (the cold .ci/run, KEDA compiling beside two test workers) 0.5 s let job a
    # be admitted alone before b and c had planned.
    snaps = await drive([(a, 1.0), (b, 2.0), (c, 3.0)], emu.url, ledger, quota.Queues(), at, gather=3.0, seen=seen)
    assert {s.phase for s in snaps.values()} == {"Succeeded"}
    batches = state(emu)["batches"]
    assert not [x for x in batches if x["errors"]], "the emulator answered token_limit_exceeded"
    assert max(x["input_tokens"] for x in batches) <= 1000
    assert first_batches(emu) == ["b", "c", "a"]  # priority, then globex's turn (acme was just served), then acme
    reasons = {held.reason for _, held in seen}
    assert reasons == {"AdmissionWindow", "QuotaExhausted"}
    assert any("position 2 in the queue" in held.message for key, held in seen if key == a.key)


async def test_a_job_bigger_than_the_quota_is_submitted_shard_by_shard(start_emulator: Factory, tmp_path: Path) -> None:
    emu = start_emulator({"batch": {"processingSeconds": 0.3, "azureEnqueuedTokenLimit": 1000}})
    big = make_job(tmp_path, "big", "acme", 60, "y" * 150, 1.0)  # 60 x 41 = 2,460 tokens: over the whole quota
    small = make_job(tmp_path, "small", "globex", 5, "z" * 150, 2.0)
    ledger = Ledger(str(tmp_path / "l.db"))
    at = quota.where("azure-openai", emu.url, DEPLOYMENT, BatchQuota(enqueued_tokens=1000), "azure")
    snaps = await drive([(big, 1.0), (small, 2.0)], emu.url, ledger, quota.Queues(), at)
    assert {s.phase for s in snaps.values()} == {"Succeeded"}
    batches = state(emu)["batches"]
    assert not [x for x in batches if x["errors"]]
    mine = [x for x in batches if x["custom_ids"][0].startswith("big-")]
    assert len(mine) >= 3  # cut to fit the quota
    assert max(x["input_tokens"] for x in mine) <= 1000
    assert sum(len(x["custom_ids"]) for x in mine) == 60  # every item once: nothing refused, nothing twice


async def test_token_limit_exceeded_backs_off_and_spends_no_attempt(start_emulator: Factory, tmp_path: Path) -> None:
    """Someone outside Barge fills the deployment's quota: Barge's batch is refused (token_limit_exceeded), its
    items go back to pending without spending an attempt (maxAttempts 1 still succeeds), the deployment backs off,
    and the job succeeds once the outside batch has ended."""
    emu = start_emulator({"batch": {"processingSeconds": 2.0, "azureEnqueuedTokenLimit": 1000}})
    outside = make_provider("azure-openai", "k", base_url=emu.url, sync_retries=0)
    try:
        request = Request("outside-1", DEPLOYMENT, "w" * 3000, 10)
        await outside.create_batch([outside.encode(request)], {})
    finally:
        await outside.close()
    job = make_job(tmp_path, "j", "acme", 10, "v" * 150, 1.0, retry={"maxAttempts": 1})
    ledger = Ledger(str(tmp_path / "l.db"))
    queues = quota.Queues()
    at = quota.where("azure-openai", emu.url, DEPLOYMENT, BatchQuota(enqueued_tokens=1000), "azure")
    seen: list[tuple[str, quota.Held]] = []
    snaps = await drive([(job, 1.0)], emu.url, ledger, queues, at, backoff=0.3, seen=seen)
    assert snaps[job.key].phase == "Succeeded"
    assert snaps[job.key].counts["succeeded"] + snaps[job.key].counts["refused"] == 10
    errors = [x["errors"] for x in state(emu)["batches"]]
    assert ["token_limit_exceeded"] in errors  # it happened, and was not a failure
    assert any("answered token_limit_exceeded" in held.message for _, held in seen)
    assert queues.token_limits[("ns-acme", "azure")] >= 1
    attempts = {row[1] for row in ledger.iter_items(job.key, "attempts", ("succeeded", "refused"))}
    assert attempts == {1}
