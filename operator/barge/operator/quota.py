"""Quota-aware admission in the operator: one admission queue per provider deployment, kept in this process.

The rules are pure (batch/admission_queue.py). This module keeps, per deployment (provider type, endpoint and
model or Azure deployment name) and tenant, or per deployment alone when the admin's policy lists it as shared
(`admission.sharedDeployments`, with its quota: barge/admission_policy.py says why), the jobs waiting to create
batches; asks the rules at each job's turn, each job's priority bounded by the admin's policy for its tenant;
and holds the deployment's lock while the admitted shards are created, so two jobs never take the same room.
What is in flight is read from the ledger (every job on the deployment carries its key there, see
ledger/quota.py), so a restart loses only the waiting list, which the job daemons rebuild at their next step;
the admission window (a job waits `BARGE_ADMISSION_GATHER_SECONDS` in the queue before it may go) lets jobs
arriving together, or re-registering after a restart, be ordered by the rules rather than by who stepped first.

One process decides for its namespaces: with several replicas only the Kopf peering leader runs handlers, so the
queue in its memory is the whole queue. With several active operators (shards of the namespaces sharing one
PostgreSQL ledger, barge/sharding.py) the queue is `shared`: a deployment's turn is also held across processes
by an advisory lock, every shard's waiting jobs are read from the ledger at each decision, and what is in flight
and when each tenant was served are read afresh (operator/shared_admission.py, ledger/waiting.py).

Inside a process, job steps run on several engine loops (threads, operator/engine.py) and the metrics are
rendered in a thread: the queue's data is guarded by one plain lock held briefly (never across an await), and a
deployment's turn by a lock any loop can wait for without blocking its thread (`_TurnLock`).

A held job with nothing in flight is phase `Queued` with `Admitted=False`: reason `QuotaExhausted` (the quota
cannot take the head of the queue, or the deployment backs off after a `token_limit_exceeded` answer) or
`AdmissionWindow` (its window, or that of a job ahead of it, is still open), and its position "n" (its own
place, never how many wait behind it nor what other tenants hold: L7). A job with batches in flight keeps its
phase and its message says what waits. Metrics: `AdmissionCollector`.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field, replace
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.registry import Collector

from barge import admission_policy
from barge.admission_policy import AdmissionPolicy
from barge.batch import admission_queue as aq
from barge.batch.bounded import bound
from barge.batch.snapshot import Snapshot, rfc3339
from barge.ledger import Ledger
from barge.ledger import backoff as ledger_backoff
from barge.ledger import quota as ledger_quota
from barge.ledger import waiting as ledger_waiting
from barge.operator import kstatus, shared_admission
from barge.operator import status as status_

#: What is in flight is re-read from the ledger at most this long after it was last read, even with no event
#: (creates and ingestions of this process re-read it at once; adoption after a crash is the rare other change).
LIVE_MAX_AGE = 30.0
WAIT_BUCKETS = (1.0, 5.0, 15.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0, 3600.0, 7200.0, 14400.0, 28800.0, 86400.0)
SNAPSHOT_KEY = "admission"


def queue_ttl(poll_seconds: float) -> float:
    """A job that stopped asking (its steps fail before they reach submission) leaves its queue after this long."""
    return max(4 * poll_seconds, 60.0)


@dataclass(frozen=True)
class Where:
    """The deployment a job's batches count against, and the pool that declared its quota."""

    key: str
    """Hash of provider type, endpoint and model (and the tenant, once `scoped`, unless the admin lists the
    deployment as shared): the queue, and `jobs.quota_key` in the ledger."""
    label: str
    """How messages name it."""
    quota: aq.BatchQuota = field(default_factory=aq.BatchQuota)
    pool: str = ""
    """The InferencePool (in the job's namespace) that declared the quota; empty for a provider named in the job."""
    deployment: tuple[str, str, str] = ("", "", "")
    """(provider type, endpoint, model) as the admin's shared deployments name them."""


#: Providers' own caps on live batches, where no InferencePool declares one: Claude on Vertex allows 4 batch jobs
#: at a time per project by default (the 5th create is a 429).
def default_quota(provider: str, model: str) -> aq.BatchQuota:
    if provider == "vertex" and model.startswith(("claude", "publishers/anthropic/")):
        return aq.BatchQuota(max_live_batches=4)
    return aq.BatchQuota()


