"""barge_tenant_spend_usd / barge_tenant_budget_usd / barge_tenant_budget_warn_usd: the admin's monthly budgets.

Read at scrape time from the ledger's spend rows (ledger/spend.py) for the policy's current calendar month, priced
with the operator's table, the same figures admission counts (batch/tenant_budget.py): one range of the spend
index over this month, never the items. Tenants are those with spend this month and those the policy names; the
budget gauges only where a limit applies (a tenant's own, else `budgets.default`).
"""

from __future__ import annotations

from collections.abc import Iterator
from decimal import Decimal

from prometheus_client.core import GaugeMetricFamily

from barge.batch import prices
from barge.budget_policy import BudgetPolicy
from barge.ledger import Ledger, spend
from barge.providers.base import Usage


def month_to_date(ledger: Ledger, policy: BudgetPolicy, table: prices.PriceTable, now: float) -> dict[str, Decimal]:
    """tenant -> what it spent in the policy's current month, at the operator's prices."""
    out: dict[str, Decimal] = {}
    for tenant, model, via, usage in spend.all_tenants_usage(ledger, *policy.month(now)):
        out[tenant] = out.get(tenant, Decimal(0)) + table.cost(model, Usage(*usage), batch=via in prices.BATCH_RATE)
    return out


def collect(ledger: Ledger, policy: BudgetPolicy, table: prices.PriceTable, now: float) -> Iterator[GaugeMetricFamily]:
    spent = month_to_date(ledger, policy, table, now)
    tenants = sorted({*spent, *dict(policy.tenants)})
    spend_g = GaugeMetricFamily(
        "barge_tenant_spend_usd",
        f"What the tenant spent this calendar month ({policy.time_zone}), at the operator's prices",
        labels=["tenant"],
    )
    budget_g = GaugeMetricFamily(
        "barge_tenant_budget_usd", "The tenant's monthly budget (policy budgets)", labels=["tenant"]
    )
    warn_g = GaugeMetricFamily(
        "barge_tenant_budget_warn_usd", "The tenant's monthly budget times its warnAt", labels=["tenant"]
    )
    for tenant in tenants:
        spend_g.add_metric([tenant], float(spent.get(tenant, 0)))
        limit = policy.for_tenant(tenant)
        if limit is not None:
            budget_g.add_metric([tenant], float(limit.monthly_usd))
            warn_g.add_metric([tenant], float(limit.monthly_usd * limit.warn_at))
    yield spend_g
    yield budget_g
    yield warn_g
