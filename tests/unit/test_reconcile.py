"""reports/reconcile.py: the ledger's spend rows against the provider's cost report, per provider and day."""

from __future__ import annotations

from decimal import Decimal

from barge.batch import prices
from barge.ledger.spend import SpendRow
from barge.providers.usage_reports import ProviderDay
from barge.reports import reconcile

TABLE = prices.parse(
    {
        "version": "t",
        "batchDiscount": "0.5",
        "models": {"m": {"input": 2, "output": 10}, "n": {"input": 1, "output": 1}},
    }
)
DEC1 = 1764547200  # 2025-12-01T00:00:00Z


def row(provider: str, via: str, hour: int, usage: tuple[int, int, int, int], model: str = "m") -> SpendRow:
    return SpendRow("ns/job/uid", hour, via, "t", model, provider, "", 1, usage)


def test_batch_and_flex_at_the_batch_rate_sync_at_list_per_day() -> None:
    rows = [
        row("openai", "batch", DEC1, (1_000_000, 0, 0, 0)),  # $1 at the batch rate
        row("openai", "flex", DEC1 + 3600, (0, 100_000, 0, 0)),  # $0.50
        row("openai", "sync", DEC1 + 7200, (500_000, 0, 0, 0)),  # $1 at list
        row("openai", "batch", DEC1 + 86400, (0, 200_000, 0, 0)),  # next day: $1
    ]
    days = reconcile.ledger_days(rows, TABLE, ["openai"])
    assert days == {
        ("openai", "2025-12-01"): (Decimal("2.5"), 1_600_000),
        ("openai", "2025-12-02"): (Decimal(1), 200_000),
    }


def test_equal_bills_differ_by_zero_and_a_planted_difference_shows() -> None:
    rows = [row("anthropic", "batch", DEC1, (1_000_000, 0, 0, 0)), row("openai", "batch", DEC1, (0, 0, 0, 0))]
    reported = [
        ProviderDay("anthropic", "2025-12-01", Decimal("1.10"), batch_tokens=1_000_000),
        ProviderDay("openai", "2025-12-01", Decimal(0)),
        ProviderDay("openai", "2025-12-02", Decimal("0.30"), other_tokens=5),  # Barge knows nothing of it
        ProviderDay("mistral", "2025-12-01", Decimal(9)),  # not asked
    ]
    lines = reconcile.compare(rows, TABLE, reported, ["anthropic", "openai"])
    assert [(x.provider, x.day, x.barge_usd, x.provider_usd, x.difference_usd) for x in lines] == [
        ("anthropic", "2025-12-01", Decimal(1), Decimal("1.10"), Decimal("0.10")),
        ("openai", "2025-12-02", Decimal(0), Decimal("0.30"), Decimal("0.30")),
    ]
    assert [x.mismatched(Decimal("0.01")) for x in lines] == [True, True]
    assert not lines[0].mismatched(Decimal("0.10"))  # at the threshold: not above it
    exact = reconcile.compare(rows, TABLE, [ProviderDay("anthropic", "2025-12-01", Decimal(1))], ["anthropic"])
    assert [(x.difference_usd, x.mismatched(Decimal(0))) for x in exact] == [(Decimal(0), False)]


def test_barge_billing_more_than_the_provider_is_negative_and_csv_has_every_column() -> None:
    rows = [row("openai", "sync", DEC1, (0, 100_000, 0, 0))]  # $1
    lines = reconcile.compare(rows, TABLE, [ProviderDay("openai", "2025-12-01", Decimal("0.75"))], ["openai"])
    assert lines[0].difference_usd == Decimal("-0.25")
    text = reconcile.to_csv(lines).splitlines()
    assert text[0] == ",".join(reconcile.HEADER)
    assert text[1] == "openai,2025-12-01,1,0.75,-0.25,100000,0"


def test_other_providers_rows_are_left_out() -> None:
    rows = [row("azure", "batch", DEC1, (1_000_000, 0, 0, 0)), row("openai", "batch", DEC1, (0, 0, 0, 0), "n")]
    assert reconcile.compare(rows, TABLE, [], ["openai"]) == []
