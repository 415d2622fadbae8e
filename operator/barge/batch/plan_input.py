"""A job's input as its planner reads it: in a thread of the plan's own, with an idle timeout; and the two halves
of the planner pipeline (feeding the child, collecting its answers) run so that either one's failure stops both.

Why a thread of its own: the input is read by blocking calls (open, read) on storage the tenant controls. In the
event loop's default executor (`asyncio.to_thread`) one input that never answers (a FIFO nobody writes, a hung
NFS mount, a trickling server) kept a thread of that executor for ever, and every plan retried took another,
until `to_thread` hung for every job on the loop (review 3, H7). Here the plan's reader is its own thread, and a
read that gives nothing for `idle_seconds` fails the plan (`InputStalled`, a StorageError: the job's fault reason
is StorageError, retried) instead of holding its planning slot for the hour of the wall limit. What the thread
was blocked in is finished by the kernel or never: a FIFO or a device is refused before it is opened
(barge/storage/local.py opens with O_NONBLOCK and checks fstat), so what can still hang is a mount or a server
that stops answering; such a thread stays blocked (nothing in user space can end it) but holds no slot.

Why together: the parent writes lines to the child's stdin while it reads the child's answers from its stdout.
When the reading half failed (a ledger write error: a full disk, a PostgreSQL restart) it stopped reading, the
child blocked on its full stdout, the feeding half on the child's full stdin, and only the wall limit (an hour)
ended it, as "planning took longer than" (M12). `together` cancels the feeding half when the reading half fails
and raises that error, which the engine classifies (LedgerError) like any other.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Coroutine, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from barge.storage import StorageError

T = TypeVar("T")
READ_SECONDS = 300.0
"""How long a read of the input may give nothing before the plan fails (PlanLimits.read_seconds)."""


class InputStalled(StorageError):
    """The input gave nothing for `PlanLimits.read_seconds`."""


class InputReader:
    """Chunks of a job's input lines (`take(source)` per chunk), read in the plan's own thread."""

    def __init__(
        self,
        lines: Callable[[], Iterator[tuple[int, bytes]]],
        take: Callable[[Iterator[tuple[int, bytes]]], list[tuple[int, bytes]]],
        idle_seconds: float = READ_SECONDS,
    ) -> None:
        self.lines, self.take, self.idle = lines, take, idle_seconds
        self.pool = ThreadPoolExecutor(1, thread_name_prefix="barge-input")
        self.source: Iterator[tuple[int, bytes]] | None = None

    def _next(self) -> list[tuple[int, bytes]]:
        if self.source is None:
            self.source = self.lines()  # opened in the thread too: opening may be what blocks
        return self.take(self.source)

    async def next(self) -> list[tuple[int, bytes]]:
        """The next chunk; [] at the end of the input. InputStalled when the input gives nothing for `idle` s."""
        read = asyncio.wrap_future(self.pool.submit(self._next))
        read.add_done_callback(_consume)  # a read left behind (timed out, cancelled) may still end: moot
        try:
            return await asyncio.wait_for(asyncio.shield(read), self.idle)
        except TimeoutError:
            raise InputStalled(
                f"the input gave nothing for {self.idle:.0f} s (a FIFO, or a mount or server that stopped answering)"
            ) from None

    def close(self) -> None:
        """Never waits: the input is closed in the reader's thread after its last read, which a read blocked for
        ever never reaches (that thread is then the one left behind, see the module docstring)."""
        self.pool.submit(self._close)
        self.pool.shutdown(wait=False)

    def _close(self) -> None:
        source, self.source = self.source, None
        close = getattr(source, "close", None)
        if close is not None:
            close()  # a generator's close runs its `with`: the file or stream is closed


def _consume(future: asyncio.Future[Any]) -> None:
    if not future.cancelled():
        future.exception()


async def together(feeding: Coroutine[Any, Any, None], collecting: asyncio.Task[T]) -> T:
    """Run the feeding half until it ends while `collecting` runs; whichever fails first stops the other, and its
    error is raised. A feeding half refused by a child that stopped reading (a broken pipe) is not a failure: the
    child's answer or exit code says why."""
    feeder = asyncio.ensure_future(feeding)
    try:
        await asyncio.wait({feeder, collecting}, return_when=asyncio.FIRST_EXCEPTION)
        if collecting.done() and not collecting.cancelled() and collecting.exception() is not None:
            return collecting.result()  # raises the collecting half's error
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            await feeder
        return await collecting
    finally:
        if not feeder.done():
            feeder.cancel()
            with contextlib.suppress(BaseException):
                await feeder
