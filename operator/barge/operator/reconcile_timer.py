"""The operator's reconciliation timer: every `reconcile.intervalSeconds` of the admin's policy (daily by default),
compare the ledger with each provider's own usage and cost report for the last `reconcile.days` complete UTC days
(reports/reconcile.py), with the admin key read from the marked Secret the policy names.

Exported as `barge_reconcile_difference_usd{provider, day}` (provider's cost - Barge's; 0 for a day both agree
on, so the alert sees every day compared) and `barge_reconcile_threshold_usd{provider, day}` (the policy's
thresholdUSD, on the same series), which the alert BargeBillingMismatch compares. Off unless the policy lists a
provider. A provider whose report or Secret cannot be read is logged, counted in
`barge_reconcile_errors_total{provider}` and keeps its last figures. A provider with no daily bill to read
(mistral: usage_reports.NOT_AVAILABLE) is logged as `not available for <provider>: <reason>` and exports no
difference at all (never a 0 that would read as "agrees"). azure-openai's "admin key" is a service principal's
client secret; its tenant, client and Cost Management scope are in the policy.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from barge.ledger import spend
from barge.providers import azure_costs, usage_reports
from barge.reconcile_policy import AdminKey
from barge.reports import reconcile

if TYPE_CHECKING:
    from barge.operator.jobs import Context

log = logging.getLogger("barge.operator")
DAY = 86400


@dataclass
class Reconciled:
    """What the last comparison found: (provider, day) -> difference in USD, and failures per provider."""

    differences: dict[tuple[str, str], float] = field(default_factory=dict)
    thresholds: dict[tuple[str, str], float] = field(default_factory=dict)
    errors: dict[str, int] = field(default_factory=dict)
    unavailable: dict[str, str] = field(default_factory=dict)
    """provider -> why its bill cannot be compared (no series is exported for it)."""


def azure_scope(admin: AdminKey) -> azure_costs.AzureScope | None:
    if admin.provider != "azure-openai":
        return None
    return azure_costs.AzureScope(
        admin.tenant_id,
        admin.client_id,
        admin.scope,
        admin.base_url or azure_costs.MANAGEMENT_URL,
        admin.login_url or azure_costs.LOGIN_URL,
    )


async def reconcile_once(ctx: Context, now: float) -> list[reconcile.Line]:
    """Compare the last `days` complete UTC days of every provider the policy names; returns the lines compared."""
    rules = ctx.config.policy.reconcile
    today = int(now // DAY) * DAY
    lo, hi = today - rules.days * DAY, today
    out: list[reconcile.Line] = []
    rows = await asyncio.to_thread(spend.rows_between, ctx.ledger, lo, hi)
    for admin in rules.providers:
        if admin.provider in usage_reports.NOT_AVAILABLE:
            reason = f"not available for {admin.provider}: {usage_reports.NOT_AVAILABLE[admin.provider]}"
            ctx.reconciled.unavailable[admin.provider] = reason
            log.warning("reconciliation %s", reason)
            continue
        try:
            key = await ctx.kube.secret_value(admin.namespace, admin.name, admin.key)  # Refused unless marked
            reported = await asyncio.to_thread(
                usage_reports.fetch_days, admin.provider, key, admin.base_url, lo, hi, azure=azure_scope(admin)
            )
        except Exception:
            log.exception("reconciliation with %s failed; its last figures stay", admin.provider)
            ctx.reconciled.errors[admin.provider] = ctx.reconciled.errors.get(admin.provider, 0) + 1
            continue
        lines = reconcile.compare(rows, ctx.prices, reported, [admin.provider])
        found = {line.day: line for line in lines}
        for day in range(lo, hi, DAY):
            name = datetime.fromtimestamp(day, UTC).strftime("%Y-%m-%d")
            line = found.get(name)
            ctx.reconciled.differences[(admin.provider, name)] = float(line.difference_usd) if line else 0.0
            ctx.reconciled.thresholds[(admin.provider, name)] = float(rules.threshold_usd)
        mismatched = [x for x in lines if x.mismatched(rules.threshold_usd)]
        for x in mismatched:
            log.warning(
                "billing mismatch with %s on %s: provider $%s, Barge $%s (difference $%s)",
                x.provider, x.day, x.provider_usd, x.barge_usd, x.difference_usd,
            )  # fmt: skip
        out += lines
    oldest = datetime.fromtimestamp(lo, UTC).strftime("%Y-%m-%d")
    for stale in [k for k in ctx.reconciled.differences if k[1] < oldest]:
        del ctx.reconciled.differences[stale]  # days out of the window leave the gauges
        ctx.reconciled.thresholds.pop(stale, None)
    return out


async def run(ctx: Context) -> None:
    """Until cancelled (the operator's cleanup): compare at start, then every intervalSeconds."""
    while True:
        try:
            lines = await reconcile_once(ctx, time.time())
            log.info("reconciliation: %d provider-days compared", len(lines))
        except Exception:
            log.exception("reconciliation failed")
        await asyncio.sleep(ctx.config.policy.reconcile.interval_seconds)


def collect(state: Reconciled) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
    diff = GaugeMetricFamily(
        "barge_reconcile_difference_usd",
        "Provider's cost report minus Barge's ledger cost, per provider and UTC day (policy reconcile)",
        labels=["provider", "day"],
    )
    for (provider, day), value in sorted(state.differences.items()):
        diff.add_metric([provider, day], value)
    yield diff
    threshold = GaugeMetricFamily(
        "barge_reconcile_threshold_usd",
        "Policy reconcile.thresholdUSD per provider and day",
        labels=["provider", "day"],
    )
    for (provider, day), value in sorted(state.thresholds.items()):
        threshold.add_metric([provider, day], value)
    yield threshold
    errors = CounterMetricFamily(
        "barge_reconcile_errors",
        "Comparisons whose provider report or admin key could not be read",
        labels=["provider"],
    )
    for provider, n in sorted(state.errors.items()):
        errors.add_metric([provider], n)
    yield errors