def where(provider: str, base_url: str, model: str, quota: aq.BatchQuota | None = None, pool: str = "") -> Where:
    key = hashlib.sha256(f"{provider}\n{base_url.rstrip('/')}\n{model}".encode()).hexdigest()[:32]
    label = f"InferencePool {pool!r} ({provider} deployment {model!r})" if pool else f"{provider} model {model!r}"
    return Where(key, label, quota or default_quota(provider, model), pool, (provider, base_url, model))


def scoped(at: Where, tenant: str, policy: AdmissionPolicy) -> Where:
    """The queue a tenant's job joins on `at`: the deployment's own, with the admin's quota, when the policy lists
    it as shared; otherwise the tenant's own queue on it, with the quota the tenant's pool declared."""
    shared = policy.shared_for(*at.deployment)
    if shared is not None:
        quota = aq.BatchQuota(shared.enqueued_tokens, shared.max_live_batches)
        provider, _, model = at.deployment
        return replace(at, label=f"{provider} deployment {model!r} (shared; quota set by the admin)", quota=quota)
    key = hashlib.sha256(f"{at.key}\n{tenant}".encode()).hexdigest()[:32]
    return replace(at, key=key)


@dataclass(frozen=True)
class Held:
    """Why a job waits, for its status."""

    reason: str
    message: str


@dataclass
class _Entry:
    waiting: aq.Waiting
    namespace: str
    pool: str
    quota: aq.BatchQuota
    seen: float
    started: bool
    """It created a batch before (its first admission is behind it: no wait is observed again)."""


class _TurnLock:
    """A deployment's turn, held from the decision until the admitted batches are created, by jobs on any engine
    loop: an asyncio.Lock belongs to one loop, and a blocking acquire would stall every job of the waiting loop."""

    def __init__(self) -> None:
        self._lock = threading.Lock()

    @contextlib.asynccontextmanager
    async def hold(self) -> AsyncIterator[None]:
        while not self._lock.acquire(blocking=False):  # noqa: ASYNC110 - no asyncio primitive spans loops
            await asyncio.sleep(0.01)
        try:
            yield
        finally:
            self._lock.release()


@dataclass
class _Deployment:
    key: str
    turn: _TurnLock = field(default_factory=_TurnLock)
    entries: dict[str, _Entry] = field(default_factory=dict)
    strikes: int = 0
    until: float = 0.0
    """No batch is created before this time (the backoff after token_limit_exceeded)."""
    live: aq.Live | None = None
    live_at: float = 0.0
    served: dict[str, float] | None = None
    others: list[ledger_waiting.Row] = field(default_factory=list)
    """Shared: the jobs other processes had waiting at the last decision (their pools' quotas count too)."""


@dataclass
class _Histogram:
    buckets: list[int] = field(default_factory=lambda: [0] * len(WAIT_BUCKETS))
    total: float = 0.0
    count: int = 0

    def observe(self, value: float) -> None:
        for n, bound_ in enumerate(WAIT_BUCKETS):
            if value <= bound_:
                self.buckets[n] += 1
        self.total += value
        self.count += 1


