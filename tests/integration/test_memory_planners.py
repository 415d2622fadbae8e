"""Planner processes are counted against the operator container's memory (REVIEW-3 H8).

Each planner may use its address-space limit (BARGE_PLANNER_MEMORY_MB, 256 MiB), and up to 8 ran at once beside an
operator of ~190 MiB in a container of 512 MiB: three hostile jobs holding ~157 MiB each were enough for the kernel
to kill the largest process of the cgroup, usually the operator. Now a planner starts only while the operator's
reserve, the planners running and its own limit fit the cgroup's limit (batch/memory.py), and every planner's
`oom_score_adj` is 1000, so an out-of-memory kill takes a planner first. Real planner processes; the cgroup limit is
the one thing given (a function, as memory.container_limit reads it).
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from barge.batch import memory, planner
from barge.batch.render import PlanError
from barge.ledger import Ledger
from tests.integration.test_planner_server import job

MIB = 1 << 20
SetLimit = Callable[[int], None]
LIMITS = planner.PlanLimits(memory_bytes=256 * MIB, reserve_bytes=384 * MIB)


@pytest.fixture
def container(monkeypatch: pytest.MonkeyPatch) -> SetLimit:
    """Sets the cgroup limit the planners' admission reads, in MiB; the operator's resident memory is that of an
    operator after its imports (190 MiB), not this test process's, which grows with the suite."""

    def set_limit(mib: int) -> None:
        monkeypatch.setattr(memory.PLANNERS, "_limit", lambda: mib * MIB)
        monkeypatch.setattr(memory.PLANNERS, "_held", lambda: 190 * MIB)

    return set_limit


async def test_planners_wait_for_room_in_the_containers_memory(
    tmp_path: Path, container: Callable[[int], None]
) -> None:
    container(384 + 2 * 256)  # the reserve and two planners: the third job waits for one of them to end
    ledger = Ledger(f"sqlite:///{tmp_path / 'ledger.db'}")
    lock = threading.Lock()
    all_in = threading.Event()
    state = {"live": 0, "most": 0}

    def lines_of(k: int) -> Callable[[], Iterator[tuple[int, bytes]]]:
        def lines() -> Iterator[tuple[int, bytes]]:  # read by the parent once its planner is forked
            with lock:
                state["live"] += 1
                state["most"] = max(state["most"], state["live"])
                if state["live"] == 3:
                    all_in.set()
            all_in.wait(3)  # three at once sets it at once; two at once wait here, then go on
            for i in range(50):
                yield i + 1, json.dumps({"id": f"j{k}-{i}", "text": f"claim {i}"}).encode()

        return lines

    async def one(k: int) -> int:
        key = f"ns/memory/{k}"
        ledger.ensure_job(key, "h", tenant="t", model="claude-haiku-4-5")
        try:
            return await planner.plan(key, job(), lines_of(k), ledger, LIMITS)
        finally:
            with lock:
                state["live"] -= 1

    rows = await asyncio.gather(*(one(k) for k in range(3)))
    assert rows == [50, 50, 50]
    assert state["most"] == 2, f"{state['most']} planners ran at once in room for 2"
    assert memory.PLANNERS.used() == 0  # every planner's memory given back


async def test_no_room_for_one_planner_is_refused_not_run(tmp_path: Path, container: SetLimit) -> None:
    container(512)  # the chart's old limit: 384 MiB of reserve leaves no room for a 256 MiB planner
    ledger = Ledger(f"sqlite:///{tmp_path / 'ledger.db'}")
    ledger.ensure_job("ns/memory/x", "h", tenant="t", model="claude-haiku-4-5")
    with pytest.raises(PlanError, match="no room for a planner") as caught:
        await planner.plan("ns/memory/x", job(), lambda: iter([(1, b'{"text": "a"}')]), ledger, LIMITS)
    assert not caught.value.permanent  # the job is retried (the admin may raise the limit), not failed
    assert ledger.counts("ns/memory/x").get("pending", 0) == 0


async def test_planners_are_the_kernels_first_choice_when_memory_runs_out(
    tmp_path: Path, container: Callable[[int], None]
) -> None:
    container(4096)
    ledger = Ledger(f"sqlite:///{tmp_path / 'ledger.db'}")
    ledger.ensure_job("ns/memory/oom", "h", tenant="t", model="claude-haiku-4-5")
    seen: list[str] = []

    def lines() -> Iterator[tuple[int, bytes]]:
        for p in Path("/proc").iterdir():  # the planner is forked before its input is read: the server's child
            try:
                if p.name.isdigit() and int((p / "stat").read_text().rsplit(")", 1)[1].split()[1]) == server_pid:
                    seen.append((p / "oom_score_adj").read_text().strip())
            except (FileNotFoundError, ProcessLookupError, ValueError, IndexError):
                continue
        yield 1, b'{"text": "a"}'

    planner.zygote.SERVER.warm()
    proc = planner.zygote.SERVER._proc
    assert proc is not None
    server_pid = proc.pid
    await planner.plan("ns/memory/oom", job(), lines, ledger, LIMITS)
    assert seen == ["1000"]  # the planner's
    assert _oom_score_adj(server_pid) == "1000"  # the server's


def _oom_score_adj(pid: int) -> str:
    return Path(f"/proc/{pid}/oom_score_adj").read_text().strip()
