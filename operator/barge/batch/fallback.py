"""The synchronous path: leftovers at the deadline (and engine pools) go request by request.

Bounded concurrency, a token bucket for requests and tokens per minute, and Retry-After honoured for every
worker at once: a 429 pauses the whole path, because twenty callers each getting a 429 help nobody.

Memory: the pending items are read from the ledger as the workers take them, a page of `concurrency` at a time
(`send_pending`), so a pass holds about twice its concurrency's payloads whatever the job. Listed whole before the
first call, 5,000 prompts of 50 KB on an engine pool added ~500 MiB to the shared operator for the whole pass
(REVIEW-3 C2). The decisions that need every item (fail them all when `fallback.sync` is off, the budget's cut)
read no payload.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Iterable, Iterator
from dataclasses import dataclass, replace

from barge.batch.budget import Budget
from barge.batch.routing import route
from barge.batch.tier import FLEX, TierChooser
from barge.ledger import ItemUpdate, Ledger
from barge.providers.base import NO_USAGE, BatchProvider, Outcome, Request, Result
from barge.providers.errors import Fatal

Event = Callable[[str, str, str], None]
#: Item changes written per transaction as results arrive, and ids failed per transaction.
WRITE_EVERY = 100
FAIL_PAGE = 1000


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
    attempts: int = 0
    """Tries before this pass (the ledger's count)."""


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
    check: Callable[[Result], Result] | None = None,
    tier: TierChooser | None = None,
) -> None:
    """Call the provider for every item; transient answers are retried up to `tries` times, after the
    Retry-After the provider asked for. Fatal errors propagate (they stop the job). `items` is read lazily, one
    item per free worker: an iterator over the ledger is never read ahead of the calls. `check`: the job's
    responseFormat (batch/structured.py); an invalid output is asked again, within the same `tries`, and the
    item's result carries the usage of every answer it was paid for. `tier`: spec.fallback.serviceTier, asked
    before each call (batch/tier.py); a flex call carries `service_tier: flex`."""
    source = iter(items)

    async def worker() -> None:
        while not halted():  # the job is being deleted: no further call is paid for
            item = next(source, None)
            if item is None:
                return
            result = Result(item.custom_id, Outcome.TRANSIENT)
            paid = NO_USAGE  # usage of the answers that broke the schema before this one
            started, flexed = time.monotonic(), False
            for attempt in range(tries):
                await limiter.acquire(item.est_tokens + max_tokens)
                request = build(item.custom_id, item.user)
                if tier is not None and tier.tier() == FLEX:
                    flexed = True
                    request = replace(request, params={**request.params, "service_tier": FLEX})
                result = await provider.complete(request)
                if check is not None:
                    result = check(result)
                if result.outcome is Outcome.INVALID_OUTPUT and attempt + 1 < tries:
                    paid = paid + result.usage
                    continue
                if result.outcome is not Outcome.TRANSIENT:
                    if paid is not NO_USAGE:
                        result = replace(result, usage=paid + result.usage)
                    break
                if result.retry_after is not None:
                    limiter.pause(result.retry_after)
                elif attempt + 1 < tries:
                    await asyncio.sleep(min(30.0, 0.5 * 2**attempt))
            if tier is not None:
                tier.done(time.monotonic() - started, flex=flexed)
            await on_result(result)

    async with asyncio.TaskGroup() as group:
        for _ in range(max(1, concurrency)):
            group.create_task(worker())


def _pending(ledger: Ledger, job: str, page: int, inflight: dict[str, int]) -> Iterator[SyncItem]:
    """The job's pending items with their payloads, read a page at a time as they are taken; each one's attempts
    noted in `inflight` until its result is written."""
    for _, cid, payload, est_tokens, attempts in ledger.iter_items(
        job, "custom_id, payload, est_tokens, attempts", ("pending",), page_size=page
    ):
        inflight[cid] = int(attempts)
        yield SyncItem(cid, payload, int(est_tokens), int(attempts))


