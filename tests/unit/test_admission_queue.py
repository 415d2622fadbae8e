"""The admission queue's rules (batch/admission_queue.py): order, fair share, the walk over the quota, backoff."""

from __future__ import annotations

import math

from barge.batch.admission_queue import (
    BatchQuota,
    Live,
    LocalGate,
    Waiting,
    backoff_seconds,
    decide,
    fits_whole,
    queue_order,
)

NOW = 1_000_000.0
Q = BatchQuota(enqueued_tokens=1000)


def job(
    key: str,
    tenant: str = "t",
    *,
    priority: int = 0,
    created: float = 0.0,
    shards: tuple[int, ...] = (100,),
    since: float = 0.0,
) -> Waiting:
    return Waiting(key, tenant, priority, created, shards, since)


def keys(waiting: list[Waiting]) -> list[str]:
    return [w.key for w in waiting]


# --- order ---------------------------------------------------------------------------------------------------
def test_higher_priority_first_then_age() -> None:
    order = queue_order([job("a1", created=1), job("a2", created=2, priority=5), job("a3", created=3)], {})
    assert keys(order) == ["a2", "a1", "a3"]


def test_a_tenant_with_30_jobs_does_not_starve_one_with_1() -> None:
    many = [job(f"a{n}", "acme", created=n) for n in range(1, 31)]
    late = job("b1", "globex", created=100)
    # acme was served a moment ago: globex's one job goes first, though it is the newest
    assert keys(queue_order([*many, late], {"acme": NOW}))[:2] == ["b1", "a1"]
    # neither served yet: the tenant with the older job goes first, then they alternate
    assert keys(queue_order([*many, late], {}))[:3] == ["a1", "b1", "a2"]
    # globex was served more recently than acme: acme's oldest first, globex's next
    assert keys(queue_order([*many, late], {"acme": NOW - 10, "globex": NOW}))[:3] == ["a1", "b1", "a2"]


def test_round_robin_over_three_tenants_in_rounds() -> None:
    waiting = [job("a1", "a", created=1), job("a2", "a", created=2), job("b3", "b", created=3),
               job("c4", "c", created=4), job("b5", "b", created=5), job("a6", "a", created=6)]  # fmt: skip
    assert keys(queue_order(waiting, {})) == ["a1", "b3", "c4", "a2", "b5", "a6"]
    assert keys(queue_order(waiting, {"a": NOW, "b": NOW - 1})) == ["c4", "b3", "a1", "b5", "a2", "a6"]


def test_a_tenant_served_at_a_higher_priority_goes_behind_at_the_lower_one() -> None:
    # The e2e scenario: acme-a (p0, first), acme-b (p1), globex-c (p0, last); nobody served yet
    waiting = [job("a1", "acme", created=1), job("b2", "acme", created=2, priority=1), job("c3", "globex", created=3)]
    assert keys(queue_order(waiting, {})) == ["b2", "c3", "a1"]


def test_equal_creation_times_are_ordered_by_key() -> None:
    assert keys(queue_order([job("x-2", created=5), job("x-1", created=5)], {})) == ["x-1", "x-2"]


# --- the walk ------------------------------------------------------------------------------------------------
def test_admits_in_order_while_it_fits_and_nobody_overtakes() -> None:
    waiting = [job("a1", "a", shards=(400,)), job("b2", "b", shards=(500,)), job("a3", "a", shards=(50,))]
    d = decide(Q, Live(), waiting, {}, NOW)
    assert d.admitted == {"a1": 1, "b2": 1, "a3": 1}
    d = decide(Q, Live(tokens=200), waiting, {}, NOW)
    assert d.admitted == {"a1": 1}  # b2 does not fit the 400 left; a3 would, but does not overtake it
    assert d.held["b2"].cause == "quota"
    assert (d.held["b2"].position, d.held["b2"].of) == (1, 2)
    assert (d.held["a3"].position, d.held["a3"].of) == (2, 2)
    assert d.held["b2"].needed == 500
    assert d.free_tokens == 400


def test_a_job_that_fits_the_quota_goes_whole_or_not_at_all() -> None:
    waiting = [job("a1", shards=(300, 300, 300))]
    assert decide(Q, Live(tokens=200), waiting, {}, NOW).admitted == {}  # 900 fits the quota, not the 800 left
    assert decide(Q, Live(tokens=100), waiting, {}, NOW).admitted == {"a1": 3}


def test_a_job_bigger_than_the_quota_goes_shard_by_shard() -> None:
    waiting = [job("a1", "a", shards=(600, 600, 600)), job("b2", "b", created=5, shards=(100,))]
    assert not fits_whole((600, 600, 600), Q)
    d = decide(Q, Live(), waiting, {}, NOW)
    assert d.admitted == {"a1": 1}  # one shard now; b2 waits behind the rest of a1 (no backfill)
    assert "a1" not in d.held
    assert d.held["b2"].position == 2
    d = decide(Q, Live(tokens=600), [job("a1", shards=(600, 600))], {}, NOW)
    assert d.admitted == {}
    assert d.held["a1"].needed == 600
    # once its tenant was served, another tenant's job goes first: a big job takes turns with the others
    d = decide(
        Q, Live(), [job("a1", "a", shards=(600, 600)), job("b2", "b", created=5, shards=(300,))], {"a": NOW}, NOW
    )
    assert d.admitted == {"b2": 1, "a1": 1}


