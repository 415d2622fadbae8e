"""Prometheus metrics and the liveness endpoint, on one small aiohttp server.

Two sources, both exact: totals (requests by outcome, tokens, cost, savings, expired batches) are read from the
ledger at scrape time (item counts from the counts the ledger keeps as items change, ledger/summary.py, never a
scan of every item), so they survive restarts and never double count; states (jobs by phase, conditions of
running jobs, deadline slack, pools) are read from the objects' status as the watch delivers it, so they show
exactly what `kubectl get` shows, including terminal jobs after a restart. The alerts and the Grafana dashboard
in charts/barge/files/ read only these names (tests/integration/test_dashboard.py scrapes them for real).
A third, cached: the bytes of text the ledger holds per tenant are summed by the purge timer (operator/purge.py),
since that reads every text, and exported here with the age of the measurement.

Labels are bounded: tenant, namespace, model, provider, path, outcome, phase, condition, state, and a pool's
and worker's name (long-lived capacity, like a Deployment's); never a job name, a batch id or a custom id.
Per tenant and namespace, the deadline and success-ratio gauges describe the running job closest to trouble.
"""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from barge.api.batchjob import LLMBatchJobSpec
from barge.batch import prices
from barge.k8s.pool import PENDING_METRIC
from barge.ledger import lifetime, space
from barge.operator import ports, quota, reconcile_timer, second_door, tenant_metrics
from barge.operator.looplag import LagCollector, stuck
from barge.providers.base import Usage

if TYPE_CHECKING:
    from barge.operator.jobs import Context

PHASES = ("Pending", "Queued", "Submitting", "Running", "Retrying", "FallingBack", "Succeeded", "Failed", "Suspended")
TERMINAL = ("Succeeded", "Failed")
#: Conditions counted over running jobs (a terminal job is reported by its phase).
JOB_CONDITIONS = ("Admitted", "DeadlineExceeded", "BudgetExceeded", "StepFailed")
#: Step-fault reasons exported from the start (at 0), so an alert's increase() sees the first one.
ALERTED_FAULTS = ("LedgerError", "InternalError")
#: invalidOutput is not a state: items whose last answer broke spec.request.responseFormat (retrying or failed).
ITEM_STATES = ("total", "pending", "submitted", "succeeded", "refused", "invalid", "failed", "invalidOutput")
POOL_CONDITIONS = ("Ready", "Available", "Degraded", "QuotaCapped", "ScalingConflict")
KINDS = ("input", "output", "cache_read", "cache_write")
DEFAULT_RATIO = float(LLMBatchJobSpec.model_fields["success_ratio"].default)
#: The model label of every model the price table does not know (M2: free text must not make series).
OTHER_MODEL = "other"


def _timestamp(value: Any) -> float | None:
    try:
        return datetime.fromisoformat(str(value)).timestamp() if value else None
    except ValueError:
        return None


def _true(conditions: Any) -> frozenset[str]:
    return frozenset(str(c.get("type")) for c in conditions or [] if c.get("status") == "True")


@dataclass(frozen=True)
class JobView:
    """What the metrics need of one LLMBatchJob, copied from the object the watch delivered."""

    namespace: str
    tenant: str
    phase: str
    conditions: frozenset[str]
    deadline: float | None
    target: float
    counts: Mapping[str, int]
    started_at: float | None
    pool: str = ""
    """The InferencePool of a job with provider.type pool; empty otherwise."""
    not_admitted: str = ""
    """The reason of `Admitted=False` (e.g. NotFound while its pool is not Ready); empty when admitted."""

    @property
    def running(self) -> bool:
        return self.phase not in TERMINAL

    def ratio(self) -> float | None:
        """Items with a result among items finished (invalid and failed count against it); None before any."""
        good = self.counts.get("succeeded", 0) + self.counts.get("refused", 0)
        finished = good + self.counts.get("invalid", 0) + self.counts.get("failed", 0)
        return good / finished if finished else None

    def needed_seconds(self, now: float, batch_window: float) -> float:
        """Estimated time the remaining work needs: the items not finished at the pace of results so far
        (results since startedAt); before the first result, the batch window Barge plans a batch with."""
        remaining = self.counts.get("pending", 0) + self.counts.get("submitted", 0)
        if not remaining:
            return 0.0
        results = self.counts.get("succeeded", 0) + self.counts.get("refused", 0)
        if not results or self.started_at is None or now <= self.started_at:
            return batch_window
        return remaining * (now - self.started_at) / results


