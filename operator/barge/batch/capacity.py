"""What a job may write into the shared ledger while it is planned: the admin's ledger limits, applied to the plan.

Why: every tenant's jobs write to one ledger (by default a SQLite file on the chart's 1 GiB volume), and a full
ledger stops every tenant. A 1 MiB ConfigMap of newlines wrote a row per blank line, 209 MiB that outlived the
job, and five such jobs filled the volume (REVIEW-3 C1). The limits are the policy's `ledger` section
(barge/limits.py, where the defaults' arithmetic is); this module is where a plan meets them.

| when                      | check                                             | over it                            |
| ------------------------- | ------------------------------------------------- | ---------------------------------- |
| before any line is read   | the volume's free bytes >= minFreeBytes           | Admitted=False LedgerFull, retried |
|                           | the tenant's rows < maxItemsPerTenant, and room   | Admitted=False ItemLimit, retried  |
|                           | for what an earlier try of this job needed        | (no re-read until there is room)   |
|                           | an earlier try needed <= maxItemsPerJob           | Admitted=False ItemLimit, for good |
| every input line          | lines <= maxItemsPerJob and <= the tenant's room  | the plan stops: ItemLimit          |
| every READ_CHECK lines    | the volume's free bytes >= minFreeBytes           | the plan stops: LedgerFull         |
| every write of the plan   | free bytes - 2 x the write's bytes >= the floor   | the plan stops: LedgerFull         |
| invalid lines (the child) | the first listedInvalidLines become rows          | the rest counted (jobs.unlisted)   |

A plan that stops for any reason removes every row it wrote (ledger/planned.py `discard`, in small transactions
that fit in the space the floor keeps): a job is planned whole or not at all. The lines a refused try saw are kept
in its job row (`total`, while `planned` is false), so that the next step refuses it without reading its input
again until it can fit.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace

from barge.batch import planner
from barge.ledger import Ledger, space
from barge.ledger.planned import discard
from barge.limits import LedgerLimits, shown
from barge.policy import Refused

Lines = Callable[[], Iterator[tuple[int, bytes]]]
#: Free space is asked after this many lines read (a statvfs), and before every write of the plan, which must fit
#: WRITE_FACTOR times above the floor: SQLite writes a transaction to its WAL, then into the database file.
READ_CHECK = 2000
WRITE_FACTOR = 2
FreeBytes = Callable[[Ledger], int | None]


class _Stop(Exception):
    """Raised inside the planner's input (in its reading thread) to stop the plan; turned into a `Refused`."""

    def __init__(self, refusal: Refused, seen: int) -> None:
        super().__init__(refusal.message)
        self.refusal = refusal
        self.seen = seen


@dataclass(frozen=True)
class Planned:
    rows: int
    """Rows the plan wrote (valid items and the listed invalid lines)."""
    lines: int
    """Input lines read."""

    @property
    def unlisted(self) -> int:
        """Invalid lines counted, not stored."""
        return self.lines - self.rows


def _low_space(free: int, limits: LedgerLimits, write: int = 0) -> Refused:
    floor = shown(limits.min_free_bytes)
    if write:
        where = f"and the plan's next write needs {shown(write)} above the {floor}"
        then = "this plan was stopped and removed, and is tried again once space is freed"
    else:
        where, then = f"under the {floor}", "no job is planned until space is freed"
    return Refused(
        "LedgerFull",
        f"the ledger's volume has {shown(free)} free, {where} the admin keeps free (policy ledger.minFreeBytes): "
        f"{then}; running jobs go on",
    )


def _over_job(limits: LedgerLimits) -> Refused:
    return Refused(
        "ItemLimit",
        f"the input has more than {limits.max_items_per_job} lines, the most one job may have (policy "
        "ledger.maxItemsPerJob): split it into several jobs",
    )


