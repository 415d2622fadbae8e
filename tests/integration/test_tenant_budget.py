"""Tenant budgets (#31.1): the admin's monthly limit per tenant, read from the ledger's spend rows, holds at
admission, on the synchronous path, and counts only the policy's calendar month. Real SDK adapters against the
emulator, a real SQLite ledger."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path

import pytest

from barge import budget_policy
from barge.batch import prices, tenant_budget
from barge.batch.runner import JobRunner
from barge.ledger import ItemUpdate, Ledger, spend
from barge.policy import Refused
from tests.conftest import Factory, state
from tests.integration.test_engine import FAST, provider_for, run_to_end
from tests.integration.test_robustness_money import claims, job_of

MODEL = "claude-sonnet-4-6"


def budgets(usd: object, tenant: str = "t", **extra: object) -> budget_policy.BudgetPolicy:
    return budget_policy.parse({"tenants": {tenant: {"monthlyUSD": usd, "warnAt": 0.5}}, **extra})


def spent_in_ledger(ledger: Ledger, key: str, table: prices.PriceTable) -> Decimal:
    batch, sync = ledger.usage(key)
    from barge.providers.base import Usage

    return table.cost(MODEL, Usage(*batch), batch=True) + table.cost(MODEL, Usage(*sync), batch=False)


async def test_spend_rows_equal_the_ledger_and_a_second_job_is_refused_past_the_month(
    start_emulator: Factory, tmp_path: Path
) -> None:
    emu = start_emulator()
    table = prices.load()
    ledger = Ledger(str(tmp_path / "l.db"))
    first = job_of(tmp_path / "a", "anthropic", MODEL, claims(30, 200))
    snap = await run_to_end(
        JobRunner(first, provider_for("anthropic", emu.url), ledger, table, FAST, budgets=budgets(5))
    )
    assert snap.phase == "Succeeded"
    now = datetime.now(UTC).timestamp()
    month = budgets(5).month(now)
    rows = spend.tenant_usage(ledger, "t", *month)
    batch, _sync = ledger.usage(first.key)
    assert [(m, via, tuple(u)) for m, via, _, u in rows] == [(MODEL, "batch", batch)]
    assert rows[0][2] == 30  # answered requests
    spent = tenant_budget.month_spend(ledger, budgets(5), table, "t", "t", now)
    assert spent == spent_in_ledger(ledger, first.key, table) > 0

    # the same tenant, a budget that the first job's spend already fills: the second job is not admitted
    tight = budgets(str(spent + Decimal("0.000001")))
    second = job_of(tmp_path / "b", "anthropic", MODEL, claims(30, 200))
    runner = JobRunner(second, provider_for("anthropic", emu.url), ledger, table, FAST, budgets=tight)
    batches_before = len(state(emu)["batches"])
    with pytest.raises(Refused) as refused:
        await runner.step()
    assert refused.value.policy == "TenantBudgetExceeded"
    assert f"spent ${prices.money(spent)} this month" in refused.value.message
    assert "monthly budget" in refused.value.message
    assert "tenant 't'" in refused.value.message
    assert len(state(emu)["batches"]) == batches_before
    assert ledger.batches_of(second.key) == []
    # another tenant's budget does not count the first tenant's spend
    other = JobRunner(second, provider_for("anthropic", emu.url), ledger, table, FAST, budgets=budgets("0.000001", "u"))
    assert other.budget.tenant is None
    # raised by the admin: admitted and run
    snap = await run_to_end(
        JobRunner(second, provider_for("anthropic", emu.url), ledger, table, FAST, budgets=budgets(5))
    )
    assert snap.phase == "Succeeded"


async def test_sync_fallback_stops_at_the_tenant_budget(start_emulator: Factory, tmp_path: Path) -> None:
    """Past the deadline at full price: only what the tenant's month has room for is sent, the rest fail with
    tenant_budget_exceeded; the job has no budget of its own."""
    emu = start_emulator()
    past = (datetime.now(UTC) - timedelta(minutes=1)).isoformat()
    table = prices.load()
    price = table.price(MODEL)
    assert price is not None
    per_item_upper = (53 * price.input + 50 * price.output) / 1_000_000
    limit = per_item_upper * 20 + per_item_upper / 2
    job = job_of(tmp_path, "anthropic", MODEL, claims(40, 200), deadline=past, successRatio="0.9")
    ledger = Ledger(str(tmp_path / "l.db"))
    events: list[tuple[str, str]] = []
    runner = JobRunner(
        job,
        provider_for("anthropic", emu.url),
        ledger,
        table,
        FAST,
        budgets=budgets(str(limit)),
        on_event=lambda reason, message, kind: events.append((reason, message)),
    )
    snap = await run_to_end(runner)
    assert snap.phase == "Failed"
    assert state(emu)["sync_requests"] == 20
    assert tenant_budget.month_spend(ledger, budgets(1), table, "t", "t", datetime.now(UTC).timestamp()) <= limit
    failures = [json.loads(x) for x in (tmp_path / "out" / "failures.jsonl").read_text().splitlines()]
    assert len(failures) == 20
    assert {f["error_type"] for f in failures} == {"tenant_budget_exceeded"}
    assert any(r == "TenantBudgetExceeded" and "20 items not sent synchronously" in m for r, m in events)


def test_spend_rows_follow_the_writes_that_record_usage(ledger_url: str) -> None:
    """On SQLite and PostgreSQL: a batch chunk's usage lands in its batch and in the job's spend row in one
    transaction, a sync page's in the sync row; the provider is the batch's, else the job's."""
    ledger = Ledger(ledger_url)
    ledger.ensure_job("ns/j/1", "h", "t", MODEL, provider="anthropic")
    ledger.record_batch("ns/j/1", "s1", "b1", "anthropic", 1, 2, "in_progress", 0.0)
    ledger.apply(
        "ns/j/1",
        [
            ItemUpdate("c1", "succeeded", via="batch", output="x", usage=(100, 10, 5, 1)),
            ItemUpdate("c2", "succeeded", via="batch", output="y", usage=(200, 20, 0, 0)),
        ],
        batch_id="b1",
    )
    ledger.apply("ns/j/1", [ItemUpdate("c3", "succeeded", via="sync", output="z", usage=(7, 3, 0, 0))])
    ledger.apply("ns/j/1", [ItemUpdate("c4", "failed", "overloaded", "no answer")])  # no usage: no row
    rows = {(r.via, r.provider, r.requests, r.usage) for r in spend.rows_between(ledger, 0, 2**40)}
    assert rows == {("batch", "anthropic", 2, (300, 30, 5, 1)), ("sync", "anthropic", 1, (7, 3, 0, 0))}
    batch, _ = ledger.usage("ns/j/1")
    assert batch == (300, 30, 5, 1)
    assert spend.tenant_usage(ledger, "t", 0, 2**40) == [
        (MODEL, "batch", 2, (300, 30, 5, 1)),
        (MODEL, "sync", 1, (7, 3, 0, 0)),
    ]