def view_job(body: Mapping[str, Any]) -> JobView:
    meta, spec, status = body.get("metadata") or {}, body.get("spec") or {}, body.get("status") or {}
    namespace = str(meta.get("namespace") or "")
    try:
        target = float(spec.get("successRatio") or DEFAULT_RATIO)
    except ValueError:
        target = DEFAULT_RATIO
    return JobView(
        namespace=namespace,
        # Never spec.tenant (free text a team could set to another team's name): the ledger's tenant, which
        # admission took from the namespace, replaces this for every job that was admitted.
        tenant=namespace,
        phase=str(status.get("phase") or "Pending"),
        conditions=_true(status.get("conditions")),
        deadline=_timestamp(spec.get("deadline")),
        target=target,
        counts={k: int(v) for k, v in (status.get("counts") or {}).items() if isinstance(v, int)},
        started_at=_timestamp(status.get("startedAt")),
        not_admitted=next(
            (
                str(c.get("reason"))
                for c in status.get("conditions") or []
                if c.get("type") == "Admitted" and c.get("status") == "False"
            ),
            "",
        ),
        pool=str(((spec.get("provider") or {}).get("poolRef") or {}).get("name") or "")
        if (spec.get("provider") or {}).get("type") == "pool"
        else "",
    )


@dataclass(frozen=True)
class PoolView:
    namespace: str
    name: str
    conditions: Mapping[str, bool]
    ready_replicas: int
    quota: Mapping[str, int]
    workers: tuple[tuple[str, int, int], ...]  # (worker, quotaCap, effectiveMaxReplicas)


def view_pool(body: Mapping[str, Any]) -> PoolView:
    meta, status = body.get("metadata") or {}, body.get("status") or {}
    return PoolView(
        namespace=str(meta.get("namespace") or ""),
        name=str(meta.get("name") or ""),
        conditions={str(c.get("type")): c.get("status") == "True" for c in status.get("conditions") or []},
        ready_replicas=int(status.get("readyReplicas") or 0),
        quota={k: int(v) for k, v in (status.get("quota") or {}).items() if isinstance(v, int)},
        workers=tuple(
            (str(w.get("name")), int(w.get("quotaCap") or 0), int(w.get("effectiveMaxReplicas") or 0))
            for w in status.get("workers") or []
        ),
    )


@dataclass
class Book:
    """The jobs and pools the watch has shown this operator, by uid; a DELETED event removes one."""

    jobs: dict[str, JobView] = field(default_factory=dict)
    pools: dict[str, PoolView] = field(default_factory=dict)

    def observe(self, event: Mapping[str, Any]) -> None:
        body = event.get("object") or {}
        meta = body.get("metadata") or {}
        kind, uid = str(body.get("kind") or ""), str(meta.get("uid") or "")
        book: dict[str, Any] = self.jobs if kind == "LLMBatchJob" else self.pools
        if event.get("type") == "DELETED":
            book.pop(uid, None)
        elif kind == "LLMBatchJob":
            self.jobs[uid] = view_job(body)
        elif kind == "InferencePool":
            self.pools[uid] = view_pool(body)


def _namespace(job_key: str) -> str:
    return job_key.split("/", 1)[0] if "/" in job_key else ""


