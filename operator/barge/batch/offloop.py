"""A job's blocking storage work, off its engine loop: in a thread of its own, waited for by the step.

Why: a job's steps run on an engine loop shared with about half of all jobs (operator/engine.py). Writing a job's
results.jsonl and failures.jsonl is synchronous (local files, s3fs, adlfs): a multi-GB result to a slow endpoint
or a stalled NFS mount blocked that loop for minutes, and every job on it stopped polling, ingesting and falling
back meanwhile (review 3, M10). In a thread the loop goes on. Not the loop's default executor: a write blocked for
ever keeps its own thread, never one that `asyncio.to_thread` callers on the loop need (the lesson of H7).

The step waits for the thread even when it is cancelled (a daemon stopping), as it waited for the synchronous call
before: the work never outlives the step that started it, so two steps never write the same outputs at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")


def _settle(future: asyncio.Future[Any], result: Any, error: BaseException | None) -> None:
    if future.done():
        return
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(result)


async def run(name: str, work: Callable[..., T], *args: Any) -> T:
    """`work(*args)` in a new thread named `barge-<name>`; its result or error here."""
    loop = asyncio.get_running_loop()
    future: asyncio.Future[T] = loop.create_future()

    def body() -> None:
        result: Any = None
        error: BaseException | None = None
        try:
            result = work(*args)
        except BaseException as exc:  # handed to the step, which classifies it
            error = exc
        with contextlib.suppress(RuntimeError):  # the loop is closed: nobody waits any more
            loop.call_soon_threadsafe(_settle, future, result, error)

    threading.Thread(target=body, name=f"barge-{name}", daemon=True).start()
    try:
        return await asyncio.shield(future)
    except asyncio.CancelledError:
        with contextlib.suppress(BaseException):
            await future  # the write finishes (or fails) before the cancelled step unwinds
        raise
