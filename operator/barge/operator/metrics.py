"""Prometheus metrics and the liveness endpoint, on one small aiohttp server.

Totals (requests by outcome, tokens and cost by tenant, model and path) are read from the ledger at scrape
time, so they are exact, survive restarts and never double count. Labels are bounded: tenant, model,
provider, path, outcome, phase; never a job name or a batch id.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import TYPE_CHECKING

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from barge.providers.base import Usage

if TYPE_CHECKING:
    from barge.operator.jobs import Context

PHASES = ("Pending", "Submitting", "Running", "Retrying", "FallingBack", "Succeeded", "Failed", "Suspended")
KINDS = ("input", "output", "cache_read", "cache_write")


class BargeCollector(Collector):
    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx

    def collect(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
        ctx = self.ctx
        jobs = GaugeMetricFamily("barge_jobs", "LLMBatchJobs known to this operator, by phase", labels=["phase"])
        for phase in PHASES:
            jobs.add_metric([phase], sum(1 for p, _, _ in ctx.phases.values() if p == phase))
        yield jobs
        slack = GaugeMetricFamily(
            "barge_deadline_slack_seconds",
            "Smallest time left before the deadline among running jobs, per tenant",
            labels=["tenant"],
        )
        per_tenant: dict[str, float] = {}
        for phase, tenant, left in ctx.phases.values():
            if left is not None and phase not in ("Succeeded", "Failed"):
                per_tenant[tenant] = min(per_tenant.get(tenant, left), left)
        for tenant, left in sorted(per_tenant.items()):
            slack.add_metric([tenant], left)
        yield slack
        errors = CounterMetricFamily("barge_ledger_errors", "Engine steps that failed unexpectedly")
        errors.add_metric([], ctx.ledger_errors)
        yield errors
        rows = ctx.ledger.metric_rows()
        requests = CounterMetricFamily("barge_requests", "Items by outcome", labels=["tenant", "model", "outcome"])
        for tenant, model, state, n in rows["items"]:
            requests.add_metric([tenant, model, state], n)
        yield requests
        tokens = CounterMetricFamily("barge_tokens", "Tokens billed", labels=["tenant", "model", "path", "kind"])
        cost = CounterMetricFamily("barge_cost_usd", "Cost in USD", labels=["tenant", "model", "path"])
        for path in ("batch", "sync"):
            for tenant, model, *usage in rows[path]:
                for kind, value in zip(KINDS, usage, strict=True):
                    tokens.add_metric([tenant, model, path, kind], value)
                spent = ctx.prices.cost(model, Usage(*(int(u) for u in usage)), batch=path == "batch")
                cost.add_metric([tenant, model, path], float(spent))
        yield tokens
        yield cost
        age = GaugeMetricFamily(
            "barge_oldest_batch_age_seconds", "Age of the oldest batch in flight", labels=["provider"]
        )
        now = time.time()
        for provider, oldest in rows["live"]:
            if oldest is not None:
                age.add_metric([provider], now - float(oldest))
        yield age


async def start_server(ctx: Context, port: int) -> web.AppRunner:
    registry = CollectorRegistry()
    registry.register(BargeCollector(ctx))

    async def metrics(_: web.Request) -> web.Response:
        return web.Response(body=generate_latest(registry), headers={"Content-Type": CONTENT_TYPE_LATEST})

    async def healthz(_: web.Request) -> web.Response:
        return web.Response(text="ok")

    app = web.Application()
    app.add_routes([web.get("/metrics", metrics), web.get("/healthz", healthz)])
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "0.0.0.0", port).start()
    return runner