class BargeCollector(Collector):
    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx

    def collect(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
        """With several shards (barge/sharding.py) each reports the objects of its own namespaces (the watch's
        book) and shard 0 alone the ledger-wide families (items, tokens, cost, cleanups, held text, space, tenant
        budgets): a sum over the shards' pods counts everything once."""
        now = time.time()
        if not self.ctx.config.shard.first:  # its jobs still labelled by the ledger's tenant, as on shard 0
            jobs = self.ctx.ledger.metric_rows(only=("jobs",))["jobs"]
            yield from self._jobs(now, {job.rsplit("/", 1)[-1]: tenant for job, tenant in jobs})
            yield from self._pools()
            yield self._pending()
            yield from self._errors()
            return
        rows = self.ctx.ledger.metric_rows()
        for name, more in lifetime.counted_elsewhere(self.ctx.ledger).items():  # purged jobs, unlisted lines
            rows[name] = [*rows[name], *more]
        # The ledger's tenant (what cost is metered by) wins over the object's, for jobs it already holds.
        tenant_of = {job.rsplit("/", 1)[-1]: tenant for job, tenant in rows["jobs"]}
        yield from self._jobs(now, tenant_of)
        yield from self._pools()
        yield self._pending()
        yield from self._errors()
        yield from self._ledger(rows, now)
        yield from self._cleanups(rows["cleanup"])
        yield from self._held(now)
        yield from self._space()
        yield from tenant_metrics.collect(self.ctx.ledger, self.ctx.config.policy.budgets, self.ctx.prices, now)
        yield from second_door.collect(self.ctx.doors)
        yield from reconcile_timer.collect(self.ctx.reconciled)

    def _errors(self) -> Iterator[CounterMetricFamily]:
        errors = CounterMetricFamily("barge_ledger_errors", "Engine steps that failed unexpectedly")
        errors.add_metric([], self.ctx.ledger_errors)
        yield errors
        step_errors = CounterMetricFamily(
            "barge_job_step_errors", "Job steps that failed, by fault reason (see batch/faults.py)", labels=["reason"]
        )
        for reason in sorted({*ALERTED_FAULTS, *self.ctx.step_errors}):
            step_errors.add_metric([reason], self.ctx.step_errors.get(reason, 0))
        yield step_errors

    def _space(self) -> Iterator[GaugeMetricFamily]:
        """The ledger's volume (SQLite; statvfs and file sizes, cheap at each scrape): alerts fire before planning
        is refused at the policy's floor (BargeLedgerSpaceLow) and once it is (BargeLedgerFull)."""
        ledger = self.ctx.ledger
        free = space.free_bytes(ledger)
        if free is None:
            return
        yield GaugeMetricFamily("barge_ledger_free_bytes", "Free bytes of the ledger's volume", value=free)
        yield GaugeMetricFamily(
            "barge_ledger_size_bytes", "Bytes of the ledger's database files", value=space.size_bytes(ledger) or 0
        )
        yield GaugeMetricFamily(
            "barge_ledger_min_free_bytes",
            "Free bytes below which no job is planned (the policy's ledger.minFreeBytes)",
            value=self.ctx.config.policy.ledger.min_free_bytes,
        )

    def _held(self, now: float) -> Iterator[GaugeMetricFamily]:
        """Texts still in the ledger, as last measured by the purge timer (no scan at scrape time)."""
        held = self.ctx.held
        if held is None:
            return
        text = GaugeMetricFamily(
            "barge_ledger_text_bytes",
            "Bytes of rendered prompts (payload) and model outputs (output) the ledger holds, at the last measurement",
            labels=["tenant", "kind"],
        )
        for (tenant, kind), n in sorted(held.bytes.items()):
            text.add_metric([tenant, kind], n)
        yield text
        yield GaugeMetricFamily(
            "barge_ledger_text_bytes_age_seconds",
            "Age of that measurement (the purge timer measures at each run)",
            value=now - held.at,
        )

    def _cleanups(self, rows: list[tuple[Any, ...]]) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
        """Provider copies (files, Anthropic batches) of ingested batches: deleted, or waiting to be."""
        labels = ["tenant", "provider"]
        deleted = CounterMetricFamily(
            "barge_provider_batches_deleted",
            "Batches whose provider copies Barge deleted after ingestion",
            labels=labels,
        )
        pending = GaugeMetricFamily(
            "barge_provider_cleanups_pending",
            "Ingested batches whose provider copies are not deleted yet",
            labels=labels,
        )
        counts: dict[tuple[str, str], dict[str, int]] = {}
        for tenant, provider, state, n in rows:
            counts.setdefault((tenant, provider), {})[state] = int(n)
        for key, states in sorted(counts.items()):
            deleted.add_metric(list(key), states.get("done", 0))
            pending.add_metric(list(key), states.get("", 0))
        yield deleted
        yield pending

    def _jobs(self, now: float, tenant_of: Mapping[str, str]) -> Iterator[GaugeMetricFamily]:
        # (tenant, namespace) -> its jobs, in one pass: a scrape stays linear in the number of jobs.
        groups: dict[tuple[str, str], list[JobView]] = {}
        for uid, v in list(self.ctx.book.jobs.items()):
            groups.setdefault((tenant_of.get(uid) or v.tenant, v.namespace), []).append(v)
        jobs = GaugeMetricFamily(
            "barge_jobs", "LLMBatchJobs by status phase (every phase listed)", labels=["tenant", "namespace", "phase"]
        )
        conds = GaugeMetricFamily(
            "barge_job_conditions",
            "Running (not Succeeded or Failed) LLMBatchJobs whose condition is True",
            labels=["tenant", "namespace", "condition"],
        )
        items = GaugeMetricFamily(
            "barge_job_items",
            "Items of running LLMBatchJobs, by state (invalidOutput: whose last answer broke the job's schema)",
            labels=["tenant", "namespace", "state"],
        )
        for (tenant, ns), mine in sorted(groups.items(), key=lambda group: group[0]):
            for phase in PHASES:
                jobs.add_metric([tenant, ns, phase], sum(1 for v in mine if v.phase == phase))
            running = [v for v in mine if v.running]
            for cond in JOB_CONDITIONS:
                conds.add_metric([tenant, ns, cond], sum(1 for v in running if cond in v.conditions))
            for state in ITEM_STATES:
                items.add_metric([tenant, ns, state], sum(v.counts.get(state, 0) for v in running))
        yield jobs
        yield conds
        yield items
        yield from self._deadlines(groups, now)
        yield from self._ratios(groups)

    def _deadlines(self, groups: Mapping[tuple[str, str], list[JobView]], now: float) -> Iterator[GaugeMetricFamily]:
        labels = ["tenant", "namespace"]
        slack = GaugeMetricFamily(
            "barge_deadline_slack_seconds",
            "Time left before the deadline of the running job closest to missing it (least slack minus work)",
            labels=labels,
        )
        needed = GaugeMetricFamily(
            "barge_remaining_work_seconds",
            "Estimated time the remaining items of that same job need (pace of results so far, else the batch window)",
            labels=labels,
        )
        worst: dict[tuple[str, str], tuple[float, float]] = {}
        window = self.ctx.config.min_batch_window
        for key, v in ((key, v) for key, mine in groups.items() for v in mine):
            if not v.running or v.deadline is None:
                continue
            left, need = v.deadline - now, v.needed_seconds(now, window)
            if key not in worst or left - need < worst[key][0] - worst[key][1]:
                worst[key] = (left, need)
        for key, (left, need) in sorted(worst.items()):
            slack.add_metric(list(key), left)
            needed.add_metric(list(key), need)
        yield slack
        yield needed

    def _ratios(self, groups: Mapping[tuple[str, str], list[JobView]]) -> Iterator[GaugeMetricFamily]:
        labels = ["tenant", "namespace"]
        ratio = GaugeMetricFamily(
            "barge_job_success_ratio",
            "Items with a result among finished items, of the running job furthest below its spec.successRatio",
            labels=labels,
        )
        target = GaugeMetricFamily(
            "barge_job_success_ratio_target", "spec.successRatio of that same job", labels=labels
        )
        worst: dict[tuple[str, str], tuple[float, float]] = {}
        for key, v in ((key, v) for key, mine in groups.items() for v in mine):
            got = v.ratio()
            if not v.running or got is None:
                continue
            if key not in worst or got - v.target < worst[key][0] - worst[key][1]:
                worst[key] = (got, v.target)
        for key, (got, want) in sorted(worst.items()):
            ratio.add_metric(list(key), got)
            target.add_metric(list(key), want)
        yield ratio
        yield target

    def _pools(self) -> Iterator[GaugeMetricFamily]:
        labels = ["namespace", "pool"]
        cond = GaugeMetricFamily(
            "barge_pool_condition", "1 when the InferencePool's condition is True", labels=[*labels, "condition"]
        )
        ready = GaugeMetricFamily("barge_pool_ready_replicas", "Ready vLLM replicas of the pool", labels=labels)
        rpm = GaugeMetricFamily(
            "barge_pool_quota_requests_per_minute", "The pool's spec.quota.requestsPerMinute (0: none)", labels=labels
        )
        tpm = GaugeMetricFamily(
            "barge_pool_quota_tokens_per_minute", "The pool's spec.quota.tokensPerMinute (0: none)", labels=labels
        )
        cap = GaugeMetricFamily(
            "barge_pool_worker_quota_cap",
            "Replicas the model quota allows a queue worker (0: no quota)",
            labels=[*labels, "worker"],
        )
        top = GaugeMetricFamily(
            "barge_pool_worker_max_replicas",
            "A queue worker's effective max replicas: min(maxReplicas, quota cap)",
            labels=[*labels, "worker"],
        )
        for p in sorted(self.ctx.book.pools.values(), key=lambda p: (p.namespace, p.name)):
            for name in POOL_CONDITIONS:
                cond.add_metric([p.namespace, p.name, name], float(p.conditions.get(name, False)))
            ready.add_metric([p.namespace, p.name], p.ready_replicas)
            rpm.add_metric([p.namespace, p.name], p.quota.get("requestsPerMinute", 0))
            tpm.add_metric([p.namespace, p.name], p.quota.get("tokensPerMinute", 0))
            for worker, quota_cap, effective in p.workers:
                cap.add_metric([p.namespace, p.name, worker], quota_cap)
                top.add_metric([p.namespace, p.name, worker], effective)
        yield from (cond, ready, rpm, tpm, cap, top)

    def _pending(self) -> GaugeMetricFamily:
        """Requests waiting for each pool: what wakes an engine pool from zero (its ScaledObject reads this)."""
        gauge = GaugeMetricFamily(
            PENDING_METRIC,
            "Items of pool-backed jobs not yet finished (pending, retrying, in flight); a job waiting for its pool "
            "(Admitted=False, NotFound) before reading its input counts 1",
            labels=["namespace", "pool"],
        )
        waiting = {(p.namespace, p.name): 0 for p in self.ctx.book.pools.values()}
        for v in list(self.ctx.book.jobs.values()):
            if not v.pool or not v.running or v.phase in ("Queued", "Suspended"):
                continue  # held by its schedule, or suspended: not waiting for the pool
            n = sum(v.counts.get(k, 0) for k in ("pending", "retrying", "submitted"))
            if not v.counts.get("total") and v.not_admitted == "NotFound":
                n = max(n, 1)  # its size is unknown until the pool serves it; an invalid spec wakes nothing
            key = (v.namespace, v.pool)
            waiting[key] = waiting.get(key, 0) + n
        for (namespace, pool), n in sorted(waiting.items()):
            gauge.add_metric([namespace, pool], n)
        return gauge

    def _model(self, model: str) -> str:
        """The model label: a model of the price table (the table's name for it: dated variants and any suffix
        share their entry's), else `other`. spec.provider.model is the tenant's free text, and every distinct
        value was a series for ever (REVIEW-3 M2); an admin who wants a model's own series prices it (BARGE_PRICES)."""
        table = self.ctx.prices.models
        if model in table:
            return model
        prefixes = [m for m in table if model.startswith(m)]
        return max(prefixes, key=len) if prefixes else OTHER_MODEL

    def _ledger(self, rows: Mapping[str, list[tuple[Any, ...]]], now: float) -> Iterator[Any]:
        ctx = self.ctx
        requests = CounterMetricFamily("barge_requests", "Items by outcome", labels=["tenant", "model", "outcome"])
        counted: dict[tuple[str, str, str], int] = {}
        for tenant, model, state, n in rows["items"]:
            outcome = (str(tenant), self._model(str(model)), str(state))
            counted[outcome] = counted.get(outcome, 0) + int(n)
        for outcome, n in sorted(counted.items()):
            requests.add_metric(list(outcome), n)
        yield requests
        tokens = CounterMetricFamily("barge_tokens", "Tokens billed", labels=["tenant", "model", "path", "kind"])
        cost = CounterMetricFamily("barge_cost_usd", "Cost in USD", labels=["tenant", "model", "path"])
        saved = CounterMetricFamily(
            "barge_saved_usd", "Batch usage at the synchronous price minus its batch cost", labels=["tenant", "model"]
        )
        savings: dict[tuple[str, str], float] = {}  # batch and flex usage at the sync price minus what it cost
        for path in ("batch", "sync", "flex"):  # flex: sync answers at OpenAI's flex tier, at the batch rate
            summed: dict[tuple[str, str], list[Any]] = {}  # (tenant, label) -> [usage..., cost, saved]
            for tenant, model, *usage in rows.get(path, ()):
                used = Usage(*(int(u) for u in usage))
                spent = ctx.prices.cost(str(model), used, batch=path in prices.BATCH_RATE)
                extra = ctx.prices.cost(str(model), used, batch=False) - spent
                total = summed.setdefault((str(tenant), self._model(str(model))), [0, 0, 0, 0, 0.0, 0.0])
                for i, value in enumerate(usage):
                    total[i] += int(value)
                total[4] += float(spent)
                total[5] += float(extra)
            for (tenant, label), total in sorted(summed.items()):
                for kind, value in zip(KINDS, total[:4], strict=True):
                    tokens.add_metric([tenant, label, path, kind], value)
                cost.add_metric([tenant, label, path], total[4])
                if path != "sync":
                    savings[(tenant, label)] = savings.get((tenant, label), 0.0) + total[5]
        for (tenant, label), value in sorted(savings.items()):
            saved.add_metric([tenant, label], value)
        yield from (tokens, cost, saved)
        tenants = dict(rows["jobs"])
        batches: dict[tuple[str, str, str], list[int]] = {}
        for job, provider, expired_batches, expired_requests in rows["expired"]:
            key = (tenants.get(job, ""), _namespace(job), provider)
            sums = batches.setdefault(key, [0, 0])
            sums[0] += int(expired_batches)
            sums[1] += int(expired_requests)
        labels = ["tenant", "namespace", "provider"]
        expired = CounterMetricFamily(
            "barge_batches_expired", "Provider batches in which requests expired (the provider's window)", labels=labels
        )
        lost = CounterMetricFamily("barge_requests_expired", "Requests that expired inside a batch", labels=labels)
        for key, (n_batches, n_requests) in sorted(batches.items()):
            expired.add_metric(list(key), n_batches)
            lost.add_metric(list(key), n_requests)
        yield expired
        yield lost
        age = GaugeMetricFamily(
            "barge_oldest_batch_age_seconds", "Age of the oldest batch in flight", labels=["provider"]
        )
        for provider, oldest in rows["live"]:
            if oldest is not None:
                age.add_metric([provider], now - float(oldest))
        yield age


async def start_server(ctx: Context, port: int, sock: socket.socket | None = None) -> web.AppRunner:
    """Serve /metrics and /healthz on `sock` (bound by the caller, ports.listen) or else on `port`."""
    sock = sock if sock is not None else ports.listen(port)  # a taken port raises PortUnavailable, naming it
    registry = CollectorRegistry()
    registry.register(BargeCollector(ctx))
    registry.register(LagCollector(ctx.lags))
    registry.register(quota.AdmissionCollector(ctx.queues, quota.queue_ttl(ctx.config.poll_seconds)))

    async def metrics(_: web.Request) -> web.Response:
        # The ledger is read in a thread: a scrape never holds the event loop the job daemons run on.
        body = await asyncio.to_thread(generate_latest, registry)
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})

    async def healthz(_: web.Request) -> web.Response:
        loops = stuck(ctx.lags)  # an engine loop blocked by one job's synchronous work (M10)
        if loops:
            return web.Response(status=503, text=f"engine loop(s) not waking up: {', '.join(loops)}")
        return web.Response(text="ok")

    app = web.Application()
    app.add_routes([web.get("/metrics", metrics), web.get("/healthz", healthz)])
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.SockSite(runner, sock).start()
    return runner
