"""The synchronous path: leftovers at the deadline (and engine pools) go request by request.

Bounded concurrency, a token bucket for requests and tokens per minute, and Retry-After honoured for every
worker at once: a 429 pauses the whole path, because twenty callers each getting a 429 help nobody.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass

from barge.providers.base import BatchProvider, Outcome, Request, Result


class RateLimiter:
    """Token buckets for requests/minute and tokens/minute (0 = unlimited), plus a shared pause."""

    def __init__(
        self,
        requests_per_minute: int,
        tokens_per_minute: int,
        clock: Callable[[], float] = time.monotonic,
        burst_seconds: float = 60.0,
    ) -> None:
        """`burst_seconds` of rate may be spent at once. A provider that counts over a sliding minute sees at most
        (burst + 60 s) of rate in any minute, so a replica that must never exceed its share uses a small burst."""
        self.rpm = requests_per_minute
        self.tpm = tokens_per_minute
        self.clock = clock
        self._burst = burst_seconds / 60
        self._requests = max(1.0, requests_per_minute * self._burst)
        self._tokens = tokens_per_minute * self._burst
        self._stamp = clock()
        self._paused_until = 0.0
        self._lock = asyncio.Lock()
        self.waited = 0.0

    def pause(self, seconds: float) -> None:
        self._paused_until = max(self._paused_until, self.clock() + seconds)

    def _refill(self) -> None:
        now = self.clock()
        elapsed = now - self._stamp
        self._stamp = now
        if self.rpm:
            self._requests = min(max(1.0, self.rpm * self._burst), self._requests + elapsed * self.rpm / 60)
        if self.tpm:
            self._tokens = min(self.tpm * self._burst, self._tokens + elapsed * self.tpm / 60)

    async def acquire(self, tokens: int) -> None:
        # A request larger than the bucket waits for a full bucket and leaves it in debt, so the long-run rate
        # stays exact and one huge request never waits forever.
        if not self.rpm and not self.tpm and self._paused_until <= self.clock():
            return  # unlimited and not paused: nothing to wait for (the common case of an engine pool)
        need = min(tokens, self.tpm * self._burst) if self.tpm else 0
        async with self._lock:
            while True:
                self._refill()
                wait = max(0.0, self._paused_until - self.clock())
                if self.rpm and self._requests < 1:
                    wait = max(wait, (1 - self._requests) * 60 / self.rpm)
                if self.tpm and self._tokens < need:
                    wait = max(wait, (need - self._tokens) * 60 / self.tpm)
                if wait <= 0:
                    if self.rpm:
                        self._requests -= 1
                    if self.tpm:
                        self._tokens -= tokens
                    return
                self.waited += wait
                await asyncio.sleep(wait)


@dataclass(frozen=True)
class SyncItem:
    custom_id: str
    user: str
    est_tokens: int


async def run_sync(
    items: Iterable[SyncItem],
    provider: BatchProvider,
    build: Callable[[str, str], Request],
    *,
    concurrency: int,
    limiter: RateLimiter,
    max_tokens: int,
    tries: int,
    on_result: Callable[[Result], Awaitable[None]],
    halted: Callable[[], bool] = lambda: False,
) -> None:
    """Call the provider for every item; transient answers are retried up to `tries` times, after the
    Retry-After the provider asked for. Fatal errors propagate (they stop the job)."""
    queue: asyncio.Queue[SyncItem] = asyncio.Queue()
    for item in items:
        queue.put_nowait(item)

    async def worker() -> None:
        while not halted():  # the job is being deleted: no further call is paid for
            try:
                item = queue.get_nowait()
            except asyncio.QueueEmpty:
                return
            result = Result(item.custom_id, Outcome.TRANSIENT)
            for attempt in range(tries):
                await limiter.acquire(item.est_tokens + max_tokens)
                result = await provider.complete(build(item.custom_id, item.user))
                if result.outcome is not Outcome.TRANSIENT:
                    break
                if result.retry_after is not None:
                    limiter.pause(result.retry_after)
                elif attempt + 1 < tries:
                    await asyncio.sleep(min(30.0, 0.5 * 2**attempt))
            await on_result(result)

    async with asyncio.TaskGroup() as group:
        for _ in range(max(1, concurrency)):
            group.create_task(worker())