def test_a_single_shard_over_the_whole_quota_goes_alone_when_nothing_is_live() -> None:
    waiting = [job("a1", shards=(1500, 100))]
    assert decide(Q, Live(), waiting, {}, NOW).admitted == {"a1": 1}
    assert decide(Q, Live(tokens=1), waiting, {}, NOW).admitted == {}
    # and not after another job was admitted in the same decision
    both = [job("b0", "b", created=-1, shards=(10,)), job("a1", "a", shards=(1500,))]
    assert decide(Q, Live(), both, {}, NOW).admitted == {"b0": 1}


def test_max_live_batches() -> None:
    quota = BatchQuota(max_live_batches=2)
    waiting = [job("a1", shards=(10, 10)), job("a2", shards=(10,))]
    assert decide(quota, Live(batches=1), waiting, {}, NOW).admitted == {}  # a1's two batches do not fit in one
    assert decide(quota, Live(), waiting, {}, NOW).admitted == {"a1": 2}
    # more shards than the limit: shard by shard
    d = decide(quota, Live(batches=1), [job("a1", shards=(10, 10, 10))], {}, NOW)
    assert d.admitted == {"a1": 1}
    both = BatchQuota(enqueued_tokens=1000, max_live_batches=1)
    assert decide(both, Live(tokens=0, batches=1), [job("a1", shards=(10,))], {}, NOW).admitted == {}


def test_the_admission_window_holds_a_new_job_and_everyone_behind_it() -> None:
    old = job("a1", "a", created=1, since=NOW - 60)
    new = job("b2", "b", created=2, priority=1, since=NOW - 1)
    d = decide(Q, Live(), [old, new], {}, NOW, gather=5)
    assert d.admitted == {}  # b2 ranks first but its window is open: a1 does not slip ahead of it
    assert d.held["b2"].cause == "window"
    assert d.held["a1"].cause == "window"
    assert decide(Q, Live(), [old, new], {}, NOW + 4, gather=5).admitted == {"b2": 1, "a1": 1}
    assert decide(BatchQuota(), Live(), [new], {}, NOW, gather=5).admitted == {"b2": 1}  # no quota: no window


def test_nobody_is_admitted_during_the_backoff() -> None:
    d = decide(Q, Live(), [job("a1"), job("a2")], {}, NOW, backoff_until=NOW + 1)
    assert d.admitted == {}
    assert {h.cause for h in d.held.values()} == {"backoff"}
    assert decide(Q, Live(), [job("a1")], {}, NOW, backoff_until=NOW).admitted == {"a1": 1}
    assert decide(BatchQuota(), Live(), [job("a1")], {}, NOW, backoff_until=NOW + 1).admitted == {}


def test_without_a_quota_everything_goes() -> None:
    waiting = [job(f"a{n}", shards=(10**9, 10**9)) for n in range(5)]
    d = decide(BatchQuota(), Live(tokens=10**12, batches=10**6), waiting, {}, NOW)
    assert d.admitted == {f"a{n}": 2 for n in range(5)}
    assert d.free_tokens is None
    assert not d.held


def test_jobs_with_no_shards_are_not_in_the_queue() -> None:
    d = decide(Q, Live(), [job("a1", shards=()), job("a2")], {}, NOW)
    assert d.order == ("a2",)
    assert d.admitted == {"a2": 1}


def test_simulated_30_against_1_and_priority() -> None:
    """A deployment that fits one job at a time: acme's 30 jobs, then globex's one, then an urgent acme job."""
    waiting = {f"a{n:02d}": job(f"a{n:02d}", "acme", created=n, shards=(600,)) for n in range(1, 31)}
    served: dict[str, float] = {}
    ran: list[str] = []
    clock = NOW
    while waiting:
        if len(ran) == 3:
            waiting["b99"] = job("b99", "globex", created=99, shards=(600,))
            waiting["u98"] = job("u98", "acme", created=98, priority=10, shards=(600,))
        d = decide(Q, Live(), list(waiting.values()), served, clock)
        assert len(d.admitted) == 1  # 600 + 600 > 1000: one at a time
        (key,) = d.admitted
        ran.append(key)
        served[waiting.pop(key).tenant] = clock
        clock += 1
    assert ran[:6] == ["a01", "a02", "a03", "u98", "b99", "a04"]  # priority first, then globex's turn
    assert sorted(ran) == sorted([f"a{n:02d}" for n in range(1, 31)] + ["b99", "u98"])


# --- quota, cut, backoff -------------------------------------------------------------------------------------
def test_the_stricter_declaration_of_a_shared_deployment_wins() -> None:
    assert BatchQuota(1000, 0).tighter(BatchQuota(500, 3)) == BatchQuota(500, 3)
    assert BatchQuota(0, 0).tighter(BatchQuota(0, 0)) == BatchQuota()
    assert not BatchQuota().limited
    assert BatchQuota(max_live_batches=1).limited


def test_backoff_doubles_up_to_the_cap() -> None:
    assert [backoff_seconds(n, 10, 100) for n in range(6)] == [0, 10, 20, 40, 80, 100]
    assert backoff_seconds(10_000, 60, 1800) == 1800
    assert math.isfinite(backoff_seconds(10**9))


async def test_local_gate_backs_off_after_token_limit_exceeded() -> None:
    now = [NOW]
    gate = LocalGate(base=10, cap=100, clock=lambda: now[0])
    async with gate.turn([5, 5]) as n:
        assert n == 2
    gate.batch_ended(True)
    async with gate.turn([5]) as n:
        assert n == 0
    now[0] += 10
    async with gate.turn([5]) as n:
        assert n == 1
    gate.batch_ended(True)
    gate.batch_ended(True)  # two in a row: 20 s after the first, then 40 s
    assert gate.until == now[0] + 40
    gate.batch_ended(False)
    assert gate.strikes == 0
    assert gate.max_shard_tokens == 0
