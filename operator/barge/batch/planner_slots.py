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
loops (threads) wait here, so the state is guarded by a plain lock held briefly and a waiter is woken on its own
loop (`call_soon_threadsafe`).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import threading
from collections.abc import AsyncIterator
from dataclasses import dataclass


@dataclass
class _Waiter:
    tenant: str
    seq: int
    loop: asyncio.AbstractEventLoop
    future: asyncio.Future[None]
    granted: bool = False


def _wake(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


class PlannerSlots:
    def __init__(self, total: int, per_tenant: int) -> None:
        self.total = total
        self.per_tenant = max(1, min(per_tenant, total))
        self._lock = threading.Lock()
        self._held: dict[str, int] = {}
        self._waiting: list[_Waiter] = []
        self._seq = itertools.count()

    def held(self) -> dict[str, int]:
        """Slots held per tenant now."""
        with self._lock:
            return dict(self._held)

    def waiting(self) -> int:
        with self._lock:
            return len(self._waiting)

    @contextlib.asynccontextmanager
    async def hold(self, tenant: str) -> AsyncIterator[None]:
        """A slot for one plan of `tenant`'s, waited for in turn (module docstring)."""
        loop = asyncio.get_running_loop()
        waiter = _Waiter(tenant, next(self._seq), loop, loop.create_future())
        with self._lock:
            self._waiting.append(waiter)
            self._dispatch()
        try:
            await waiter.future
        except BaseException:  # cancelled while waiting (a daemon stopped): never keep a slot granted meanwhile
            with self._lock:
                if waiter.granted:
                    self._release(tenant)
                else:
                    self._waiting.remove(waiter)
            raise
        try:
            yield
        finally:
            with self._lock:
                self._release(tenant)

    def _dispatch(self) -> None:
        """Grant free slots to waiters in the fair order (the caller holds the lock)."""
        while sum(self._held.values()) < self.total:
            eligible = [w for w in self._waiting if self._held.get(w.tenant, 0) < self.per_tenant]
            if not eligible:
                return
            chosen = min(eligible, key=lambda w: (self._held.get(w.tenant, 0), w.seq))
            self._waiting.remove(chosen)
            try:
                chosen.loop.call_soon_threadsafe(_wake, chosen.future)
            except RuntimeError:  # its loop is closed: nobody is left to take the slot
                continue
            chosen.granted = True
            self._held[chosen.tenant] = self._held.get(chosen.tenant, 0) + 1

    def _release(self, tenant: str) -> None:
        left = self._held.get(tenant, 0) - 1
        if left > 0:
            self._held[tenant] = left
        else:
            self._held.pop(tenant, None)
        self._dispatch()