class Queues:
    """Every deployment's queue, the jobs' ledger marks, and what the metrics report."""

    def __init__(self, clock: Callable[[], float] = time.time, shared: Ledger | None = None) -> None:
        self.clock = clock
        self.shared = shared
        """The ledger several shards share: their queues are one (None: this process is the only one)."""
        self.mutex = threading.Lock()
        """Guards everything below and the deployments' data; held briefly, never across an await."""
        self.deployments: dict[str, _Deployment] = {}
        self.marked: dict[str, str] = {}
        """Job key -> the quota key its ledger row carries (written once per job and process)."""
        self.waits: dict[tuple[str, str, str], _Histogram] = {}
        self.token_limits: dict[tuple[str, str], int] = {}
        self.labels: set[tuple[str, str, str]] = set()
        """(namespace, pool, tenant) ever queued here: the gauges list them at 0 once their queue is empty."""

    def gate(
        self,
        ledger: Ledger,
        job_key: str,
        *,
        tenant: str,
        priority: int,
        created: float,
        namespace: str,
        at: Where,
        gather: float,
        backoff: float,
        ttl: float,
        halted: Callable[[], bool] = lambda: False,
        policy: AdmissionPolicy = admission_policy.DEFAULT,
    ) -> JobGate:
        """The job's gate; `policy` is the admin's (`Policy.admission`): which queue it joins, how far its
        priority counts between tenants."""
        at = scoped(at, tenant, policy)
        with self.mutex:
            dep = self.deployments.setdefault(at.key, _Deployment(at.key))
        bound = policy.priority_bound(tenant)
        return JobGate(
            self, ledger, dep, job_key, tenant, priority, created, namespace, at, gather, backoff, ttl, halted, bound
        )

    def leave(self, job_key: str) -> None:
        """The job no longer waits anywhere (deleted, suspended, finished, or gone to the synchronous path)."""
        with self.mutex:
            found = [dep.entries.pop(job_key, None) is not None for dep in self.deployments.values()]
        if self.shared is not None and any(found):
            ledger_waiting.leave(self.shared, job_key)

    def forget(self, job_key: str) -> None:
        """The job ended: it waits nowhere and its ledger mark is no longer remembered here (L5)."""
        self.leave(job_key)
        with self.mutex:
            self.marked.pop(job_key, None)

    def _prune(self, ttl: float) -> None:
        """Drop jobs whose daemon stopped asking (a step failing before it reaches submission, a stopped daemon).
        The caller holds the mutex."""
        now = self.clock()
        for dep in self.deployments.values():
            for key in [k for k, e in dep.entries.items() if now - e.seen > ttl]:
                del dep.entries[key]

    def snapshot(self, ttl: float) -> tuple[dict[tuple[str, str, str], tuple[int, int]], list[Any], list[Any]]:
        """For the metrics (rendered in a thread): jobs and tokens queued per (namespace, pool, tenant), each
        histogram's (labels, buckets, sum, count), and the token_limit_exceeded counts."""
        with self.mutex:
            self._prune(ttl)
            counts = dict.fromkeys(sorted(self.labels), (0, 0))
            for dep in self.deployments.values():
                for e in dep.entries.values():
                    key = (e.namespace, e.pool, e.waiting.tenant)
                    n, t = counts.get(key, (0, 0))
                    counts[key] = (n + 1, t + sum(e.waiting.shards))
            waits = [(k, list(h.buckets), h.total, h.count) for k, h in sorted(self.waits.items())]
            # every deployment seen counts from 0, so that an alert's increase() sees the first answer
            answers = sorted({**{(k[0], k[1]): 0 for k in self.labels}, **self.token_limits}.items())
        return counts, waits, answers


