"""Quota-aware admission between tenants (review 3: H4, H5, M1): no tenant's pool declaration, deleted job or
priority reaches another tenant's jobs. With the real Queues/JobGate and a SQLite ledger, as the review's probe
p_quota.py ran them."""

from __future__ import annotations

from pathlib import Path

import pytest

from barge import admission_policy
from barge.batch import plan, prices
from barge.batch.admission_queue import BatchQuota
from barge.batch.snapshot import Snapshot
from barge.config import OperatorConfig
from barge.ledger import Ledger
from barge.ledger import quota as ledger_quota
from barge.operator import quota
from barge.operator.jobs import Context, delete_job
from barge.policy import parse

BASE, MODEL = "https://contoso-batch.openai.azure.com", "gpt-4o-mini-global-batch"
B_AT = quota.where("azure-openai", BASE, MODEL, BatchQuota(50_000_000, 100), "azure-global-batch")  # team-b's pool
A_AT = quota.where("azure-openai", BASE, MODEL, BatchQuota(1, 1), "evil")  # team-a's pool, same endpoint + model


def job(ledger: Ledger, key: str, tenant: str, n: int, tokens: int = 200) -> None:
    ledger.ensure_job(key, "h", tenant, MODEL)
    rows = [{"custom_id": f"c{i}", "line": i, "state": "pending", "payload": "x", "est_tokens": tokens, "size": 900}
            for i in range(1, n + 1)]  # fmt: skip
    ledger.add_items(key, rows)
    ledger.set_job(key, planned=True)


def gate(queues: quota.Queues, ledger: Ledger, key: str, tenant: str, at: quota.Where, **kw: object) -> quota.JobGate:
    return queues.gate(ledger, key, tenant=tenant, priority=kw.pop("priority", 0), created=kw.pop("created", 0.0),  # type: ignore[arg-type]
                       namespace=key.split("/")[0], at=at, gather=kw.pop("gather", 0.0), backoff=60, ttl=3600, **kw)  # type: ignore[arg-type]  # fmt: skip


async def turn(g: quota.JobGate, shards: list[int]) -> int:
    async with g.turn(shards) as admitted:
        return admitted


async def test_h4_another_tenants_pool_cannot_tighten_a_deployment_quota(tmp_path: Path) -> None:
    ledger, queues = Ledger(str(tmp_path / "l.db")), quota.Queues()
    job(ledger, "team-a/parked/uid-a", "team-a", 1)
    job(ledger, "team-b/nightly/uid-b", "team-b", 1000)
    job(ledger, "team-b/first/uid-f", "team-b", 1)  # team-b's first job is running: a live batch on the deployment
    assert await turn(gate(queues, ledger, "team-b/first/uid-f", "team-b", B_AT), [200]) == 1
    ledger.open_intent("team-b/first/uid-f", "s00000", 1, 1, 1, 1)
    ledger.record_batch("team-b/first/uid-f", "s00000", "batch_b1", "azure-openai", 1, 1, "in_progress", 0.0)
    # team-a points a pool of its own at team-b's endpoint and model, declares (1, 1), parks a job at -1000
    parked = gate(queues, ledger, "team-a/parked/uid-a", "team-a", A_AT, priority=-1000)
    await turn(parked, [200])
    nightly = gate(queues, ledger, "team-b/nightly/uid-b", "team-b", B_AT, priority=1000)
    assert nightly.max_shard_tokens == 50_000_000  # its own pool's figure, not team-a's 1
    rows = [(i, 900, 0, 200) for i in range(1, 1001)]
    spans = list(plan.spans(rows, 100_000, 200 << 20, nightly.max_shard_tokens))
    assert len(spans) == 1
    assert await turn(nightly, [s.tokens for s in spans]) == 1
    # team-a's own declaration still binds team-a's own jobs
    assert parked.max_shard_tokens == 1


async def test_h4_within_a_tenant_the_strictest_declaration_applies(tmp_path: Path) -> None:
    ledger, queues = Ledger(str(tmp_path / "l.db")), quota.Queues()
    loose = quota.where("azure-openai", BASE, MODEL, BatchQuota(50_000), "loose")
    strict = quota.where("azure-openai", BASE, MODEL, BatchQuota(1_000), "strict")
    job(ledger, "team-b/a/1", "team-b", 1)
    job(ledger, "team-b/b/2", "team-b", 1)
    await turn(gate(queues, ledger, "team-b/a/1", "team-b", strict, gather=60.0), [200])
    assert gate(queues, ledger, "team-b/b/2", "team-b", loose).max_shard_tokens == 1_000


