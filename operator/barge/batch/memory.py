"""The operator's memory, shared by every job: what planners and ingestions may hold inside the container's limit.

Why: the operator, its planner server, its planner processes and every job's ingestion share one cgroup, and the
kernel kills the largest process of it when the sum passes the limit, usually the operator itself, which then
re-plans and re-ingests the same jobs (REVIEW-3 C2, H8). Each of them was bounded per process or per chunk, never
together. Here:

| what                  | rule                                                                                      |
| --------------------- | ----------------------------------------------------------------------------------------- |
| the limit             | cgroup v2 `memory.max`, else v1 `memory.limit_in_bytes`; none (a laptop): no planner cap   |
| planners              | each counts its address-space limit (`BARGE_PLANNER_MEMORY_MB`); one starts only while     |
|                       | the operator's reserve (`BARGE_OPERATOR_RESERVE_MB`) plus the running ones plus it fit the |
|                       | limit; the others wait in arrival order; none fits at all: planning is refused, retried    |
|                       | the reserve grows with the operator: never less than its resident memory now plus         |
|                       | `ABOVE_RESIDENT` (the jobs it watches cost it ~0.25 MiB each: 768 MB at 2,000 jobs)       |
| ingestion             | result text held by all ingestions at once is `INGEST_TEXT` at most: past it, each commits |
|                       | its chunk at its next page instead of growing it (smaller chunks, never more memory)       |

Engine loops are threads: planners wait at batch/gate.py's gate, the text budget is a plain lock held briefly.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path

from barge.batch.gate import Gate, Waiter
from barge.batch.render import PlanError

CGROUP = Path("/sys/fs/cgroup")
#: A v1 limit at or above this is "no limit" (the kernel reports 2**63 rounded down to a page).
UNLIMITED = 1 << 60
#: Result text (characters) all ingestions of the process may hold at once: two full chunks (ingest.CHUNK_BYTES).
INGEST_TEXT = 32 << 20
#: What the operator may still grow by beyond its resident memory when a planner starts: the planner server
#: (~55 MiB, a process of its own), one large ingestion (~+100) and one synchronous pass (~+30), rounded up
#: (docs/how-to/sizing.md). An operator after its imports (~190 MiB) plus this is the default reserve, 384 MiB;
#: an operator watching 2,000 jobs (768 MB, bench_shards) needs more, and its planners must not take it.
ABOVE_RESIDENT = 192 << 20


def resident(status: Path = Path("/proc/self/status")) -> int:
    """This process's resident memory in bytes (VmRSS), 0 where /proc cannot say."""
    try:
        for line in status.read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return 0
    return 0


def container_limit(root: Path = CGROUP) -> int | None:
    """The memory limit of this process's cgroup in bytes: v2 `memory.max`, else v1 `memory.limit_in_bytes`
    (the memory controller mounted at `memory/` or at the root); None when there is none or it cannot be read."""
    for path in (root / "memory.max", root / "memory" / "memory.limit_in_bytes", root / "memory.limit_in_bytes"):
        try:
            text = path.read_text().strip()
        except OSError:
            continue
        if text == "max":
            return None
        try:
            value = int(text)
        except ValueError:
            continue
        return None if value >= UNLIMITED else value
    return None


def planner_slots(limit: int | None, reserve: int, per_planner: int, wanted: int) -> int:
    """How many planners fit beside the operator: (limit - reserve) // per_planner, at most `wanted`; `wanted`
    when there is no limit."""
    if limit is None:
        return wanted
    return max(0, min(wanted, (limit - reserve) // max(1, per_planner)))


class PlannerMemory(Gate):
    """Admission of planner processes by the memory they may use (module docstring): in arrival order, each
    waiting until its need fits the budget (the waiting itself is batch/gate.py's)."""

    def __init__(self, limit: Callable[[], int | None] = container_limit, held: Callable[[], int] = resident) -> None:
        super().__init__()
        self._limit = limit
        self._held = held
        self._used = 0
        self._budget: int | None = None
        self.peak = 0
        """The most planner memory granted at once (for tests and the sizing rule)."""

    def used(self) -> int:
        with self._lock:
            return self._used

    def _pick(self) -> Waiter | None:
        if not self._waiting:
            return None
        head = self._waiting[0]
        return head if self._budget is None or self._used + head.need <= self._budget else None

    def _take(self, waiter: Waiter) -> None:
        self._used += waiter.need
        self.peak = max(self.peak, self._used)

    def _free(self, waiter: Waiter) -> None:
        self._used -= waiter.need

    async def acquire(self, need: int, reserve: int) -> Callable[[], None]:
        """Wait until a planner of `need` bytes fits beside `reserve` bytes for the operator and the planners
        running; returns the release (call it once the process is reaped). Raises PlanError (not permanent) when
        it can never fit."""
        limit = self._limit()
        held = self._held() if limit is not None else 0
        grown = held + ABOVE_RESIDENT > reserve
        reserve = max(reserve, held + ABOVE_RESIDENT)
        budget = None if limit is None else limit - reserve
        if limit is not None and budget is not None and need > budget:
            why = (
                f"the operator already holds {held >> 20} MiB (with {ABOVE_RESIDENT >> 20} MiB of room kept above "
                "it): raise the limit, or spread the namespaces over more operators (the chart's sharding.shards)"
                if grown
                else f"its reserve {reserve >> 20} MiB (BARGE_OPERATOR_RESERVE_MB): raise the limit, or lower "
                "one of them"
            )
            raise PlanError(
                f"no room for a planner: the operator's memory limit is {limit >> 20} MiB, each planner may use "
                f"{need >> 20} MiB (BARGE_PLANNER_MEMORY_MB), and {why}",
                permanent=False,
            )
        with self._lock:
            self._budget = budget
        waiter = await self._enter("", need)
        released = False

        def release() -> None:
            nonlocal released
            if not released:
                released = True
                self._leave(waiter)

        return release


class TextBudget:
    """Result text held by every ingestion of the process at once (module docstring)."""

    def __init__(self, limit: int = INGEST_TEXT) -> None:
        self.limit = limit
        self._lock = threading.Lock()
        self._held = 0
        self.peak = 0

    def add(self, chars: int) -> bool:
        """`chars` more are held; True when all ingestions together hold the limit or more (commit now)."""
        with self._lock:
            self._held += chars
            self.peak = max(self.peak, self._held)
            return self._held >= self.limit

    def release(self, chars: int) -> None:
        with self._lock:
            self._held -= chars


PLANNERS = PlannerMemory()
"""The process's planner admission (the planner server forks every planner, so there is one per process)."""
INGESTING = TextBudget()
"""The process's ingestion text budget."""
