"""The policy's `budgets` section (barge/budget_policy.py): which limit a job falls under, the calendar month in
the policy's zone, and every malformed entry refused at start-up with the key that is wrong."""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal

import pytest

from barge import budget_policy, policy


def test_which_limit_applies() -> None:
    p = budget_policy.parse(
        {
            "default": {"monthlyUSD": 100},
            "tenants": {"claims-team": {"monthlyUSD": "2000.50", "warnAt": 0.9}},
            "namespaces": {"claims-lab": {"monthlyUSD": 5}},
        }
    )
    assert p.enabled
    assert p.for_job("claims-team", "claims") == budget_policy.MonthlyLimit(
        "tenant", Decimal("2000.50"), Decimal("0.9")
    )
    assert p.for_job("claims-team", "claims-lab") == budget_policy.MonthlyLimit("namespace", Decimal(5))
    assert p.for_job("search-team", "search") == budget_policy.MonthlyLimit("default", Decimal(100))
    assert budget_policy.parse({"tenants": {"a": {"monthlyUSD": 1}}}).for_job("b", "b") is None
    assert not budget_policy.parse(None).enabled
    assert policy.parse({"budgets": {"default": {"monthlyUSD": 3}}}).budgets.for_tenant("x") is not None


def test_the_month_is_the_policy_zones_calendar_month() -> None:
    utc, tokyo = budget_policy.parse({}), budget_policy.parse({"timeZone": "Asia/Tokyo"})
    at = datetime(2026, 12, 31, 20, 0, tzinfo=UTC).timestamp()  # already 1 January in Tokyo
    assert utc.month(at) == (
        datetime(2026, 12, 1, tzinfo=UTC).timestamp(),
        datetime(2027, 1, 1, tzinfo=UTC).timestamp(),
    )
    start, end = tokyo.month(at)
    assert datetime.fromtimestamp(start, UTC) == datetime(2026, 12, 31, 15, 0, tzinfo=UTC)
    assert datetime.fromtimestamp(end, UTC) == datetime(2027, 1, 31, 15, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    ("section", "error"),
    [
        ({"tenant": {}}, "unknown policy budgets key"),
        ({"timeZone": "Mars/Olympus"}, "unknown time zone"),
        ({"default": {"monthlyUSD": -1}}, "budgets.default.monthlyUSD must be a non-negative"),
        ({"default": {"monthlyUSD": True}}, "budgets.default.monthlyUSD must be a number"),
        ({"default": {"monthlyUSD": "NaN"}}, "budgets.default.monthlyUSD must be a non-negative"),
        ({"default": {}}, "budgets.default: expected monthlyUSD"),
        ({"tenants": {"a": {"monthlyUSD": 1, "warnAt": 1.5}}}, "budgets.tenants.a.warnAt must be a fraction"),
        ({"tenants": {"Not_A_Label": {"monthlyUSD": 1}}}, "is not a DNS label"),
        ({"namespaces": {"ns": {"monthlyUSD": 1, "cap": 2}}}, "budgets.namespaces.ns: expected monthlyUSD"),
    ],
)
def test_malformed_budgets_are_refused(section: dict[str, object], error: str) -> None:
    with pytest.raises(ValueError, match=error):
        policy.parse({"budgets": section})