def _fail_all(ledger: Ledger, job: str, error_type: str, reason: str) -> int:
    """Every pending item failed, a page of ids at a time; how many."""
    failed = 0
    page: list[ItemUpdate] = []
    for _, cid in ledger.iter_items(job, "custom_id", ("pending",)):
        page.append(ItemUpdate(cid, "failed", error_type, reason))
        if len(page) >= FAIL_PAGE:
            ledger.apply(job, page)
            failed += len(page)
            page = []
    ledger.apply(job, page)
    return failed + len(page)


def _tier(
    budget: Budget, provider: BatchProvider, count: int, concurrency: int, on_event: Event, clock: Callable[[], float]
) -> TierChooser | None:
    """spec.fallback.serviceTier's chooser for this pass; None at standard, or where the provider has no flex tier
    (said in an event: the pass goes at standard)."""
    setting = budget.spec.fallback.service_tier
    if setting == "standard":
        return None
    if not getattr(provider, "flex_tier", False):
        name = getattr(provider, "name", "this provider")
        on_event(
            "FlexIgnored", f"spec.fallback.serviceTier {setting}: {name} has no flex tier, sent at standard", "Normal"
        )
        return None
    deadline = budget.spec.deadline.timestamp() if budget.spec.deadline is not None else None
    return TierChooser(setting, deadline, count, concurrency, clock=clock)


async def send_pending(
    ledger: Ledger,
    job: str,
    provider: BatchProvider,
    build: Callable[[str, str], Request],
    budget: Budget,
    *,
    sync: bool,
    limits: tuple[int, int, int],
    max_tokens: int,
    tries: int,
    on_event: Event,
    halted: Callable[[], bool] = lambda: False,
    check: Callable[[Result], Result] | None = None,
    clock: Callable[[], float] = time.time,
) -> None:
    """One synchronous pass over the job's pending items: all failed (`deadline_exceeded`) unless `sync`, else
    those the budget allows sent with `limits` (concurrency, requests and tokens per minute), their results
    written as they come (`WRITE_EVERY` per transaction)."""
    count = ledger.estimate_inputs(job, ("pending",))[1]
    if not count:
        return
    if not sync:
        _fail_all(ledger, job, "deadline_exceeded", "deadline reached and spec.fallback.sync is false")
        return
    if budget.spec.budget is not None or budget.tenant is not None:  # the budgets' cut, in line order (ids, estimates)
        rows = [
            (line, cid, None, est, n)
            for line, cid, est, n in ledger.iter_items(job, "custom_id, est_tokens, attempts", ("pending",))
        ]
        count = len(budget.split_sync(rows, on_event))
        del rows
        if not count:
            return
    concurrency, rpm, tpm = limits
    inflight: dict[str, int] = {}
    buffer: list[ItemUpdate] = []
    on_event("FallingBack", f"{count} items through the synchronous path", "Normal")
    tier = _tier(budget, provider, count, concurrency, on_event, clock)

    async def on_result(result: Result) -> None:
        before = inflight.pop(result.custom_id)
        via = FLEX if result.service_tier == FLEX else "sync"  # priced at the tier the answer reports
        change = route(result, before, before + 1, via=via)
        if result.outcome in (Outcome.SUCCEEDED, Outcome.REFUSED, Outcome.INVALID_OUTPUT):
            u = result.usage  # an invalid output ends failed here (the last try): paid for all the same
            change = ItemUpdate(
                change.custom_id,
                change.state,
                change.error_type,
                change.reason,
                change.attempts,
                via,
                None if result.outcome is Outcome.INVALID_OUTPUT else result.text,
                (u.input_tokens, u.output_tokens, u.cache_read_tokens, u.cache_write_tokens),
            )
        buffer.append(change)
        if len(buffer) >= WRITE_EVERY:
            ledger.apply(job, buffer)
            buffer.clear()

    try:
        await run_sync(
            _pending(ledger, job, max(1, concurrency), inflight),
            provider,
            build,
            concurrency=concurrency,
            limiter=RateLimiter(rpm, tpm),
            max_tokens=max_tokens,
            tries=tries,
            on_result=on_result,
            halted=halted,
            check=check,
            tier=tier,
        )
    except* Fatal as group:  # a Fatal answer stops the pass (and the job): what was answered before it is kept
        ledger.apply(job, buffer)
        raise group.exceptions[0] from None
    ledger.apply(job, buffer)
