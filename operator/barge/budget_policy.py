"""The admin's monthly budgets per tenant (and per namespace): the `budgets` section of the policy file.

Why the admin's: a job's `spec.budget` is written by the tenant, and bounds one job only (a team can run fifty
jobs of $50 each). A tenant budget bounds what all of a tenant's jobs spend in a calendar month, whatever their
own budgets say, and is priced with the operator's price table only: a price a tenant writes in its job or pool
(`spec.budget.price`, `spec.provider.price`) is the tenant's own word and cannot lower what counts against the
admin's budget.

| question                                   | answer                                                             |
| ------------------------------------------ | ------------------------------------------------------------------ |
| which limit applies to a job?              | `budgets.namespaces.<ns>` if listed (the namespace's own month),    |
|                                            | else `budgets.tenants.<tenant>`, else `budgets.default`, else none |
| what counts against it?                    | the month-to-date spend of every job of the tenant (or namespace)  |
|                                            | from the ledger, at the operator's prices, batch and sync          |
| which month?                               | the calendar month in `budgets.timeZone` (default UTC)             |
| when is a warning due?                     | at `warnAt` times the limit (default 0.8): metrics and alerts       |

Pure and parsed once, like barge/policy.py, which holds it as `Policy.budgets`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, tzinfo
from decimal import Decimal, InvalidOperation
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
DEFAULT_WARN_AT = Decimal("0.8")


@dataclass(frozen=True)
class MonthlyLimit:
    """One monthly budget: who it is for ("tenant", "namespace" or "default") and its figures."""

    scope: str
    """"tenant", "namespace" or "default" (the default applies to each tenant on its own)."""
    monthly_usd: Decimal
    warn_at: Decimal = DEFAULT_WARN_AT
    """Fraction of `monthly_usd` at which the warning alert fires."""


@dataclass(frozen=True)
class BudgetPolicy:
    default: MonthlyLimit | None = None
    tenants: tuple[tuple[str, MonthlyLimit], ...] = ()
    namespaces: tuple[tuple[str, MonthlyLimit], ...] = ()
    time_zone: str = "UTC"
    """IANA name of the zone whose calendar months the budgets count in."""

    @property
    def enabled(self) -> bool:
        return self.default is not None or bool(self.tenants) or bool(self.namespaces)

    def for_tenant(self, tenant: str) -> MonthlyLimit | None:
        return dict(self.tenants).get(tenant, self.default)

    def for_job(self, tenant: str, namespace: str) -> MonthlyLimit | None:
        """The limit a job of `tenant` in `namespace` counts against (see the table above)."""
        return dict(self.namespaces).get(namespace) or self.for_tenant(tenant)

    def zone(self) -> tzinfo:
        return UTC if self.time_zone == "UTC" else ZoneInfo(self.time_zone)

    def month(self, now: float) -> tuple[float, float]:
        """[start, end) of the calendar month holding `now` in the policy's zone, as Unix seconds."""
        local = datetime.fromtimestamp(now, self.zone())
        start = local.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
        end = start.replace(year=start.year + 1, month=1) if start.month == 12 else start.replace(month=start.month + 1)
        return start.timestamp(), end.timestamp()


DEFAULT = BudgetPolicy()


def _usd(value: Any, where: str) -> Decimal:
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise ValueError(f"policy {where} must be a number of USD")
    try:
        amount = Decimal(str(value))
    except InvalidOperation:
        raise ValueError(f"policy {where} must be a number of USD") from None
    if not amount.is_finite() or amount < 0:
        raise ValueError(f"policy {where} must be a non-negative number of USD")
    return amount


def _limit(entry: Any, scope: str, where: str) -> MonthlyLimit:
    if not isinstance(entry, Mapping) or set(entry) - {"monthlyUSD", "warnAt"} or "monthlyUSD" not in entry:
        raise ValueError(f"policy {where}: expected monthlyUSD and optional warnAt")
    warn = _usd(entry.get("warnAt", str(DEFAULT_WARN_AT)), f"{where}.warnAt")
    if warn > 1:
        raise ValueError(f"policy {where}.warnAt must be a fraction from 0 to 1")
    return MonthlyLimit(scope, _usd(entry["monthlyUSD"], f"{where}.monthlyUSD"), warn)


def _named(data: Any, scope: str, where: str) -> tuple[tuple[str, MonthlyLimit], ...]:
    out = []
    for name, entry in dict(data or {}).items():
        if not _NAME.match(str(name)):
            raise ValueError(f"policy {where}: {name!r} is not a DNS label")
        out.append((str(name), _limit(entry, scope, f"{where}.{name}")))
    return tuple(out)


def parse(data: Mapping[str, Any] | None) -> BudgetPolicy:
    """The `budgets` section: `{default: {monthlyUSD}, tenants: {<t>: {monthlyUSD, warnAt}}, namespaces: {...},
    timeZone}`."""
    data = dict(data or {})
    unknown = set(data) - {"default", "tenants", "namespaces", "timeZone"}
    if unknown:
        raise ValueError(f"unknown policy budgets key(s): {sorted(unknown)}")
    zone = data.get("timeZone", "UTC")
    if not isinstance(zone, str) or not zone:
        raise ValueError("policy budgets.timeZone must be an IANA time zone name")
    if zone != "UTC":
        try:
            ZoneInfo(zone)
        except (ZoneInfoNotFoundError, ValueError):
            raise ValueError(f"policy budgets.timeZone: unknown time zone {zone!r}") from None
    default = _limit(data["default"], "default", "budgets.default") if data.get("default") is not None else None
    return BudgetPolicy(
        default=default,
        tenants=_named(data.get("tenants"), "tenant", "budgets.tenants"),
        namespaces=_named(data.get("namespaces"), "namespace", "budgets.namespaces"),
        time_zone=zone,
    )
