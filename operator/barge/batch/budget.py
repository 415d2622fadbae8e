"""A job's budget: what it may still spend, checked before every batch and every synchronous call.

Why apart from the runner: the same rule has to hold on three paths (first submission, resubmission, the
synchronous fallback), and each used to decide alone; the fallback did not check at all, and a model missing
from the price table cost 0, so a budget on it never triggered. Here: a job with a budget on a model without a
price is not admitted (its own `spec.budget.price`, its provider pool's `spec.provider.price`, or the operator's
table must name one; in that order), estimates are upper
bounds (every item's estimated input plus `max_tokens` of output), and what was spent comes from the ledger.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from barge.api.batchjob import LLMBatchJobSpec
from barge.api.common import ModelPrice
from barge.batch import prices
from barge.ledger import ItemUpdate, Ledger
from barge.providers.base import Usage

if TYPE_CHECKING:
    from barge.batch.tenant_budget import TenantCap

Event = Callable[[str, str, str], None]
BUDGET = "budget_exceeded"
TENANT_BUDGET = "tenant_budget_exceeded"
TENANT_EXCEEDED = "TenantBudgetExceeded"


def job_prices(
    table: prices.PriceTable, spec: LLMBatchJobSpec, model: str, pool_price: ModelPrice | None = None
) -> prices.PriceTable:
    """The price table a job is costed with: the operator's, with the job's own price for its model if it has one,
    else its provider pool's (`pool_price`)."""
    given = (spec.budget.price if spec.budget else None) or pool_price
    if given is None:
        return table
    return table.with_price(
        model,
        prices.Price(
            Decimal(given.input), Decimal(given.output), Decimal(given.cache_write), Decimal(given.cache_read)
        ),
    )


def missing_price_message(model: str, spec: LLMBatchJobSpec) -> str:
    pool = spec.provider.pool_ref.name if spec.provider.type == "pool" and spec.provider.pool_ref else ""
    where = f", in spec.provider.price of InferencePool {pool!r} (a provider pool)" if pool else ""
    return (
        f"spec.budget is set but no price is known for model {model!r}: give it in spec.budget.price{where} "
        "(USD per million input/output tokens) or add the model to the operator's price table"
    )


