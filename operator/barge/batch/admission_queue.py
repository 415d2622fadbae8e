"""Quota-aware admission of batch jobs on one provider deployment: who may submit now, and who waits where.

Why: Azure Global Batch does not queue a batch whose prompt tokens do not fit the deployment's enqueued-token
quota, it fails it (`token_limit_exceeded`), and the retry loop is the submitter's job. With several jobs on one
deployment, Barge is the one submitter: it keeps the queue itself and sends only what fits. Pure: the operator
hands in the quota, what is live and who waits (operator/quota.py); this module answers.

The queue's order, one rule per line, each breaking the ties of the one above:

| rule       | order                                                                                   |
| ---------- | --------------------------------------------------------------------------------------- |
| priority   | `spec.priority`, higher first, as far as the admin lets a tenant's priority count       |
|            | between tenants (`Waiting.priority`, bounded by the operator: admission_policy.py)      |
| fair share | at equal priority, tenants take turns, one job per turn (round-robin): the tenant       |
|            | served least recently goes first (never served: first of all), and a tenant just served |
|            | goes to the back, so one tenant's 30 jobs cannot starve another's one                   |
| own order  | within a tenant, its own `spec.priority` in full (`Waiting.own_priority`), higher first |
| age        | then the oldest job first (creation time, then key)                                     |

"Served" is the last time a batch of that tenant was created on the deployment (the ledger keeps it, so the
rotation survives a restart); placing a job in the order counts as serving its tenant for the jobs below it.

Admission walks that order with what is left of the quota (tokens and live batches):

- a job that fits the whole quota is admitted whole (all its pending shards), once all of it fits what is left;
- a job bigger than the whole quota is admitted shard by shard: as many of its next shards as fit (its shards are
  cut to at most the quota's tokens, see `plan.spans`), instead of being refused;
- the first job that cannot go stops the walk: nobody overtakes it (no backfill), so a big job is never starved
  by a stream of small ones;
- a job that joined the queue less than `gather` seconds ago holds its place but is not admitted yet: jobs that
  arrive together are ordered by the rules above, not by which finished planning first;
- while the deployment backs off after a `token_limit_exceeded` answer (someone outside Barge uses the quota),
  nobody is admitted; the backoff doubles with each answer (`backoff_seconds`);
- one shard over the whole quota on its own (a single huge request) goes alone, when nothing else is live.

Without a quota (both limits 0) everything is admitted at once, and only the backoff applies.
"""

from __future__ import annotations

import contextlib
import heapq
import math
import time
from collections.abc import AsyncIterator, Callable, Iterable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from typing import Protocol, TypeVar

T = TypeVar("T")

#: The provider's answer to a batch that does not fit the deployment's enqueued-token quota (Azure).
TOKEN_LIMIT = "token_limit_exceeded"  # noqa: S105 - an error code, not a secret
BACKOFF_BASE = 60.0
BACKOFF_CAP = 1800.0


@dataclass(frozen=True)
class BatchQuota:
    """A deployment's batch quota; 0 means unlimited."""

    enqueued_tokens: int = 0
    max_live_batches: int = 0

    @property
    def limited(self) -> bool:
        return bool(self.enqueued_tokens or self.max_live_batches)

    def tighter(self, other: BatchQuota) -> BatchQuota:
        """The stricter of two declarations of the same deployment's quota (pools in two namespaces may differ)."""

        def low(a: int, b: int) -> int:
            return min(x for x in (a, b) if x) if a or b else 0

        return BatchQuota(
            low(self.enqueued_tokens, other.enqueued_tokens), low(self.max_live_batches, other.max_live_batches)
        )


@dataclass(frozen=True)
class Live:
    """What the deployment has in flight: estimated prompt tokens and batches (created or being created)."""

    tokens: int = 0
    batches: int = 0


@dataclass(frozen=True)
class Waiting:
    """A job with pending shards, as the queue sees it."""

    key: str
    tenant: str
    priority: int
    created: float
    """Creation time of the job (seconds since the epoch)."""
    shards: tuple[int, ...]
    """Estimated prompt tokens of each pending shard, in the order they would be created."""
    since: float
    """When it joined the queue (the admission window counts from here)."""
    own_priority: int | None = None
    """Its spec.priority as it orders the tenant's own jobs (None: `priority`, when no bound cut it)."""

    @property
    def rank(self) -> int:
        return self.priority if self.own_priority is None else self.own_priority


@dataclass(frozen=True)
class Hold:
    """Why and where a job waits."""

    position: int
    """1-based place among the jobs still waiting after this decision."""
    of: int
    cause: str
    """`quota` (what is left does not fit the head of the queue), `window` (the admission window of a job at or
    ahead of this one is still open) or `backoff` (after a token_limit_exceeded answer)."""
    needed: int
    """Tokens this job needs for its next admission: all of it, or its next shard when it is over the quota."""


@dataclass(frozen=True)
class Decision:
    admitted: Mapping[str, int]
    """Job key -> how many of its next shards may be created now (only jobs with at least one)."""
    order: tuple[str, ...]
    """Every waiting job, in queue order."""
    held: Mapping[str, Hold]
    """Job key -> its hold, for the jobs admitted nothing."""
    free_tokens: int | None
    """Tokens left after this decision (None: no token limit)."""


def fits_whole(shards: Sequence[int], quota: BatchQuota) -> bool:
    """Whether the job fits the whole quota at once (else it goes shard by shard)."""
    tokens_ok = not quota.enqueued_tokens or sum(shards) <= quota.enqueued_tokens
    batches_ok = not quota.max_live_batches or len(shards) <= quota.max_live_batches
    return tokens_ok and batches_ok