def _over_tenant(tenant: str, held: int, needed: int, limits: LedgerLimits) -> Refused:
    what = f"this job needs at least {needed}" if needed else "this job needs more"
    return Refused(
        "ItemLimit",
        f"tenant {tenant!r} holds {held} items in the ledger and {what}, over the {limits.max_items_per_tenant} "
        "its jobs may hold together (policy ledger.maxItemsPerTenant): retried once deleted jobs are purged",
    )


def check_before(
    ledger: Ledger, key: str, tenant: str, limits: LedgerLimits, free_bytes: FreeBytes = space.free_bytes
) -> int:
    """Refuse a plan that cannot fit before reading a byte of input; returns the lines the job may have."""
    free = free_bytes(ledger)
    if free is not None and free < limits.min_free_bytes:
        raise _low_space(free, limits)
    needed = int((ledger.job(key) or {}).get("total") or 0)  # what an earlier refused try of this job saw
    if needed > limits.max_items_per_job:
        raise _over_job(limits)
    held = space.tenant_items(ledger, tenant, but=key)
    room = limits.max_items_per_tenant - held
    if room <= 0 or needed > room:
        raise _over_tenant(tenant, held, needed, limits)
    return min(limits.max_items_per_job, room)


def _counted(
    lines: Lines,
    allowed: int,
    over: Callable[[int], Refused],
    space_left: Callable[[], Refused | None],
    seen: list[int],
) -> Lines:
    """The job's input as the planner reads it, counted into `seen[0]`; past `allowed` lines or the free-space
    floor it raises `_Stop` in the planner's reading thread, which ends the plan."""

    def read() -> Iterator[tuple[int, bytes]]:
        seen[0] = 0
        for item in lines():
            seen[0] += 1
            if seen[0] > allowed:
                raise _Stop(over(seen[0]), seen[0])
            if seen[0] % READ_CHECK == 0 and (refusal := space_left()) is not None:
                raise _Stop(refusal, seen[0])
            yield item

    return read


async def plan(
    key: str,
    what: planner.PlanInput,
    lines: Lines,
    ledger: Ledger,
    limits: LedgerLimits,
    plan_limits: planner.PlanLimits | None = None,
    free_bytes: FreeBytes = space.free_bytes,
) -> Planned:
    """`planner.plan` within the ledger limits: the rows and lines of a whole plan, or `Refused` (ItemLimit,
    LedgerFull) with nothing of the job left in the ledger. Any other failure of the plan removes its rows too."""
    allowed = await asyncio.to_thread(check_before, ledger, key, what.tenant, limits, free_bytes)
    plan_limits = replace(plan_limits or planner.PlanLimits(), listed_invalid=limits.listed_invalid_lines)

    def over(n: int) -> Refused:
        if n > limits.max_items_per_job:
            return _over_job(limits)
        return _over_tenant(what.tenant, space.tenant_items(ledger, what.tenant, but=key), n, limits)

    def space_left() -> Refused | None:
        free = free_bytes(ledger)
        return _low_space(free, limits) if free is not None and free < limits.min_free_bytes else None

    seen = [0]

    def before_write(size: int) -> None:
        """In the plan's writer thread: room for this write twice (SQLite's WAL, then the database) above the floor."""
        free = free_bytes(ledger)
        if free is not None and free - WRITE_FACTOR * size < limits.min_free_bytes:
            raise _Stop(_low_space(free, limits, WRITE_FACTOR * size), seen[0])

    counted = _counted(lines, allowed, over, space_left, seen)
    try:
        rows = await planner.plan(key, what, counted, ledger, plan_limits, before_write=before_write)
    except _Stop as stop:
        await asyncio.to_thread(_undo, ledger, key, stop.seen if stop.refusal.policy == "ItemLimit" else 0)
        raise stop.refusal from None
    except BaseException:
        await asyncio.shield(asyncio.to_thread(_undo, ledger, key, 0))
        raise
    return Planned(rows, seen[0])


def _undo(ledger: Ledger, key: str, needed: int) -> None:
    """Remove the rows of a plan that did not finish; remember how many lines a refused one needed at least."""
    discard(ledger, key)
    if needed:
        ledger.set_job(key, total=needed)