async def test_h4_a_deployment_the_admin_lists_as_shared_has_one_queue_and_the_admins_quota(tmp_path: Path) -> None:
    policy = parse({"admission": {"sharedDeployments": [
        {"provider": "azure-openai", "baseURL": BASE + "/", "model": MODEL, "enqueuedTokens": 1000, "maxLiveBatches": 5}
    ]}}).admission  # fmt: skip
    ledger, queues = Ledger(str(tmp_path / "l.db")), quota.Queues()
    job(ledger, "team-a/j/1", "team-a", 1)
    job(ledger, "team-b/j/2", "team-b", 1)
    a = gate(queues, ledger, "team-a/j/1", "team-a", A_AT, policy=policy)
    b = gate(queues, ledger, "team-b/j/2", "team-b", B_AT, policy=policy)
    assert (a.at.key, a.max_shard_tokens, b.max_shard_tokens) == (b.at.key, 1000, 1000)  # pools' own figures ignored
    assert await turn(a, [800]) == 1
    ledger.open_intent("team-a/j/1", "s00000", 1, 1, 1, 1)  # team-a's batch is live on the shared deployment
    assert await turn(b, [900]) == 0  # 900 + 200 in flight do not fit 1000: team-b waits for team-a's
    assert b.held is not None
    assert "shared; quota set by the admin" in b.held.message


def test_h4_without_the_admin_two_tenants_never_share_a_queue() -> None:
    plain = admission_policy.AdmissionPolicy()
    assert quota.scoped(A_AT, "team-a", plain).key != quota.scoped(B_AT, "team-b", plain).key
    assert quota.scoped(A_AT, "team-a", plain).key == quota.scoped(B_AT, "team-a", plain).key


def live_job(ledger: Ledger, key: str, at: quota.Where) -> None:
    job(ledger, key, "team-a", 2)
    ledger_quota.mark(ledger, key, at.key)
    for n, line in enumerate((1, 2)):
        ledger.open_intent(key, f"s{n:05d}", 1, line, line, 1)
        ledger.record_batch(key, f"s{n:05d}", f"batch_{n}", "azure-openai", 1, 1, "in_progress", 0.0)


def test_h5_a_terminal_job_releases_its_quota(tmp_path: Path) -> None:
    ledger = Ledger(str(tmp_path / "l.db"))
    live_job(ledger, "team-a/failed/uid", B_AT)
    assert ledger_quota.live(ledger, B_AT.key) == (400, 2)
    ledger.set_job("team-a/failed/uid", phase="Failed", fatal="deadline passed")  # faults.fail_at_deadline
    assert ledger_quota.live(ledger, B_AT.key) == (0, 0)


async def test_h5_a_deleted_job_releases_its_quota_and_its_tenant_stays_served(tmp_path: Path) -> None:
    ledger = Ledger(str(tmp_path / "l.db"))
    key = "team-a/deleted/uid-d"
    live_job(ledger, key, B_AT)
    served = ledger_quota.last_served(ledger, B_AT.key)
    ctx = Context(OperatorConfig(), ledger, None, prices.load())  # type: ignore[arg-type]
    events: list[str] = []
    body = {"metadata": {"namespace": "team-a", "name": "deleted", "uid": "uid-d"}, "spec": {}}
    try:
        await delete_job(ctx, body, lambda reason, message, kind: events.append(reason))
    finally:
        ctx.stop_engine()
    assert events == ["CancelFailed"]  # no provider here: its batches stay in the ledger, and billed
    assert ledger_quota.live(ledger, B_AT.key) == (0, 0)
    assert ledger_quota.last_served(ledger, B_AT.key) == served  # deleting a job does not put team-a first
    ledger_quota.release(ledger, key)  # twice: nothing more
    assert ledger.job(key)["quota_key"] == ledger_quota.RELEASED + B_AT.key  # type: ignore[index]


class Clock:
    now = 1_800_000_000.0

    def __call__(self) -> float:
        return self.now