def queue_order(waiting: Iterable[Waiting], last_served: Mapping[str, float]) -> list[Waiting]:
    """The queue: priority, then round-robin between tenants (least recently served first), then the tenant's own
    priority, then age."""
    served = dict(last_served)
    turn = max([*served.values(), 0.0]) + 1.0  # placing a job serves its tenant "after" every real time
    levels: dict[int, dict[str, list[Waiting]]] = {}
    for w in sorted(waiting, key=lambda w: (-w.rank, w.created, w.key)):
        levels.setdefault(w.priority, {}).setdefault(w.tenant, []).append(w)
    out: list[Waiting] = []
    for priority in sorted(levels, reverse=True):
        tenants = levels[priority]
        heap = [(served.get(t, -math.inf), jobs[0].created, t) for t, jobs in tenants.items()]
        heapq.heapify(heap)
        nth = dict.fromkeys(tenants, 0)
        while heap:
            _, _, tenant = heapq.heappop(heap)
            jobs = tenants[tenant]
            out.append(jobs[nth[tenant]])
            nth[tenant] += 1
            served[tenant] = turn
            turn += 1.0
            if nth[tenant] < len(jobs):
                heapq.heappush(heap, (served[tenant], jobs[nth[tenant]].created, tenant))
    return out


def decide(
    quota: BatchQuota,
    live: Live,
    waiting: Iterable[Waiting],
    last_served: Mapping[str, float],
    now: float,
    *,
    gather: float = 0.0,
    backoff_until: float = 0.0,
) -> Decision:
    """Who may create how many shards now, and where everyone else waits (the rules in the module docstring)."""
    queue = [w for w in queue_order(waiting, last_served) if w.shards]
    inf = math.inf
    free_tokens: float = quota.enqueued_tokens - live.tokens if quota.enqueued_tokens else inf
    free_batches: float = quota.max_live_batches - live.batches if quota.max_live_batches else inf
    idle = live.tokens <= 0 and live.batches <= 0
    admitted: dict[str, int] = {}
    cause = "backoff" if now < backoff_until else ""
    for w in queue:
        if cause:
            break
        if quota.limited and now - w.since < gather:
            cause = "window"
            break
        if fits_whole(w.shards, quota):
            if sum(w.shards) <= free_tokens and len(w.shards) <= free_batches:
                admitted[w.key] = len(w.shards)
                free_tokens -= sum(w.shards)
                free_batches -= len(w.shards)
                idle = False
                continue
            cause = "quota"
            break
        n = 0
        for tokens in w.shards:  # over the whole quota: shard by shard
            alone = n == 0 and idle and quota.enqueued_tokens and tokens > quota.enqueued_tokens
            if not alone and (tokens > free_tokens or free_batches < 1):
                break
            n += 1
            free_tokens -= tokens
            free_batches -= 1
            idle = False
        if n:
            admitted[w.key] = n
        if n < len(w.shards):
            cause = "quota"
            break
    still = [w for w in queue if admitted.get(w.key, 0) < len(w.shards)]
    held = {
        w.key: Hold(
            position,
            len(still),
            cause or "quota",
            sum(w.shards) if fits_whole(w.shards, quota) else w.shards[0],
        )
        for position, w in enumerate(still, start=1)
        if not admitted.get(w.key)
    }
    return Decision(
        admitted,
        tuple(w.key for w in queue),
        held,
        None if free_tokens == inf else int(max(free_tokens, 0)),
    )


def backoff_seconds(strikes: int, base: float = BACKOFF_BASE, cap: float = BACKOFF_CAP) -> float:
    """How long a deployment waits after its `strikes`-th token_limit_exceeded answer in a row: base, 2 x base,
    4 x base, ... up to cap."""
    if strikes <= 0:
        return 0.0
    return float(min(cap, base * 2 ** min(strikes - 1, 30)))


class Gate(Protocol):
    """What the engine asks before it creates batches (the operator's queue, or `LocalGate`)."""

    @property
    def max_shard_tokens(self) -> int:
        """Shards are cut to at most this many estimated tokens (0: no cut)."""
        ...

    def turn(self, shards: Sequence[int]) -> AbstractAsyncContextManager[int]:
        """Enter with the job's pending shards' tokens; the value is how many of them to create now, inside."""
        ...

    def batch_ended(self, token_limited: bool) -> None:
        """A batch of the job ended (or a create was answered): token_limit_exceeded or not."""
        ...


class LocalGate:
    """The gate of a job without a queue (`barge run`, or a provider with no batch quota declared): everything
    is admitted, except during the backoff after a token_limit_exceeded answer."""

    def __init__(
        self, base: float = BACKOFF_BASE, cap: float = BACKOFF_CAP, clock: Callable[[], float] = time.time
    ) -> None:
        self.base, self.cap, self.clock = base, cap, clock
        self.strikes = 0
        self.until = 0.0

    @property
    def max_shard_tokens(self) -> int:
        return 0

    @contextlib.asynccontextmanager
    async def _turn(self, shards: Sequence[int]) -> AsyncIterator[int]:
        yield 0 if self.clock() < self.until else len(shards)

    def turn(self, shards: Sequence[int]) -> AbstractAsyncContextManager[int]:
        return self._turn(shards)

    def batch_ended(self, token_limited: bool) -> None:
        if token_limited:
            self.strikes += 1
            self.until = self.clock() + backoff_seconds(self.strikes, self.base, self.cap)
        else:
            self.strikes = 0
