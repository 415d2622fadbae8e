"""batch/memory.py: the container's limit as cgroup v1 and v2 give it, the planners that fit, and the result text
all ingestions may hold at once (REVIEW-3 C2, H8)."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import pytest

from barge.batch import memory
from barge.batch.render import PlanError

MIB = 1 << 20


@pytest.mark.parametrize(
    ("files", "limit"),
    [
        ({"memory.max": "805306368\n"}, 768 * MIB),  # v2
        ({"memory.max": "max\n"}, None),  # v2, no limit
        ({"memory/memory.limit_in_bytes": "1073741824\n"}, 1024 * MIB),  # v1, controller at memory/
        ({"memory/memory.limit_in_bytes": "9223372036854771712\n"}, None),  # v1, no limit (this machine)
        ({"memory.limit_in_bytes": "536870912\n"}, 512 * MIB),  # v1 mounted at the root
        ({}, None),  # no cgroup file at all
    ],
)
def test_the_container_limit_is_read_from_cgroup_v2_or_v1(
    tmp_path: Path, files: dict[str, str], limit: int | None
) -> None:
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    assert memory.container_limit(tmp_path) == limit


def test_planner_slots_are_what_fits_beside_the_reserve() -> None:
    assert memory.planner_slots(1024 * MIB, 384 * MIB, 256 * MIB, 8) == 2
    assert memory.planner_slots(512 * MIB, 384 * MIB, 256 * MIB, 8) == 0
    assert memory.planner_slots(8192 * MIB, 384 * MIB, 256 * MIB, 8) == 8  # never more than asked for
    assert memory.planner_slots(None, 384 * MIB, 256 * MIB, 8) == 8


def test_planner_memory_is_one_budget_for_every_engine_loop() -> None:
    """Two event loops in two threads (as the engine loops are): the second planner waits for the first's release."""
    gate = memory.PlannerMemory(lambda: 384 * MIB + 300 * MIB, lambda: 190 * MIB)  # room for one of 256 MiB
    order: list[str] = []
    first_in = threading.Event()
    release_first = threading.Event()

    def first() -> None:
        async def run() -> None:
            release = await gate.acquire(256 * MIB, 384 * MIB)
            order.append("first in")
            first_in.set()
            await asyncio.to_thread(release_first.wait, 10)
            order.append("first out")
            release()

        asyncio.run(run())

    def second() -> None:
        async def run() -> None:
            first_in.wait(10)
            waiting = asyncio.ensure_future(gate.acquire(256 * MIB, 384 * MIB))
            await asyncio.sleep(0.2)
            order.append("second waiting" if not waiting.done() else "second in too early")
            release_first.set()
            release = await waiting
            order.append("second in")
            release()

        asyncio.run(run())

    threads = [threading.Thread(target=first), threading.Thread(target=second)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(20)
    assert order == ["first in", "second waiting", "first out", "second in"]
    assert gate.used() == 0
    assert gate.peak == 256 * MIB


def test_a_cancelled_waiter_takes_no_room() -> None:
    gate = memory.PlannerMemory(lambda: 384 * MIB + 256 * MIB, lambda: 190 * MIB)

    async def run() -> None:
        release = await gate.acquire(256 * MIB, 384 * MIB)
        waiting = asyncio.ensure_future(gate.acquire(256 * MIB, 384 * MIB))
        await asyncio.sleep(0)
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting
        release()
        assert gate.used() == 0
        again = await gate.acquire(256 * MIB, 384 * MIB)  # the room is free for the next one
        again()
        again()  # a release is given once, however often it is called

    asyncio.run(run())
    assert gate.used() == 0


def test_the_reserve_grows_with_what_the_operator_holds() -> None:
    """An operator watching many jobs holds more than its configured reserve (768 MB at 2,000 jobs, bench_shards):
    a planner starts only beside what it holds now plus memory.ABOVE_RESIDENT, else it is refused (retried), with
    the figure and what to do; below the reserve, the reserve counts as before."""
    held = [190 * MIB]
    gate = memory.PlannerMemory(lambda: 1024 * MIB, lambda: held[0])

    async def take() -> None:
        (await gate.acquire(256 * MIB, 384 * MIB))()

    asyncio.run(take())  # 190 + 192 < 384: the reserve; 640 MiB left, room for two
    held[0] = 768 * MIB  # 768 + 192 = 960 MiB kept: 64 MiB left, no room for a planner of 256
    with pytest.raises(PlanError, match="already holds 768 MiB") as caught:
        asyncio.run(take())
    assert not caught.value.permanent
    assert "sharding.shards" in str(caught.value)
    assert gate.used() == 0
    held[0] = 500 * MIB  # 692 kept: one planner fits (332 left), a second waits for it
    order: list[str] = []

    async def two() -> None:
        first = await gate.acquire(256 * MIB, 384 * MIB)
        second = asyncio.ensure_future(gate.acquire(256 * MIB, 384 * MIB))
        await asyncio.sleep(0.01)
        order.append("second waiting" if not second.done() else "second in")
        first()
        (await asyncio.wait_for(second, 5))()
        order.append("second in")

    asyncio.run(two())
    assert order == ["second waiting", "second in"]


def test_resident_memory_is_read_from_proc(tmp_path: Path) -> None:
    status = tmp_path / "status"
    status.write_text("Name:\tbarge\nVmHWM:\t  900000 kB\nVmRSS:\t  786432 kB\n")
    assert memory.resident(status) == 768 * MIB
    assert memory.resident(tmp_path / "missing") == 0
    assert memory.resident() > 0  # this process's own


def test_ingestions_together_commit_once_they_hold_the_shared_budget() -> None:
    text = memory.TextBudget(64 * MIB)
    assert not text.add(32 * MIB)  # one ingestion's full chunk
    assert text.add(32 * MIB)  # a second one's: together at the limit, both commit at their next page
    text.release(32 * MIB)
    assert not text.add(1)
    text.release(32 * MIB + 1)
    assert text.peak == 64 * MIB
