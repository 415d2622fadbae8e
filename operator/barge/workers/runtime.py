"""One replica of a queue worker: receive, answer through the pool, route the outcome, repeat.

Messages follow the claim-check pattern: a small JSON body with `payloadUrl` (read through barge.storage under
the pool's storage prefixes, at most maxPayloadBytes) or an inline `payload` object, plus `correlationId` and
optional `metadata`. The tenant is the pool's (from the operator's config), never the message's: a message that
names another tenant is dead-lettered, and usage is metered to the pool's tenant. Results are upserted as
`<output.url>/<tenant>/<correlationId>.json` (without a tenant, in local runs: `<output.url>/<correlationId>.json`),
so the idempotency key is (tenant, correlationId) and a redelivered message that was already answered is
completed without calling the model again. Between the paid answer and that file (a replica stopped mid-call, a
store outage, another replica's claim) the call record of workers/calls.py keeps it paid once.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import time
from dataclasses import dataclass, field
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge

from barge.batch.bounded import bound
from barge.batch.fallback import RateLimiter
from barge.batch.sandbox import BoundedSandbox, render_bounded
from barge.providers.base import UNREADABLE_ANSWER, BatchProvider, Outcome, Request
from barge.providers.content import unpack
from barge.providers.errors import Fatal
from barge.storage import StorageError, StoragePolicy, StorageRefused, join, locate, read_text, write_lines
from barge.workers.answers import ANSWERED, Asking
from barge.workers.calls import Calls, Verdict, calls_for
from barge.workers.queues import Message, Queue

log = logging.getLogger("barge.worker")
SAFE_ID = re.compile(r"^[A-Za-z0-9_.-]{1,128}$")
DEAD_LETTER_REASONS = ("invalid", "infrastructure")
OUTCOMES = ("succeeded", "refused", "invalid_output", "duplicate", "abandoned")
UNCERTAIN = frozenset({"timeout", "unknown", UNREADABLE_ANSWER})
"""Failed calls the provider may still have answered and billed (a client-side timeout, an unexpected error, a
body that could not be read): dead-lettered at once, never called again. An error answer (5xx, 429, overloaded,
connection refused) was not billed: left for redelivery."""
UNSAVED_MAX = 1000  # answers kept in memory while the output store is down


@dataclass(frozen=True)
class WorkerSettings:
    model: str
    system: str
    template: str
    max_tokens: int
    params: dict[str, Any]
    output_url: str
    max_deliveries: int
    requests_per_minute: int
    tokens_per_minute: int
    tokens_per_request: int
    concurrency: int = 4
    storage: StoragePolicy = field(default_factory=StoragePolicy)
    pool: str = ""
    worker: str = ""
    backlog_seconds: float = 15.0
    """How often the replica samples the queue's backlog for its metrics."""
    tenant: str = ""
    """The pool's tenant, set by the operator; "" in local runs."""
    max_payload_bytes: int = 10 * 1024 * 1024
    asking: Asking = field(default_factory=Asking)
    """request.responseFormat, maxAttempts and serviceTier: how each answer is asked for and read (answers.py)."""

    @classmethod
    def from_config(cls, config: dict[str, Any], storage: StoragePolicy | None = None) -> WorkerSettings:
        request = config.get("request") or {}
        limits = config.get("limits") or {}
        return cls(
            model=str(config["model"]),
            system=str(request.get("system", "")),
            template=str(request.get("template", "{{ text }}")),
            max_tokens=int(request.get("maxTokens", 1024)),
            params=dict(request.get("params") or {}),
            output_url=str(config["output"]["url"]),
            max_deliveries=int(config.get("maxDeliveries", 5)),
            requests_per_minute=int(limits.get("requestsPerMinute", 0)),
            tokens_per_minute=int(limits.get("tokensPerMinute", 0)),
            tokens_per_request=int(limits.get("tokensPerRequest", 1000)),
            concurrency=int(config.get("concurrency", 4)),
            storage=storage or _storage(config),
            pool=str(config.get("pool", "")),
            worker=str(config.get("worker", "")),
            tenant=str(config.get("tenant", "")),
            max_payload_bytes=int(config.get("maxPayloadBytes", cls.max_payload_bytes)),
            asking=Asking.from_request(request),
        )


