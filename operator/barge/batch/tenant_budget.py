"""A tenant's monthly budget (the admin's `budgets` policy) as one job sees it: admission, resubmission, sync.

Why beside batch/budget.py and not in it: a job budget is the tenant's own word about one job, priced with the
job's prices; this is the admin's word about every job of a tenant (or namespace) in a calendar month, priced with
the operator's table only (a price in a job or pool spec is tenant-written and never lowers what counts here). The
three checks mirror the job budget's:

| when                                   | rule                                                                    |
| -------------------------------------- | ----------------------------------------------------------------------- |
| before the job sends anything          | month-to-date spend + the job's estimate (upper bound) <= the limit,    |
|                                        | else `Refused("TenantBudgetExceeded")`: Admitted=False, figures in the  |
|                                        | message; checked again every step (a new month admits it)               |
| before a resubmission                  | spend + what remains pending <= the limit, else those items fail        |
| on the synchronous path                | each request is sent only while spend + batches in flight + it fit      |

Spend is read from the ledger (`spend_hours`, ledger/spend.py): shared by replicas, kept across restarts. A model
the operator's table has no price for cannot be held to a budget: such a job is refused under a tenant budget,
as a job budget refuses it (batch/budget.py).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from decimal import Decimal

from barge.batch import prices
from barge.budget_policy import BudgetPolicy, MonthlyLimit
from barge.ledger import Ledger, spend
from barge.policy import Refused
from barge.providers.base import Usage

EXCEEDED = "TenantBudgetExceeded"
#: error_type of items a tenant budget stopped (the job budget's is `budget_exceeded`).
ITEM_ERROR = "tenant_budget_exceeded"


def cost_of(table: prices.PriceTable, rows: list[tuple[str, str, int, tuple[int, ...]]]) -> Decimal:
    """What (model, via, requests, usage) rows cost at `table`'s prices (a model without a price costs 0)."""
    total = Decimal(0)
    for model, via, _requests, usage in rows:
        total += table.cost(model, Usage(*usage), batch=via in prices.BATCH_RATE)
    return total


def month_spend(
    ledger: Ledger, policy: BudgetPolicy, table: prices.PriceTable, tenant: str, namespace: str, now: float
) -> Decimal:
    """Month-to-date spend counted against the limit a job of `tenant` in `namespace` falls under."""
    start, end = policy.month(now)
    if namespace in dict(policy.namespaces):
        return cost_of(table, spend.namespace_usage(ledger, namespace, start, end))
    return cost_of(table, spend.tenant_usage(ledger, tenant, start, end))


class TenantCap:
    """The tenant limit one job falls under, read against the ledger at each check."""

    def __init__(
        self,
        ledger: Ledger,
        policy: BudgetPolicy,
        limit: MonthlyLimit,
        table: prices.PriceTable,
        key: str,
        tenant: str,
        model: str,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.ledger, self.policy, self.limit, self.table = ledger, policy, limit, table
        self.key, self.tenant, self.model, self.clock = key, tenant, model, clock
        self.namespace = key.split("/", 1)[0]

    @property
    def who(self) -> str:
        if self.limit.scope == "namespace":
            return f"namespace {self.namespace!r}"
        return f"tenant {self.tenant!r}"

    def spent(self) -> Decimal:
        return month_spend(self.ledger, self.policy, self.table, self.tenant, self.namespace, self.clock())

    def cost(self, input_tokens: int, output_tokens: int, *, batch: bool) -> Decimal:
        return self.table.cost(self.model, Usage(input_tokens=input_tokens, output_tokens=output_tokens), batch=batch)

    def started(self) -> bool:
        """The job sent something already (a batch recorded, or sync usage): it was admitted."""
        if self.ledger.batches_of(self.key):
            return True
        return bool(self.ledger._rows("SELECT 1 FROM spend_hours WHERE job = ? LIMIT 1", (self.key,)))

    def admit(self, estimate_tokens: tuple[int, int], *, batch: bool) -> None:
        """Before the job's first request: Refused unless spend + its estimate fits. `estimate_tokens`: (input
        tokens, output tokens) of everything it would send."""
        if self.started():
            return
        if self.table.price(self.model) is None:
            raise Refused(
                EXCEEDED,
                f"{self.who} has a monthly budget of ${self.limit.monthly_usd} but the operator's price table has "
                f"no price for model {self.model!r}, so the job's cost cannot be counted against it",
            )
        spent = self.spent()
        estimate = self.cost(*estimate_tokens, batch=batch)
        if spent + estimate > self.limit.monthly_usd:
            raise Refused(
                EXCEEDED,
                f"{self.who}: spent ${prices.money(spent)} this month + this job's estimate "
                f"${prices.money(estimate)} > monthly budget ${self.limit.monthly_usd} ({self.policy.time_zone} "
                "calendar month); admitted when it fits (a larger budget or a new month)",
            )

    def room(self) -> Decimal:
        return self.limit.monthly_usd - self.spent()

    def message(self, spent: Decimal, more: Decimal, what: str) -> str:
        return (
            f"tenant budget: {self.who} spent ${prices.money(spent)} this month + ${prices.money(more)} {what} "
            f"> ${self.limit.monthly_usd}"
        )


def cap_for(
    ledger: Ledger,
    policy: BudgetPolicy | None,
    table: prices.PriceTable,
    key: str,
    tenant: str,
    model: str,
    clock: Callable[[], float] = time.time,
) -> TenantCap | None:
    """The cap a job falls under, or None where the policy sets no budget for it."""
    if policy is None or not policy.enabled:
        return None
    limit = policy.for_job(tenant, key.split("/", 1)[0])
    return None if limit is None else TenantCap(ledger, policy, limit, table, key, tenant, model, clock)