class Budget:
    def __init__(
        self,
        ledger: Ledger,
        key: str,
        spec: LLMBatchJobSpec,
        model: str,
        table: prices.PriceTable,
        tenant: TenantCap | None = None,
    ) -> None:
        self.ledger, self.key, self.spec, self.model, self.table = ledger, key, spec, model, table
        self.tenant = tenant
        """The admin's monthly budget the job falls under (batch/tenant_budget.py), if any."""

    @property
    def unpriced(self) -> bool:
        """A budget that could never trigger: the model has no price."""
        return self.spec.budget is not None and self.table.price(self.model) is None

    def missing_price_message(self) -> str:
        return missing_price_message(self.model, self.spec)

    def estimate(self, *, batch: bool, states: tuple[str, ...] = ("pending", "submitting", "submitted")) -> Decimal:
        """Upper bound: estimated input tokens plus max_tokens of output for every item in `states`."""
        tokens, count = self.ledger.estimate_inputs(self.key, states)
        usage = Usage(input_tokens=tokens, output_tokens=count * self.spec.request.output_bound)
        return self.table.cost(self.model, usage, batch=batch)

    def spent(self) -> Decimal:
        batch, sync = self.ledger.usage(self.key)
        return self.table.cost(self.model, Usage(*batch), batch=True) + self.table.cost(
            self.model, Usage(*sync), batch=False
        )

    def hold(self, *, sync_only: bool) -> bool:
        """Refuse to submit anything while the estimate is over budget (the job waits for a larger budget)."""
        budget = self.spec.budget
        if budget is None or self.ledger.batches_of(self.key) or not (self.ledger.job(self.key) or {}).get("planned"):
            return False
        return self.unpriced or self.estimate(batch=not sync_only) > budget.max_cost

    def within(self, on_event: Event) -> bool:
        """Resubmissions stop when what was spent plus what remains would pass the budget (the job's, then the
        tenant's)."""
        return self._within_job(on_event) and self._within_tenant(on_event)

    def _within_tenant(self, on_event: Event) -> bool:
        cap = self.tenant
        if cap is None or not self.ledger.batches_of(self.key):
            return True
        tokens, count = self.ledger.estimate_inputs(self.key, ("pending",))
        if not count:
            return True
        spent, remaining = cap.spent(), cap.cost(tokens, count * self.spec.request.output_bound, batch=True)
        if spent + remaining <= cap.limit.monthly_usd:
            return True
        reason = cap.message(spent, remaining, "to go")
        left = [
            ItemUpdate(cid, "failed", TENANT_BUDGET, reason)
            for _, cid in self.ledger.iter_items(self.key, "custom_id", ("pending",))
        ]
        self.ledger.apply(self.key, left)
        on_event(TENANT_EXCEEDED, f"{len(left)} items not resubmitted: {reason}", "Warning")
        return False

    def _within_job(self, on_event: Event) -> bool:
        budget = self.spec.budget
        if budget is None or not self.ledger.batches_of(self.key):
            return True
        spent = self.spent()
        remaining = self.estimate(batch=True, states=("pending",))
        if not self.unpriced and spent + remaining <= budget.max_cost:
            return True
        reason = (
            self.missing_price_message()
            if self.unpriced
            else f"budget: spent ${prices.money(spent)} + ${prices.money(remaining)} to go > ${budget.max_cost_usd}"
        )
        left = [
            ItemUpdate(cid, "failed", BUDGET, reason)
            for _, cid in self.ledger.iter_items(self.key, "custom_id", ("pending",))
        ]
        self.ledger.apply(self.key, left)
        on_event("BudgetExceeded", f"{len(left)} items not resubmitted: {reason}", "Warning")
        return False

    def split_sync(self, rows: Sequence[tuple[Any, ...]], on_event: Event) -> list[tuple[Any, ...]]:
        """The synchronous path stops at the budget like batches do: `rows` (line, custom_id, payload, est_tokens,
        attempts) in line order are sent while spent + batches still in flight + their estimate at the
        synchronous price fit; the rest are failed with `budget_exceeded`. Returns the rows to send."""
        rows = self._split_sync_tenant(self._split_sync_job(rows, on_event), on_event)
        return rows

    def _split_sync_tenant(self, rows: list[tuple[Any, ...]], on_event: Event) -> list[tuple[Any, ...]]:
        cap = self.tenant
        if cap is None or not rows:
            return rows
        tokens, count = self.ledger.estimate_inputs(self.key, ("submitting", "submitted"))
        spent = cap.spent()
        room = cap.limit.monthly_usd - spent - cap.cost(tokens, count * self.spec.request.output_bound, batch=True)
        for n, row in enumerate(rows):
            cost = cap.cost(int(row[3]), self.spec.request.output_bound, batch=False)
            if cost > room:
                reason = cap.message(cap.limit.monthly_usd - room, cost, "for the next synchronous request")
                left = [ItemUpdate(r[1], "failed", TENANT_BUDGET, reason) for r in rows[n:]]
                self.ledger.apply(self.key, left)
                on_event(TENANT_EXCEEDED, f"{len(left)} items not sent synchronously: {reason}", "Warning")
                return rows[:n]
            room -= cost
        return rows

    def _split_sync_job(self, rows: Sequence[tuple[Any, ...]], on_event: Event) -> list[tuple[Any, ...]]:
        budget = self.spec.budget
        if budget is None:
            return list(rows)
        room = budget.max_cost - self.spent() - self.estimate(batch=True, states=("submitting", "submitted"))
        send: list[tuple[Any, ...]] = []
        for n, row in enumerate(rows):
            usage = Usage(input_tokens=int(row[3]), output_tokens=self.spec.request.output_bound)
            cost = self.table.cost(self.model, usage, batch=False)
            if self.unpriced or cost > room:
                reason = (
                    self.missing_price_message()
                    if self.unpriced
                    else f"budget: ${prices.money(budget.max_cost - room)} spent or in flight; the synchronous path "
                    f"would pass ${budget.max_cost_usd}"
                )
                left = [ItemUpdate(r[1], "failed", BUDGET, reason) for r in rows[n:]]
                self.ledger.apply(self.key, left)
                on_event("BudgetExceeded", f"{len(left)} items not sent synchronously: {reason}", "Warning")
                break
            room -= cost
            send.append(row)
        return send