def _storage(config: dict[str, Any]) -> StoragePolicy:
    prefixes = (config.get("storage") or {}).get("prefixes")
    return StoragePolicy() if prefixes is None else StoragePolicy(prefixes=tuple(prefixes))


class _Bound:
    """A labelled metric with the replica's pool and worker already filled in."""

    def __init__(self, metric: Counter, *prefix: str) -> None:
        self.metric, self.prefix = metric, prefix

    def labels(self, *rest: str) -> Any:
        return self.metric.labels(*self.prefix, *rest)


class Metrics:
    """Every series carries `pool` and `worker` (the pod's namespace comes from the scrape), so alerts and the
    dashboard can join them with the operator's `barge_pool_worker_*` gauges."""

    def __init__(self, registry: CollectorRegistry | None = None, pool: str = "", worker: str = "") -> None:
        self.registry = registry or CollectorRegistry()
        r, ids, names = self.registry, (pool, worker), ["pool", "worker"]
        self.processed = _Bound(
            Counter("barge_worker_messages", "Messages finished", [*names, "outcome"], registry=r), *ids
        )
        self.dead = _Bound(
            Counter("barge_worker_dead_lettered", "Messages dead-lettered", [*names, "reason"], registry=r), *ids
        )
        self.tokens = _Bound(
            Counter("barge_worker_tokens", "Tokens used", [*names, "tenant", "kind"], registry=r), *ids
        )
        self.waits = Counter(
            "barge_worker_limiter_wait_seconds", "Seconds spent waiting on the rate limiter", names, registry=r
        ).labels(*ids)
        self.errors = _Bound(
            Counter("barge_worker_errors", "Messages that failed unexpectedly, by kind", [*names, "kind"], registry=r),
            *ids,
        )
        self.in_flight = Gauge("barge_worker_in_flight", "Messages being processed", names, registry=r).labels(*ids)
        self.backlog = Gauge(
            "barge_worker_backlog", "Messages waiting in the queue, sampled by this replica", names, registry=r
        ).labels(*ids)
        self.limit_rpm = Gauge(
            "barge_worker_limit_requests_per_minute",
            "This replica's own request limit (its share of the quota)",
            names,
            registry=r,
        ).labels(*ids)
        self.limit_tpm = Gauge(
            "barge_worker_limit_tokens_per_minute",
            "This replica's own token limit (its share of the quota)",
            names,
            registry=r,
        ).labels(*ids)
        # Every reason and outcome listed from 0: a series born at 1 hides its first increase from increase().
        for reason in DEAD_LETTER_REASONS:
            self.dead.labels(reason)
        for outcome in OUTCOMES:
            self.processed.labels(outcome)
        for kind in ("storage", "internal"):
            self.errors.labels(kind)


