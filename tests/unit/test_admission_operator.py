"""The operator's side of quota admission (operator/quota.py): the queue per deployment over a real (SQLite) ledger,
the Queued status, and the barge_admission_* metrics."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from barge.batch.admission_queue import BatchQuota
from barge.batch.snapshot import Snapshot
from barge.ledger import Ledger
from barge.ledger import quota as ledger_quota
from barge.operator import kstatus, quota
from barge.policy import parse

NOW = 1_800_000_000.0
AT = quota.where("azure-openai", "https://contoso.openai.azure.com/", "dep", BatchQuota(1000), "azure")
#: The admin lists both deployments these tests use as shared by tenants a and b (else each tenant has its own
#: queue: tests/unit/test_quota_tenancy.py), and lets priority count between tenants.
SHARED = parse({"admission": {"maxPriority": 1000, "sharedDeployments": [
    {"provider": "azure-openai", "baseURL": "https://contoso.openai.azure.com", "model": "dep", "enqueuedTokens": 1000},
    {"provider": "azure-openai", "baseURL": "https://x", "model": "dep"},
]}}).admission  # fmt: skip


class Clock:
    def __init__(self) -> None:
        self.now = NOW

    def __call__(self) -> float:
        return self.now


def gate(queues: quota.Queues, ledger: Ledger, key: str, tenant: str, *, priority: int = 0, at: quota.Where = AT,
         created: float = 1.0, gather: float = 5.0) -> quota.JobGate:  # fmt: skip
    ledger.ensure_job(key, "h", tenant, "dep")
    return queues.gate(ledger, key, tenant=tenant, priority=priority, created=created, namespace=f"ns-{tenant}", at=at,
                       gather=gather, backoff=60.0, ttl=60.0, policy=SHARED)  # fmt: skip


async def turn(g: quota.JobGate, shards: list[int]) -> int:
    async with g.turn(shards) as n:
        return n


def snapshot(submitted: int = 0) -> Snapshot:
    return Snapshot("Submitting", {"submitted": submitted}, {}, [], [], "0/20 with a result")


def test_a_deployment_is_its_provider_endpoint_and_model() -> None:
    assert quota.where("azure-openai", "https://x/", "m").key == quota.where("azure-openai", "https://x", "m").key
    assert quota.where("azure-openai", "https://x", "m").key != quota.where("azure-openai", "https://y", "m").key
    assert quota.where("openai", "https://x", "m").key != quota.where("azure-openai", "https://x", "m").key


async def test_jobs_wait_their_window_then_go_by_priority_and_what_is_live_counts(tmp_path: Path) -> None:
    ledger, clock = Ledger(str(tmp_path / "l.db")), Clock()
    queues = quota.Queues(clock)
    low, high = gate(queues, ledger, "ns-a/low/1", "a"), gate(queues, ledger, "ns-b/high/2", "b", priority=1)
    assert await turn(low, [800]) == 0
    assert low.held is not None
    assert low.held.reason == "AdmissionWindow"
    assert await turn(high, [800]) == 0
    clock.now += 6
    low = gate(queues, ledger, "ns-a/low/1", "a")
    assert await turn(low, [800]) == 0  # high goes first: 800 + 800 does not fit 1000
    assert low.held is not None
    # high is admitted in this decision (it creates at its own turn): low is next, and what is left is 200
    assert (low.held.reason, "position 1 in the queue" in low.held.message) == ("QuotaExhausted", True)
    # its own needs and the quota, never what other tenants hold nor how many wait behind it (REVIEW-3 L7)
    assert "needs 800 estimated tokens" in low.held.message
    assert "(the quota: 1,000 enqueued tokens" in low.held.message
    assert " of 1" not in low.held.message
    assert "200" not in low.held.message
    high = gate(queues, ledger, "ns-b/high/2", "b", priority=1)
    assert await turn(high, [800]) == 1
    assert ledger.job("ns-b/high/2")["quota_key"] == AT.key  # type: ignore[index]
    # the high job's batch is live in the ledger: 800 tokens in flight
    ledger.add_items("ns-b/high/2", [{"custom_id": "x", "line": 1, "state": "pending", "est_tokens": 800}])
    ledger.open_intent("ns-b/high/2", "s00000", 1, 1, 1, 1)
    assert ledger_quota.live(ledger, AT.key) == (800, 1)
    low = gate(queues, ledger, "ns-a/low/1", "a")
    assert await turn(low, [800]) == 0
    assert low.held is not None
    assert "position 1 in the queue" in low.held.message
    ledger.abandon_intent("ns-b/high/2", "s00000")  # capacity returns
    high.batch_ended(False)
    low = gate(queues, ledger, "ns-a/low/1", "a")
    assert await turn(low, [800]) == 1
    assert queues.waits[("ns-a", "azure", "a")].count == 1
    assert queues.waits[("ns-a", "azure", "a")].total == 6.0


async def test_token_limit_exceeded_backs_off_the_whole_deployment(tmp_path: Path) -> None:
    ledger, clock = Ledger(str(tmp_path / "l.db")), Clock()
    queues = quota.Queues(clock)
    direct = quota.where("azure-openai", "https://x", "dep")  # no quota declared: no queue, only the backoff
    one = gate(queues, ledger, "ns-a/one/1", "a", at=direct)
    assert await turn(one, [10, 10]) == 2
    one.batch_ended(True)
    two = gate(queues, ledger, "ns-b/two/2", "b", at=direct)
    assert await turn(two, [10]) == 0
    assert two.held is not None
    assert "answered token_limit_exceeded" in two.held.message
    clock.now += 60
    assert await turn(gate(queues, ledger, "ns-b/two/2", "b", at=direct), [10]) == 1
    assert queues.token_limits == {("ns-a", ""): 1}


async def test_a_job_that_stops_asking_leaves_the_queue(tmp_path: Path) -> None:
    ledger, clock = Ledger(str(tmp_path / "l.db")), Clock()
    queues = quota.Queues(clock)
    first = gate(queues, ledger, "ns-a/first/1", "a", created=1)
    await turn(first, [800])
    clock.now += 10
    second = gate(queues, ledger, "ns-b/second/2", "b", created=2)
    assert await turn(second, [800]) == 0  # the first holds its place ahead of it (its window long closed)
    suspended = gate(queues, ledger, "ns-a/first/1", "a", created=1)
    suspended.done(snapshot())  # a step that never reached submission
    clock.now += 6
    assert await turn(gate(queues, ledger, "ns-b/second/2", "b", created=2), [800]) == 1


def test_queued_status_replaces_admitted_and_keeps_the_rest() -> None:
    snap = snapshot()
    snap.extra[quota.SNAPSHOT_KEY] = quota.Held("QuotaExhausted", "waiting: position 2 of 3")
    planned = {"type": "Admitted", "status": "True", "reason": "Planned", "message": "20 items"}
    submitted = {"type": "Submitted", "status": "False", "reason": "NoBatches", "message": ""}
    old: dict[str, Any] = {"conditions": [{**planned, "lastTransitionTime": "2026-01-01T00:00:00Z"}]}
    new = {"phase": "Submitting", "message": "0/20", "conditions": [planned, submitted]}
    out = quota.queued_status(new, old, snap, 3)
    assert out["phase"] == "Queued"
    assert out["message"] == "waiting: position 2 of 3"
    conds = {c["type"]: c for c in out["conditions"]}
    assert (conds["Admitted"]["status"], conds["Admitted"]["reason"]) == ("False", "QuotaExhausted")
    assert conds["Admitted"]["lastTransitionTime"] != "2026-01-01T00:00:00Z"
    assert conds["Submitted"] == submitted
    assert (conds["Reconciling"]["status"], conds["Reconciling"]["reason"]) == ("True", "Queued")
    assert conds["Ready"]["status"] == "False"
    assert [c["type"] for c in out["conditions"]].count("Admitted") == 1
    assert {c["type"] for c in kstatus.job_conditions("Queued", [], "")} <= set(conds)
    # with batches in flight the job keeps its phase; the message says what waits
    running = snapshot(submitted=5)
    running.extra[quota.SNAPSHOT_KEY] = quota.Held("QuotaExhausted", "waiting: position 1 of 1")
    kept = quota.queued_status({**new, "phase": "Running"}, old, running, 3)
    assert kept["phase"] == "Running"
    assert kept["message"].endswith("more shards wait: waiting: position 1 of 1")
    assert quota.queued_status(new, old, snapshot(), 3) is new  # not held: untouched


async def test_metrics(tmp_path: Path) -> None:
    ledger, clock = Ledger(str(tmp_path / "l.db")), Clock()
    queues = quota.Queues(clock)
    await turn(gate(queues, ledger, "ns-a/j1/1", "a"), [300, 200])
    await turn(gate(queues, ledger, "ns-a/j2/2", "a"), [100])
    await turn(gate(queues, ledger, "ns-b/j3/3", "b"), [50])
    clock.now += 7
    await turn(gate(queues, ledger, "ns-b/j3/3", "b"), [50])  # admitted after 7 s
    gate(queues, ledger, "ns-a/j1/1", "a").batch_ended(True)
    registry = CollectorRegistry()
    registry.register(quota.AdmissionCollector(queues, ttl=60))
    samples = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(generate_latest(registry).decode())
        for s in family.samples
    }

    def v(name: str, **labels: str) -> float | None:
        return samples.get((name, tuple(sorted(labels.items()))))

    a = {"namespace": "ns-a", "pool": "azure", "tenant": "a"}
    b = {"namespace": "ns-b", "pool": "azure", "tenant": "b"}
    assert v("barge_admission_queued_jobs", **a) == 2
    assert v("barge_admission_queued_tokens", **a) == 600
    assert v("barge_admission_queued_jobs", **b) == 0  # admitted: listed at 0
    assert v("barge_admission_wait_seconds_count", **b) == 1
    assert v("barge_admission_wait_seconds_sum", **b) == 7
    assert v("barge_admission_wait_seconds_bucket", **b, le="5.0") == 0
    assert v("barge_admission_wait_seconds_bucket", **b, le="15.0") == 1
    assert v("barge_admission_wait_seconds_bucket", **b, le="+Inf") == 1
    assert v("barge_admission_token_limit_answers_total", namespace="ns-a", pool="azure") == 1


def test_a_deployment_turn_is_exclusive_across_engine_loops(tmp_path: Path) -> None:
    """Job steps run on several engine loops (threads): one job's turn, held while it creates its batches, makes
    a job on another loop wait, without an asyncio lock bound to the wrong loop and without blocking that loop."""
    ledger = Ledger(str(tmp_path / "l.db"))
    queues = quota.Queues()
    one = gate(queues, ledger, "ns-a/one/1", "a", gather=0)
    two = gate(queues, ledger, "ns-b/two/2", "b", gather=0)
    events: list[str] = []
    inside = threading.Event()

    async def first() -> None:
        async with one.turn([100]) as n:
            events.append(f"one in {n}")
            inside.set()
            await asyncio.sleep(0.3)  # creating its batches
            events.append("one out")

    async def second() -> None:
        inside.wait(5)
        ticks = 0

        async def tick() -> None:  # this loop keeps running while it waits for the turn
            nonlocal ticks
            while True:
                ticks += 1
                await asyncio.sleep(0.01)

        ticker = asyncio.create_task(tick())
        async with two.turn([100]) as n:
            events.append(f"two in {n}")
        ticker.cancel()
        events.append(f"ticked {ticks > 5}")

    threads = [threading.Thread(target=asyncio.run, args=(job(),)) for job in (first, second)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert events == ["one in 1", "one out", "two in 1", "ticked True"]