def test_only_the_policy_calendar_month_counts(tmp_path: Path) -> None:
    """Spend recorded in the last hour of November (UTC) counts for November only; in America/New_York that
    hour still belongs to November too, while 04:30 UTC on 1 December is still November there."""
    ledger = Ledger(str(tmp_path / "l.db"))
    ledger.ensure_job("ns/j/1", "h", "t", MODEL, provider="anthropic")
    late_nov = datetime(2026, 11, 30, 23, 30, tzinfo=UTC).timestamp()
    early_dec = datetime(2026, 12, 1, 4, 30, tzinfo=UTC).timestamp()
    with ledger.engine.begin() as conn:
        cursor = conn.connection.dbapi_connection.cursor()  # type: ignore[union-attr]
        spend.record(cursor, False, "ns/j/1", "sync", None, (1, 1_000_000, 0, 0, 0), late_nov)
        spend.record(cursor, False, "ns/j/1", "sync", None, (1, 2_000_000, 0, 0, 0), early_dec)
        spend.record(cursor, False, "ns/j/1", "sync", None, (0, 0, 0, 0, 0), early_dec)  # nothing: no row
    table = prices.load()
    price = table.price(MODEL)
    assert price is not None
    utc, ny = budgets(100), budgets(100, timeZone="America/New_York")
    dec_15 = datetime(2026, 12, 15, tzinfo=UTC).timestamp()
    assert tenant_budget.month_spend(ledger, utc, table, "t", "ns", dec_15) == 2 * price.input
    assert tenant_budget.month_spend(ledger, utc, table, "t", "ns", late_nov) == 1 * price.input
    assert tenant_budget.month_spend(ledger, ny, table, "t", "ns", dec_15) == 0
    assert tenant_budget.month_spend(ledger, ny, table, "t", "ns", early_dec) == 3 * price.input
    # a namespace budget counts that namespace's jobs only
    per_ns = budget_policy.parse({"namespaces": {"other": {"monthlyUSD": 1}}})
    assert tenant_budget.month_spend(ledger, per_ns, table, "t", "other", dec_15) == 0
    assert len(spend.rows_between(ledger, late_nov, dec_15)) == 2
