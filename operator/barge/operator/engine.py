"""The engine loops: job steps run here, on event loops of their own threads, never on Kopf's.

A job step mixes provider calls (async) with ledger calls and planning work that are synchronous: on Kopf's loop
each of them stalls every watch, status patch, event and peering keep-alive of the operator. So the Kopf side
(admission, Secrets, status) stays on Kopf's loop and only the engine part of a step (JobRunner, the provider
clients) is handed to an engine loop. A job always lands on the same engine loop (by a hash of its key), so its
per-job guard lock and its provider clients live on one loop; its delete handler runs there too.

Cancelling the caller (Kopf stopping a daemon) cancels the step on the engine loop and waits until it has
unwound (a batch create in flight is still recorded: JobRunner shields it).
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import threading
import zlib
from collections.abc import Awaitable, Callable
from typing import TypeVar

from barge.batch.planner_slots import PlannerSlots
from barge.operator.cache import Clients, ClientSpec
from barge.operator.looplag import Lag
from barge.providers import BatchProvider

T = TypeVar("T")
THREADS = 2
"""Engine loops (threads). SQLite and the GIL serialise most of the work; a second loop overlaps the waits."""
PLANNERS = 4
"""Planning slots per engine loop: each plan runs a planner process (~30 MB, CPU-bound), and 2,000 jobs created
at once would otherwise start 2,000 of them (the machine ran out of memory). The THREADS x PLANNERS slots are
one pool for the operator, whichever loop a job runs on, handed out fairly between tenants
(batch/planner_slots.py)."""
PLANNERS_PER_TENANT = PLANNERS
"""Planning slots one tenant may hold at once: half of them, so one tenant's stalled inputs never hold all (H7)."""


class EngineLoop:
    def __init__(
        self, name: str, build: Callable[[ClientSpec], BatchProvider], planning: PlannerSlots | None = None
    ) -> None:
        self.name = name
        self.loop = asyncio.new_event_loop()
        self.clients = Clients(build)
        self.planning = planning or PlannerSlots(PLANNERS, PLANNERS_PER_TENANT)
        """The operator's planning slots, shared by every loop: `planning.hold(tenant)` around a step that plans
        (operator/jobs.py)."""
        self.lag = Lag()
        self._ready = threading.Event()
        self.thread = threading.Thread(target=self._run, name=f"barge-{name}", daemon=True)
        self.thread.start()
        self._ready.wait()

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        watch = self.loop.create_task(self.lag.watch())
        self.loop.call_soon(self._ready.set)
        self.loop.run_forever()
        watch.cancel()
        self.loop.run_until_complete(asyncio.gather(watch, return_exceptions=True))
        self.loop.run_until_complete(self.clients.close())
        self.loop.close()

    async def call(self, work: Callable[[EngineLoop], Awaitable[T]]) -> T:
        """Run `work(this loop)` on this loop (in a copy of the caller's context: Kopf's event posting works there)
        and return its result here."""
        caller = asyncio.get_running_loop()
        done: asyncio.Future[T] = caller.create_future()
        context = contextvars.copy_context()
        task: list[asyncio.Task[T]] = []

        def deliver(finished: asyncio.Task[T]) -> None:
            def settle() -> None:
                if done.done():
                    return
                if finished.cancelled():
                    done.cancel()
                elif (exc := finished.exception()) is not None:
                    done.set_exception(exc)
                else:
                    done.set_result(finished.result())

            if not caller.is_closed():
                caller.call_soon_threadsafe(settle)

        def start() -> None:
            task.append(self.loop.create_task(_coro(work, self), context=context))
            task[0].add_done_callback(deliver)

        self.loop.call_soon_threadsafe(start)
        try:
            return await asyncio.shield(done)
        except asyncio.CancelledError:
            self.loop.call_soon_threadsafe(lambda: task[0].cancel())  # `start` ran before: callbacks keep order
            with contextlib.suppress(BaseException):  # its outcome is moot: the caller was cancelled
                await done  # the step unwinds (and records a create in flight) before the caller goes on
            raise

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(30)


async def _coro(work: Callable[[EngineLoop], Awaitable[T]], loop: EngineLoop) -> T:
    return await work(loop)


class Engine:
    """THREADS engine loops; a job's work always goes to the same one."""

    def __init__(self, build: Callable[[ClientSpec], BatchProvider], threads: int = THREADS) -> None:
        self.planning = PlannerSlots(threads * PLANNERS, PLANNERS_PER_TENANT)
        self.loops = [EngineLoop(f"engine-{n}", build, self.planning) for n in range(threads)]

    def loop_for(self, key: str) -> EngineLoop:
        return self.loops[zlib.crc32(key.encode()) % len(self.loops)]

    async def call(self, key: str, work: Callable[[EngineLoop], Awaitable[T]]) -> T:
        return await self.loop_for(key).call(work)

    @property
    def lags(self) -> dict[str, Lag]:
        return {loop.name: loop.lag for loop in self.loops}

    def built(self) -> int:
        return sum(loop.clients.built for loop in self.loops)

    def stop(self) -> None:
        for loop in self.loops:
            loop.stop()
