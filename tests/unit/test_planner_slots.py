"""Planning slots (review 3, H7): one pool for the operator, shared by the engine loops, fair between tenants, so
that one tenant's plans that never end (a FIFO, a stalled input) never hold every slot."""

from __future__ import annotations

import asyncio
import threading

from barge.batch.planner_slots import PlannerSlots
from barge.operator.engine import PLANNERS, PLANNERS_PER_TENANT, THREADS, Engine, EngineLoop


def test_one_tenant_with_stalled_plans_leaves_slots_to_the_others() -> None:
    engine = Engine(lambda spec: None)  # type: ignore[arg-type,return-value]
    stalled = threading.Event()  # team-a's plans hang until the end of the test
    holding: list[str] = []

    async def plan(loop: EngineLoop, tenant: str, key: str) -> str:
        async with loop.planning.hold(tenant):
            holding.append(key)
            if tenant == "team-a":
                await asyncio.to_thread(stalled.wait, 30)
        return key

    async def main() -> list[str]:
        keys = [f"team-a/j{i}/u{i}" for i in range(THREADS * PLANNERS)]  # enough to cover every loop
        a = [asyncio.ensure_future(engine.call(k, lambda lp, k=k: plan(lp, "team-a", k))) for k in keys]
        while len(holding) < PLANNERS_PER_TENANT:  # noqa: ASYNC110 - held on the engine loops (threads)
            await asyncio.sleep(0.01)
        done = await asyncio.wait_for(engine.call("team-b/n/u", lambda lp: plan(lp, "team-b", "team-b/n/u")), 10)
        held = engine.planning.held()
        stalled.set()
        await asyncio.gather(*a)
        return [done, str(held)]

    try:
        done, held = asyncio.run(main())
    finally:
        stalled.set()
        engine.stop()
    assert done == "team-b/n/u"  # team-b planned while team-a's plans hung
    assert held == str({"team-a": PLANNERS_PER_TENANT})  # team-a never held more than its share


async def test_a_freed_slot_goes_to_the_tenant_holding_fewest_then_the_longest_waiting() -> None:
    slots = PlannerSlots(2, 2)
    order: list[str] = []
    release = {name: asyncio.Event() for name in ("a1", "a2", "a3", "b1", "c1")}

    async def job(tenant: str, name: str) -> None:
        async with slots.hold(tenant):
            order.append(name)
            await release[name].wait()

    tasks = [asyncio.create_task(job(t, n)) for t, n in (("a", "a1"), ("a", "a2"), ("a", "a3"), ("b", "b1"))]
    await asyncio.sleep(0.05)
    tasks.append(asyncio.create_task(job("c", "c1")))
    await asyncio.sleep(0.05)
    assert order == ["a1", "a2"]
    release["a1"].set()  # a holds 1 now; b and c hold none: b waited longest
    await asyncio.sleep(0.05)
    assert order == ["a1", "a2", "b1"]
    release["a2"].set()  # a holds 0, c holds 0: a3 waited longer than c1
    await asyncio.sleep(0.05)
    assert order == ["a1", "a2", "b1", "a3"]
    release["b1"].set()
    await asyncio.sleep(0.05)
    assert order[-1] == "c1"
    for event in release.values():
        event.set()
    await asyncio.gather(*tasks)
    assert slots.held() == {}


async def test_a_waiter_cancelled_never_keeps_a_slot() -> None:
    slots = PlannerSlots(1, 1)
    first = asyncio.Event()

    async def hold(event: asyncio.Event) -> None:
        async with slots.hold("a"):
            await event.wait()

    holder = asyncio.create_task(hold(first))
    await asyncio.sleep(0.01)
    waiter = asyncio.create_task(hold(asyncio.Event()))
    await asyncio.sleep(0.01)
    waiter.cancel()
    first.set()
    await holder
    await asyncio.gather(waiter, return_exceptions=True)
    assert (slots.held(), slots.waiting()) == ({}, 0)