class Worker:
    def __init__(
        self,
        queue: Queue,
        provider: BatchProvider,
        settings: WorkerSettings,
        metrics: Metrics | None = None,
        *,
        calls: Calls | None = None,
    ) -> None:
        self.queue = queue
        self.calls = calls if calls is not None else calls_for(queue)
        self.provider = provider
        self.settings = settings
        self.metrics = metrics or Metrics(pool=settings.pool, worker=settings.worker)
        self.metrics.limit_rpm.set(settings.requests_per_minute)
        self.metrics.limit_tpm.set(settings.tokens_per_minute)
        self._sampled = 0.0
        # A one-second burst: the replica paces itself instead of spending a minute of quota at start-up.
        self.limiter = RateLimiter(settings.requests_per_minute, settings.tokens_per_minute, burst_seconds=1.0)
        self.sandbox = BoundedSandbox()
        self.template = self.sandbox.from_string(settings.template)
        self.stopping = asyncio.Event()
        self.model_calls = 0
        self._unsaved: dict[str, dict[str, Any]] = {}  # answers the output store refused, until saved
        self._locks: dict[str, asyncio.Lock] = {}  # one answer per correlationId, even for duplicates in one batch

    def _result_url(self, correlation_id: str) -> str:
        base = (
            join(self.settings.output_url, self.settings.tenant) if self.settings.tenant else self.settings.output_url
        )
        return join(base, f"{correlation_id}.json")

    def _answered(self, correlation_id: str) -> bool:
        fs, path = locate(self._result_url(correlation_id), self.settings.storage)
        return bool(fs.exists(path))

    def _save(self, correlation_id: str, record: dict[str, Any]) -> None:
        """Upsert the answer; if the store fails, keep it (bounded) for the redelivery, which must not pay again."""
        try:
            write_lines(self._result_url(correlation_id), [json.dumps(record).encode()], self.settings.storage)
        except Exception:
            if len(self._unsaved) >= UNSAVED_MAX:
                self._unsaved.pop(next(iter(self._unsaved)))
            self._unsaved[correlation_id] = record
            raise
        self._unsaved.pop(correlation_id, None)

    def _payload(self, envelope: dict[str, Any]) -> dict[str, Any]:
        if "payload" in envelope:
            payload = envelope["payload"]
        elif "payloadUrl" in envelope:
            url = str(envelope["payloadUrl"])
            payload = json.loads(read_text(url, self.settings.storage, limit=self.settings.max_payload_bytes))
        else:
            raise ValueError("the message has neither payload nor payloadUrl")
        if not isinstance(payload, dict):
            raise ValueError("the payload must be a JSON object")
        return payload

    async def handle(self, message: Message) -> str:
        """Process one message; returns what happened (for tests and metrics)."""
        try:
            envelope = json.loads(message.body)
            correlation_id = str(envelope["correlationId"])
            if not SAFE_ID.match(correlation_id):
                raise ValueError(f"correlationId {correlation_id!r} must match {SAFE_ID.pattern}")
            claimed = str(envelope.get("tenant") or "")
            tenant = self.settings.tenant
            if tenant and claimed and claimed != tenant:
                raise ValueError(f"the message names tenant {claimed!r}; this worker serves {tenant!r}")
        except (ValueError, KeyError, TypeError, RecursionError) as exc:  # deep JSON included
            await self.queue.dead_letter(message, "invalid", bound(f"malformed message: {exc}", 500))
            self.metrics.dead.labels("invalid").inc()
            return "dead:invalid"
        if message.deliveries > self.settings.max_deliveries:  # replicas died handling it: never again
            await self.queue.dead_letter(
                message, "infrastructure", f"delivered {message.deliveries} times without an answer"
            )
            self.metrics.dead.labels("infrastructure").inc()
            return "dead:infrastructure"
        lock = self._locks.setdefault(correlation_id, asyncio.Lock())
        try:
            async with lock:
                return await self._answer(message, envelope, correlation_id, tenant)
        except Exception as exc:  # one message's trouble never escapes: its siblings and the replica go on
            return await self._failed(message, exc)
        finally:
            if not lock.locked():
                self._locks.pop(correlation_id, None)

    async def _failed(self, message: Message, exc: Exception) -> str:
        """Anything unexpected (an output-store outage, a provider glitch): counted by kind, abandoned for
        redelivery, dead-lettered once the message has been delivered max_deliveries times."""
        kind = "storage" if isinstance(exc, StorageError | OSError) else "internal"
        self.metrics.errors.labels(kind).inc()
        log.warning("message %s failed (%s): %s", message.id, kind, exc)
        try:
            if message.deliveries >= self.settings.max_deliveries:
                await self.queue.dead_letter(
                    message, "infrastructure", bound(f"{kind}: {exc} after {message.deliveries} deliveries", 500)
                )
                self.metrics.dead.labels("infrastructure").inc()
                return "dead:infrastructure"
            await self.queue.abandon(message)
        except Exception as again:  # the queue itself is failing: the message is redelivered after its timeout
            log.warning("cannot settle message %s: %s", message.id, again)
            return "unsettled"
        self.metrics.processed.labels("abandoned").inc()
        return "abandoned"

    async def _answer(self, message: Message, envelope: dict[str, Any], correlation_id: str, tenant: str) -> str:
        try:
            answered = self._answered(correlation_id)
        except StorageRefused as exc:  # the output is outside the pool's storage prefixes: visible, never silent
            await self.queue.dead_letter(message, "invalid", bound(str(exc), 500))
            self.metrics.dead.labels("invalid").inc()
            return "dead:invalid"
        if answered:
            await self.queue.complete(message)
            self.metrics.processed.labels("duplicate").inc()
            return "duplicate"
        if correlation_id in self._unsaved:  # answered, but the store failed: save again, never pay again
            self._save(correlation_id, self._unsaved[correlation_id])
            await self.queue.complete(message)
            self.metrics.processed.labels("duplicate").inc()
            return "duplicate"
        try:
            payload = self._payload(envelope)
            # A dict, not keywords: a payload key such as "self" must not clash with render()'s own parameters.
            user = render_bounded(self.template.generate(payload), self.sandbox.limits.max_output)
        except StorageRefused as exc:  # payloadUrl outside the pool's storage prefixes or over the size limit
            await self.queue.dead_letter(message, "invalid", bound(str(exc), 500))
            self.metrics.dead.labels("invalid").inc()
            return "dead:invalid"
        except (StorageError, OSError):
            raise  # the store, not the message: redelivered (see _failed)
        except Exception as exc:  # the message's own fault (bad JSON, template error or limit): never retried
            await self.queue.dead_letter(message, "invalid", bound(str(exc) or type(exc).__name__, 500))
            self.metrics.dead.labels("invalid").inc()
            return "dead:invalid"
        if not await self._paced(len(self.settings.system + user) // 4 + self.settings.max_tokens):
            await self.queue.abandon(message)  # stopping: not called, left for another replica
            return "released"
        request = Request(
            correlation_id,
            self.settings.model,
            user,
            self.settings.max_tokens,
            self.settings.system,
            params=dict(self.settings.params),
        )
        key = f"{tenant}/{correlation_id}" if tenant else correlation_id
        try:
            return await self._call(message, envelope, request, key, tenant)
        finally:
            await self.calls.release(key)

    async def _paced(self, tokens: int) -> bool:
        """Wait for the rate limiter; False if the replica is told to stop first (it calls nothing more)."""
        before = self.limiter.waited
        acquire = asyncio.ensure_future(self.limiter.acquire(tokens))
        stop = asyncio.ensure_future(self.stopping.wait())
        try:
            await asyncio.wait({acquire, stop}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            stop.cancel()
            if not acquire.done():
                acquire.cancel()
            self.metrics.waits.inc(self.limiter.waited - before)
        if not acquire.done() or acquire.cancelled():
            return False
        acquire.result()  # the limiter's own error, if any, is this message's
        return True

    async def _call(self, message: Message, envelope: dict[str, Any], request: Request, key: str, tenant: str) -> str:
        correlation_id = request.custom_id
        begun = await self.calls.begin(key)
        if begun.verdict is Verdict.BUSY:  # another replica is calling it now: its ack settles the message
            log.info("message %s is being answered by %s", message.id, begun.holder)
            return "busy"
        if begun.verdict is Verdict.ANSWERED and begun.record is not None:  # paid before, its save was lost
            self._save(correlation_id, begun.record)
            await self.queue.complete(message)
            await self.calls.done(key)
            self.metrics.processed.labels("duplicate").inc()
            return "duplicate"
        if begun.verdict is Verdict.INTERRUPTED:
            detail = (
                f"a replica ({begun.holder}) stopped during its model call, which may have been paid: not called again"
            )
            log.warning("message %s: %s", message.id, detail)
            await self.queue.dead_letter(message, "infrastructure", detail)
            await self.calls.done(key)
            self.metrics.dead.labels("infrastructure").inc()
            return "dead:interrupted"
        self.model_calls += 1
        try:
            result = await self.settings.asking.ask(self.provider, request)
        except Fatal as exc:
            await self.calls.done(key)  # refused before any answer: not paid
            log.error("provider refuses this worker's credentials or account: %s", exc.message)
            await self.queue.abandon(message)
            return "abandoned:fatal"
        # anything else raised here leaves the record `calling`: the redelivery dead-letters it, never pays again
        if result.retry_after:
            self.limiter.pause(result.retry_after)
        if result.outcome in ANSWERED:  # an invalid_output too: paid for, written with its error (answers.py)
            text, kept = unpack(result.text)  # tool calls, blocks, stop reasons: beside the text (content.py)
            record = {
                "correlationId": correlation_id,
                "tenant": tenant,
                "status": result.outcome.value,
                "output": text,
                **kept,
                **self.settings.asking.record_fields(result),
                "usage": {"input_tokens": result.usage.input_tokens, "output_tokens": result.usage.output_tokens},
                "metadata": envelope.get("metadata") or {},
            }
            try:
                await self.calls.answered(key, record)  # paid: kept before anything else can fail
            except Exception as exc:  # its queue's store is failing: the result file below is the other record
                log.warning("message %s: cannot keep its answer beside the queue: %s", message.id, exc)
            self.metrics.tokens.labels(tenant, "input").inc(result.usage.input_tokens)
            self.metrics.tokens.labels(tenant, "output").inc(result.usage.output_tokens)
            self._save(correlation_id, record)
            await self.queue.complete(message)
            await self.calls.done(key)
            self.metrics.processed.labels(result.outcome.value).inc()
            return result.outcome.value
        if result.outcome is Outcome.TRANSIENT and result.error_type in UNCERTAIN:
            detail = f"{result.error_type}: {result.message}: the provider may have answered it: not called again"
            log.warning("message %s: %s", message.id, detail)
            await self.queue.dead_letter(message, "infrastructure", bound(detail, 500))
            await self.calls.done(key)
            self.metrics.dead.labels("infrastructure").inc()
            return "dead:uncertain"
        await self.calls.done(key)  # the provider answered with an error: nothing paid, a redelivery may call
        if result.outcome is Outcome.INVALID:
            await self.queue.dead_letter(message, "invalid", f"{result.error_type}: {result.message}")
            self.metrics.dead.labels("invalid").inc()
            return "dead:invalid"
        if message.deliveries >= self.settings.max_deliveries:
            await self.queue.dead_letter(
                message,
                "infrastructure",
                f"{result.error_type}: {result.message} after {message.deliveries} deliveries",
            )
            self.metrics.dead.labels("infrastructure").inc()
            return "dead:infrastructure"
        log.warning(
            "message %s not answered (%s: %s), left for redelivery", message.id, result.error_type, result.message
        )
        await self.queue.abandon(message)
        self.metrics.processed.labels("abandoned").inc()
        return "abandoned"

    async def _sample_backlog(self) -> None:
        now = time.monotonic()
        if now - self._sampled < self.settings.backlog_seconds:
            return
        self._sampled = now
        try:
            waiting = await self.queue.backlog()
        except Exception as exc:  # a metric must never stop the worker
            log.warning("cannot read the queue's backlog: %s", exc)
            return
        if waiting is not None:
            self.metrics.backlog.set(waiting)

    async def run(self, *, idle_exit: bool = False, wait_ms: int = 1000) -> None:
        """Receive until stopped (SIGTERM sets `stopping`): calls in flight finish, messages not yet called are
        left for another replica, nothing new is taken. Held messages are kept from other replicas' claims."""
        while not self.stopping.is_set():
            await self._sample_backlog()
            batch = await self.queue.receive(self.settings.concurrency, wait_ms)
            if not batch:
                if idle_exit:
                    return
                continue
            self.metrics.in_flight.inc(len(batch))
            held = {m.id: m for m in batch}
            holding = asyncio.create_task(self._hold(held))
            try:
                await asyncio.gather(*(self._settle(m, held) for m in batch))
            finally:
                holding.cancel()
                self.metrics.in_flight.dec(len(batch))

    async def _settle(self, message: Message, held: dict[str, Message]) -> str:
        try:
            return await self.handle(message)
        finally:
            held.pop(message.id, None)

    async def _hold(self, held: dict[str, Message]) -> None:
        while held:
            await asyncio.sleep(self.calls.hold_seconds)
            try:
                await self.calls.hold(list(held.values()))
            except Exception as exc:  # the queue is failing: the claims may come; the call records still hold
                log.warning("cannot hold %d in-flight message(s): %s", len(held), exc)