async def test_m1_priority_does_not_jump_the_rotation_between_tenants(tmp_path: Path) -> None:
    clock = Clock()
    ledger, queues = Ledger(str(tmp_path / "l.db")), quota.Queues(clock)
    at = quota.where("azure-openai", BASE, MODEL, BatchQuota(1000), "pool")
    policy = parse({"admission": {"sharedDeployments": [
        {"provider": "azure-openai", "baseURL": BASE, "model": MODEL, "enqueuedTokens": 1000}]}}).admission  # fmt: skip
    job(ledger, "team-a/before/0", "team-a", 1)
    ledger_quota.mark(ledger, "team-a/before/0", quota.scoped(at, "team-a", policy).key)
    ledger.open_intent("team-a/before/0", "s00000", 1, 1, 1, 1)  # team-a was served most recently ...
    ledger.abandon_intent("team-a/before/0", "s00000")  # ... and holds nothing now
    waiting = [("team-b/nightly/1", "team-b", 0)] + [(f"team-a/j{i}/{i}", "team-a", 1000) for i in range(3)]
    for key, tenant, priority in waiting:  # all join within the admission window
        job(ledger, key, tenant, 4)
        g = gate(queues, ledger, key, tenant, at, priority=priority, gather=5.0, policy=policy)
        assert await turn(g, [800]) == 0
    clock.now += 6
    nightly = gate(queues, ledger, "team-b/nightly/1", "team-b", at, gather=5.0, policy=policy)
    assert await turn(nightly, [800]) == 1, nightly.held  # team-b's turn: team-a's 1000 counts as 0 between tenants


async def test_m1_the_admin_may_let_a_tenant_jump_and_a_tenant_orders_its_own_jobs(tmp_path: Path) -> None:
    policy = parse({"admission": {"tenants": {"platform": {"maxPriority": 1000}}}}).admission
    assert (policy.priority_bound("platform"), policy.priority_bound("team-a")) == (1000, 0)
    ledger, queues = Ledger(str(tmp_path / "l.db")), quota.Queues()
    at = quota.where("azure-openai", BASE, MODEL, BatchQuota(1000), "pool")
    for key, priority in (("team-a/old/1", 0), ("team-a/urgent/2", 500)):
        job(ledger, key, "team-a", 1)
        await turn(gate(queues, ledger, key, "team-a", at, priority=priority, gather=3600.0, policy=policy), [800])
    (dep,) = queues.deployments.values()
    assert sorted((e.waiting.priority, e.waiting.rank) for e in dep.entries.values()) == [(0, 0), (0, 500)]
    from barge.batch.admission_queue import queue_order

    assert [w.key for w in queue_order([e.waiting for e in dep.entries.values()], {})] == [
        "team-a/urgent/2",
        "team-a/old/1",
    ]


@pytest.mark.parametrize(
    "section",
    [
        {"maxPriority": 2000},
        {"maxPriority": "high"},
        {"tenants": {"Team_A": {"maxPriority": 1}}},
        {"tenants": {"team-a": {"max": 1}}},
        {"sharedDeployments": [{"provider": "azure-openai", "model": "m"}]},
        {"sharedDeployments": [{"provider": "azure-openai", "baseURL": "https://x", "model": "m", "tokens": 1}]},
        {"sharedDeployments": [{"provider": "openai", "baseURL": "https://x", "model": "m", "maxLiveBatches": -1}]},
        {"priority": 1},
    ],
)
def test_policy_admission_section_is_checked(section: dict[str, object]) -> None:
    with pytest.raises(ValueError, match="policy admission"):
        parse({"admission": section})


async def test_h4_a_job_marked_under_an_older_key_counts_in_its_queue_after_its_next_step(tmp_path: Path) -> None:
    """After the upgrade (the tenant joined the key) or a change of the admin's shared deployments, a job whose
    batches are all in flight asks the queue for nothing more; its step still moves its mark, so they count."""
    ledger, queues = Ledger(str(tmp_path / "l.db")), quota.Queues()
    live_job(ledger, "team-a/running/uid", B_AT)  # marked with the deployment's key alone, as ba0610c did
    g = gate(queues, ledger, "team-a/running/uid", "team-a", B_AT)
    assert ledger_quota.live(ledger, g.at.key) == (0, 0)
    g.done(Snapshot("Running", {"submitted": 2}, {}, [], [], ""))
    assert ledger_quota.live(ledger, g.at.key) == (400, 2)