class JobGate:
    """One job's view of its deployment's queue for one engine step (batch/admission_queue.Gate)."""

    def __init__(
        self,
        queues: Queues,
        ledger: Ledger,
        dep: _Deployment,
        job_key: str,
        tenant: str,
        priority: int,
        created: float,
        namespace: str,
        at: Where,
        gather: float,
        backoff: float,
        ttl: float,
        halted: Callable[[], bool],
        priority_bound: int = admission_policy.PRIORITY_MAX,
    ) -> None:
        self.queues, self.ledger, self.dep, self.key = queues, ledger, dep, job_key
        self.tenant, self.created, self.namespace, self.at = tenant, created, namespace, at
        self.priority = min(priority, priority_bound)
        """spec.priority as far as the admin lets it count between tenants."""
        self.own_priority = priority
        """spec.priority in full: it orders the tenant's own jobs."""
        self.gather, self.backoff, self.ttl = gather, backoff, ttl
        self.turned = False
        """The engine reached submission in this step (else the job is not waiting: it leaves the queue)."""
        self.held: Held | None = None
        self.halted = halted
        """True once the job is being deleted: it leaves the queue (it creates nothing more anyway)."""

    @property
    def max_shard_tokens(self) -> int:
        with self.queues.mutex:
            return self._quota().enqueued_tokens

    def _quota(self) -> aq.BatchQuota:
        """The stricter of every declaration of this queue's quota among the pools of the jobs waiting: the
        tenant's own pools, or the admin's figure for a shared deployment (the caller holds the mutex)."""
        quota = self.at.quota
        for entry in self.dep.entries.values():
            quota = quota.tighter(entry.quota)
        for row in self.dep.others:
            quota = quota.tighter(shared_admission.as_quota(row))
        return quota

    def turn(self, shards: Sequence[int]) -> AbstractAsyncContextManager[int]:
        return self._turn(list(shards))

    @contextlib.asynccontextmanager
    async def _turn(self, shards: list[int]) -> AsyncIterator[int]:
        self.turned = True
        queues, dep = self.queues, self.dep
        self._mark()  # before anything is created: its batches count from the start
        if queues.shared is not None and shards:  # another shard may have been answered token_limit_exceeded
            shared = await asyncio.to_thread(ledger_backoff.read, queues.shared, dep.key)
            if shared is not None:
                with queues.mutex:
                    dep.strikes, dep.until = max(dep.strikes, shared.strikes), max(dep.until, shared.until)
        with queues.mutex:
            leaving = not shards or self.halted()
            waited = leaving and dep.entries.pop(self.key, None) is not None
            limited = self._quota().limited
            backoff = self._backoff_message() if queues.clock() < dep.until else ""
        if waited and queues.shared is not None:
            await asyncio.to_thread(ledger_waiting.leave, queues.shared, self.key, dep.key)
        if leaving:
            yield 0
            return
        if not limited:  # no queue: only the backoff after token_limit_exceeded holds
            if backoff:
                self.held = Held("QuotaExhausted", backoff)
            yield 0 if backoff else len(shards)
            return
        across = (
            shared_admission.turn(queues.shared, dep.key) if queues.shared is not None else contextlib.nullcontext()
        )
        async with dep.turn.hold(), across:
            if queues.shared is not None:  # every shard's waiting jobs, this one's refreshed first
                await asyncio.to_thread(self._share, shards)
            with queues.mutex:
                decision, entry = self._decide(shards)
                admitted = decision.admitted.get(self.key, 0)
                if not admitted:
                    self.held = self._hold(decision.held[self.key], decision.free_tokens)
            try:
                yield admitted
            finally:
                if admitted:
                    with queues.mutex:
                        left = self._admitted(entry, shards, admitted)
                    if queues.shared is not None:
                        await asyncio.to_thread(self._shared_admitted, left)

    def _share(self, shards: list[int]) -> None:
        """Shared: this job's row written (as it will wait if not admitted now), the others' read, and what is in
        flight and when each tenant was served read afresh: other shards create batches too (in a thread, holding
        the deployment's lock)."""
        queues, dep, now = self.queues, self.dep, self.queues.clock()
        assert queues.shared is not None
        with queues.mutex:
            entry = dep.entries.get(self.key)
            since = entry.waiting.since if entry is not None else now
        w = aq.Waiting(self.key, self.tenant, self.priority, self.created, tuple(shards), since, self.own_priority)
        ledger_waiting.publish(queues.shared, dep.key, shared_admission.as_row(w, self.at.quota, now))
        rows = ledger_waiting.fresh(queues.shared, dep.key, now - self.ttl)
        live = aq.Live(*ledger_quota.live(self.ledger, dep.key))
        served = ledger_quota.last_served(self.ledger, dep.key)
        with queues.mutex:
            dep.others = [r for r in rows if r.job not in dep.entries and r.job != self.key]
            dep.live, dep.live_at, dep.served = live, now, served

    def _shared_admitted(self, left: aq.Waiting | None) -> None:
        assert self.queues.shared is not None
        if left is None:
            ledger_waiting.leave(self.queues.shared, self.key, self.dep.key)
        else:
            ledger_waiting.publish(
                self.queues.shared, self.dep.key, shared_admission.as_row(left, self.at.quota, self.queues.clock())
            )

    def _decide(self, shards: list[int]) -> tuple[aq.Decision, _Entry]:
        """Join or refresh the queue and ask the rules (the caller holds the turn and the mutex)."""
        queues, dep, now = self.queues, self.dep, self.queues.clock()
        entry = dep.entries.get(self.key)
        if entry is None:
            waiting = aq.Waiting(
                self.key, self.tenant, self.priority, self.created, tuple(shards), now, self.own_priority
            )
            started = self.ledger.intent_count(self.key) > 0
            entry = _Entry(waiting, self.namespace, self.at.pool, self.at.quota, now, started)
            dep.entries[self.key] = entry
            queues.labels.add((self.namespace, self.at.pool, self.tenant))
        else:
            entry.waiting = replace(
                entry.waiting, priority=self.priority, own_priority=self.own_priority, shards=tuple(shards)
            )
            entry.seen, entry.quota = now, self.at.quota
        queues._prune(self.ttl)
        if dep.live is None or now - dep.live_at > LIVE_MAX_AGE:
            dep.live, dep.live_at = aq.Live(*ledger_quota.live(self.ledger, dep.key)), now
        if dep.served is None:
            dep.served = ledger_quota.last_served(self.ledger, dep.key)
        decision = aq.decide(
            self._quota(),
            dep.live,
            [e.waiting for e in dep.entries.values()] + [shared_admission.as_waiting(r) for r in dep.others],
            dep.served,
            now,
            gather=self.gather,
            backoff_until=dep.until,
        )
        return decision, entry

    def _admitted(self, entry: _Entry, shards: list[int], admitted: int) -> aq.Waiting | None:
        queues, dep, now = self.queues, self.dep, self.queues.clock()
        dep.live = None  # the ledger holds the new batches (or open intents): read again at the next decision
        assert dep.served is not None
        dep.served[self.tenant] = now
        if not entry.started:
            labels = (self.namespace, self.at.pool, self.tenant)
            queues.waits.setdefault(labels, _Histogram()).observe(max(0.0, now - entry.waiting.since))
            entry.started = True
        if admitted < len(shards):
            entry.waiting = replace(entry.waiting, shards=tuple(shards[admitted:]))
            return entry.waiting
        dep.entries.pop(self.key, None)
        return None

    def _backoff_message(self) -> str:
        return (
            f"{self.at.label} answered token_limit_exceeded (its quota is in use outside Barge): no batch is created "
            f"on it before {rfc3339(self.dep.until)} (backoff {self.dep.strikes})"
        )

    def _hold(self, hold: aq.Hold, free: int | None) -> Held:
        # Only the job's own place and needs (REVIEW-3 L7): how many wait behind it and how much of the quota
        # other tenants' batches hold are theirs; admins read them from barge_admission_* per pool and tenant.
        del free
        place = f"position {hold.position} in the queue"
        if hold.cause == "backoff":
            return Held("QuotaExhausted", f"{self._backoff_message()}; {place}")
        if hold.cause == "window":
            return Held(
                "AdmissionWindow",
                f"in the admission queue of {self.at.label}: {place}; jobs arriving within {self.gather:g} s of "
                "each other are admitted by priority, then tenants in turn, then age",
            )
        quota = self._quota()
        room = []
        if quota.enqueued_tokens:
            room.append(f"{quota.enqueued_tokens:,} enqueued tokens")
        if quota.max_live_batches:
            room.append(f"{quota.max_live_batches} live batches")
        limits = f" (the quota: {' and '.join(room)})" if room else ""
        return Held(
            "QuotaExhausted",
            f"waiting for the batch quota of {self.at.label}: {place}; needs {hold.needed:,} estimated tokens, "
            f"more than is free now{limits}",
        )

    def batch_ended(self, token_limited: bool) -> None:
        queues, dep = self.queues, self.dep
        with queues.mutex:
            dep.live = None  # its items left `submitted` in the ledger: read again at the next decision
            struck = dep.strikes
            if token_limited:
                dep.strikes += 1
                dep.until = queues.clock() + aq.backoff_seconds(dep.strikes, self.backoff)
                labels = (self.namespace, self.at.pool)
                queues.token_limits[labels] = queues.token_limits.get(labels, 0) + 1
            else:
                dep.strikes = 0
            strikes, until = dep.strikes, dep.until
        if queues.shared is not None:  # the other shards back off too (a rare write, on the engine's loop)
            if token_limited:
                ledger_backoff.strike(queues.shared, dep.key, strikes, until)
            elif struck:
                ledger_backoff.clear(queues.shared, dep.key, queues.clock())

    def _mark(self) -> None:
        """The job's ledger row carries its queue's key (once per job and process)."""
        if self.queues.marked.get(self.key) != self.dep.key and not self.halted():
            ledger_quota.mark(self.ledger, self.key, self.dep.key)
            self.queues.marked[self.key] = self.dep.key

    def done(self, snap: Snapshot) -> None:
        """After the engine step: a job that did not ask leaves the queue; a held one's hold goes on the snapshot.
        A job with batches in flight that asks for nothing more is marked too: its queue's key changes with the
        admin's shared deployments and an upgrade (the tenant joined the key), and its live batches must count in
        the queue it is in now."""
        self._mark()
        if not self.turned:
            with self.queues.mutex:
                waited = self.dep.entries.pop(self.key, None) is not None
            if waited and self.queues.shared is not None:
                ledger_waiting.leave(self.queues.shared, self.key, self.dep.key)
        if self.held is not None:
            snap.extra[SNAPSHOT_KEY] = self.held


