"""A gate that jobs on several engine loops (threads) wait at, granted in an order its subclass picks.

Why one gate: the planner slots (fair between tenants, batch/planner_slots.py) and the planner memory (in arrival
order within the container's limit, batch/memory.py) both let coroutines of several event loops wait for a share of
something, and each had its own copy of the same waiting, waking and cancelling. The parts that are easy to get
wrong live here once:

| step      | what the gate does                                                                            |
| --------- | --------------------------------------------------------------------------------------------- |
| wait      | the waiter joins the queue under a plain lock held briefly; grants are tried at once          |
| grant     | `_pick` names the next waiter that may go now; it is woken on its own loop                    |
|           | (`call_soon_threadsafe`); one whose loop is closed is dropped, never granted (nothing leaks)  |
| cancelled | a waiter cancelled while queued leaves the queue; one cancelled after its grant gives it back |
| release   | the subclass's `_free` undoes `_take`, then grants are tried again                            |
"""

from __future__ import annotations

import asyncio
import itertools
import threading
from dataclasses import dataclass, field


@dataclass(eq=False)
class Waiter:
    """One coroutine waiting at a gate: `key` (a tenant) and `need` (bytes, slots) are the subclass's to read."""

    key: str
    need: int
    seq: int
    loop: asyncio.AbstractEventLoop
    future: asyncio.Future[None] = field(repr=False)
    granted: bool = False


def _wake(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


class Gate:
    """Cross-loop waiting with a subclass's grant order (module docstring). Subclasses implement `_pick`, `_take`
    and `_free`, all called with `self._lock` held."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._waiting: list[Waiter] = []
        self._seq = itertools.count()

    def waiting(self) -> int:
        with self._lock:
            return len(self._waiting)

    def _pick(self) -> Waiter | None:
        """The waiter to grant now, or None while none may go."""
        raise NotImplementedError

    def _take(self, waiter: Waiter) -> None:
        """Account for a grant."""
        raise NotImplementedError

    def _free(self, waiter: Waiter) -> None:
        """Undo `_take` (the grant is given back)."""
        raise NotImplementedError

    async def _enter(self, key: str, need: int) -> Waiter:
        """Wait for a grant; the returned waiter is given to `_leave` exactly once."""
        loop = asyncio.get_running_loop()
        waiter = Waiter(key, need, next(self._seq), loop, loop.create_future())
        with self._lock:
            self._waiting.append(waiter)
            self._dispatch()
        try:
            await waiter.future
        except BaseException:  # cancelled while waiting (a daemon stopped): never keep a grant made meanwhile
            with self._lock:
                if waiter.granted:
                    self._free(waiter)
                    self._dispatch()
                else:
                    self._waiting.remove(waiter)
            raise
        return waiter

    def _leave(self, waiter: Waiter) -> None:
        with self._lock:
            self._free(waiter)
            self._dispatch()

    def _dispatch(self) -> None:
        """Grant in `_pick`'s order while it names someone (the lock is held)."""
        while (chosen := self._pick()) is not None:
            self._waiting.remove(chosen)
            try:
                chosen.loop.call_soon_threadsafe(_wake, chosen.future)
            except RuntimeError:  # its loop is closed: nobody is left to take the grant
                continue
            chosen.granted = True
            self._take(chosen)
