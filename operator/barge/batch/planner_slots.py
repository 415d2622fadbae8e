"""Planning slots: how many jobs plan at once in the operator, shared by every engine loop and fair between tenants.

Why: each plan runs a planner process (memory, CPU), so the operator plans at most `total` jobs at once. These
slots were a semaphore per engine loop (4 each, jobs hashed to loops), first come first served: one tenant's 8
jobs with an input that never answers held all of them, and every other tenant's new jobs waited an hour per
attempt (review 3, H7). Now:

| rule        | what it does                                                                            |
| ----------- | --------------------------------------------------------------------------------------- |
| one pool    | `total` slots for the whole operator, whichever engine loop a job runs on               |
| a cap       | a tenant holds at most `per_tenant` of them at once: the others always have the rest    |
| fair order  | a freed slot goes to the waiting job whose tenant holds the fewest slots, then the      |
|             | one that has waited longest: tenants take turns, one tenant's 100 jobs do not go first  |

A slot held by a stalled input is also given back when the read times out (batch/plan_input.py). Jobs on several
loops (threads) wait here: the waiting, waking and cancelling are batch/gate.py's, this module only picks.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

from barge.batch.gate import Gate, Waiter


class PlannerSlots(Gate):
    def __init__(self, total: int, per_tenant: int) -> None:
        super().__init__()
        self.total = total
        self.per_tenant = max(1, min(per_tenant, total))
        self._held: dict[str, int] = {}

    def held(self) -> dict[str, int]:
        """Slots held per tenant now."""
        with self._lock:
            return dict(self._held)

    @contextlib.asynccontextmanager
    async def hold(self, tenant: str) -> AsyncIterator[None]:
        """A slot for one plan of `tenant`'s, waited for in turn (module docstring)."""
        waiter = await self._enter(tenant, 1)
        try:
            yield
        finally:
            self._leave(waiter)

    def _pick(self) -> Waiter | None:
        """The fewest-held tenant's longest waiter under its cap, while a slot is free."""
        if sum(self._held.values()) >= self.total:
            return None
        eligible = [w for w in self._waiting if self._held.get(w.key, 0) < self.per_tenant]
        return min(eligible, key=lambda w: (self._held.get(w.key, 0), w.seq), default=None)

    def _take(self, waiter: Waiter) -> None:
        self._held[waiter.key] = self._held.get(waiter.key, 0) + 1

    def _free(self, waiter: Waiter) -> None:
        left = self._held.get(waiter.key, 0) - 1
        if left > 0:
            self._held[waiter.key] = left
        else:
            self._held.pop(waiter.key, None)