def queued_status(new: dict[str, Any], old: dict[str, Any], snap: Snapshot, generation: int) -> dict[str, Any]:
    """The status of a job the admission queue holds: `Queued` with `Admitted=False` when it has nothing in flight,
    else its own phase with a message saying what waits. Unchanged for a job not held."""
    held = snap.extra.get(SNAPSHOT_KEY)
    if not isinstance(held, Held) or snap.terminal:
        return new
    if snap.counts.get("submitted"):
        return {**new, "message": bound(f"{new.get('message') or ''}; more shards wait: {held.message}")}
    admitted = {"type": "Admitted", "status": "False", "reason": held.reason, "message": held.message}
    ours = [admitted, *kstatus.job_conditions("Queued", [admitted], held.message)]
    merged = status_.merge_conditions(old.get("conditions", []), ours, generation, status_.now_rfc3339())
    types = {c["type"] for c in ours}
    conditions = [c for c in merged if c["type"] in types]
    conditions += [c for c in new.get("conditions", []) if c.get("type") not in types]
    return {**new, "phase": "Queued", "message": held.message, "conditions": conditions}


class AdmissionCollector(Collector):
    """barge_admission_*: jobs and tokens waiting per pool and tenant, admission waits, token_limit_exceeded answers."""

    def __init__(self, queues: Queues, ttl: float) -> None:
        self.queues = queues
        self.ttl = ttl

    def collect(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily | HistogramMetricFamily]:
        counts, waits, answers = self.queues.snapshot(self.ttl)
        labels = ["namespace", "pool", "tenant"]
        jobs = GaugeMetricFamily(
            "barge_admission_queued_jobs",
            "Jobs with shards waiting for a provider deployment's batch quota, by the pool that declared it",
            labels=labels,
        )
        tokens = GaugeMetricFamily(
            "barge_admission_queued_tokens", "Estimated prompt tokens of those waiting shards", labels=labels
        )
        for key, (n, t) in sorted(counts.items()):
            jobs.add_metric(list(key), n)
            tokens.add_metric(list(key), t)
        yield jobs
        yield tokens
        wait = HistogramMetricFamily(
            "barge_admission_wait_seconds",
            "Time from joining a deployment's admission queue to the first batch created (one per job)",
            labels=labels,
        )
        for key, buckets, total, count in waits:
            bounds = [(str(b), float(n)) for b, n in zip(WAIT_BUCKETS, buckets, strict=True)]
            wait.add_metric(list(key), [*bounds, ("+Inf", float(count))], total)
        yield wait
        counter = CounterMetricFamily(
            "barge_admission_token_limit_answers",
            "token_limit_exceeded answers (a deployment's quota used outside Barge): each backs off the deployment",
            labels=["namespace", "pool"],
        )
        for (namespace, pool), n in answers:
            counter.add_metric([namespace, pool], n)
        yield counter
