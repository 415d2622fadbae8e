"""Reconciliation: Barge's ledger against the provider's own cost report, per provider and UTC day (pure).

| column          | value                                                                                   |
| --------------- | --------------------------------------------------------------------------------------- |
| barge_usd       | the ledger's spend rows of that provider and day, at the operator's price table (batch  |
|                 | and flex tokens at the batch rate)                                                      |
| provider_usd    | the provider's cost report for that day (its whole workspace: what it will invoice)     |
| difference_usd  | provider_usd - barge_usd: > 0 the provider bills more than Barge counted                |
| barge_tokens / provider_tokens | tokens (input + output + cache) each side counted, for the reason of a difference |

A day only one side knows is still a line (the other side 0). Azure's ledger rows are compared under `openai` only
when asked (its bill is Azure's, not OpenAI's), so they are left out. A row is `mismatched` when |difference| is
above `threshold_usd` (the policy's; 0.01 by default).
"""

from __future__ import annotations

import csv
import io
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal

from barge.batch import prices
from barge.ledger.spend import SpendRow
from barge.providers.base import Usage
from barge.providers.usage_reports import ProviderDay

HEADER = ("provider", "day", "barge_usd", "provider_usd", "difference_usd", "barge_tokens", "provider_tokens")
BATCH_VIAS = frozenset({"batch", "flex"})  # billed at the batch rate (batch/prices.py BATCH_RATE)


@dataclass(frozen=True, slots=True)
class Line:
    provider: str
    day: str
    barge_usd: Decimal
    provider_usd: Decimal
    barge_tokens: int
    provider_tokens: int

    @property
    def difference_usd(self) -> Decimal:
        return self.provider_usd - self.barge_usd

    def mismatched(self, threshold_usd: Decimal) -> bool:
        return abs(self.difference_usd) > threshold_usd

    def cells(self) -> tuple[str, ...]:
        return (
            self.provider,
            self.day,
            prices.money(self.barge_usd),
            prices.money(self.provider_usd),
            prices.money(self.difference_usd),
            str(self.barge_tokens),
            str(self.provider_tokens),
        )


def _day(hour: int) -> str:
    return datetime.fromtimestamp(hour, UTC).strftime("%Y-%m-%d")


def ledger_days(
    rows: Iterable[SpendRow], table: prices.PriceTable, providers: Sequence[str]
) -> dict[tuple[str, str], tuple[Decimal, int]]:
    """(provider, day) -> (cost at `table`, tokens) of the ledger's rows of `providers`."""
    out: dict[tuple[str, str], tuple[Decimal, int]] = {}
    for r in rows:
        if r.provider not in providers:
            continue
        key = (r.provider, _day(r.hour))
        cost, tokens = out.get(key, (Decimal(0), 0))
        cost += table.cost(r.model, Usage(*r.usage), batch=r.via in BATCH_VIAS)
        out[key] = (cost, tokens + sum(r.usage))
    return out


def compare(
    rows: Iterable[SpendRow], table: prices.PriceTable, reported: Iterable[ProviderDay], providers: Sequence[str]
) -> list[Line]:
    """One line per (provider, day) either side knows, sorted."""
    ours = ledger_days(rows, table, providers)
    theirs: dict[tuple[str, str], tuple[Decimal, int]] = {}
    for d in reported:
        if d.provider in providers:
            cost, tokens = theirs.get((d.provider, d.day), (Decimal(0), 0))
            theirs[(d.provider, d.day)] = (cost + d.cost_usd, tokens + d.batch_tokens + d.other_tokens)
    lines = []
    for key in sorted(set(ours) | set(theirs)):
        (bc, bt), (pc, pt) = ours.get(key, (Decimal(0), 0)), theirs.get(key, (Decimal(0), 0))
        if bc == pc == 0 and bt == pt == 0:
            continue  # an empty day bucket on both sides
        lines.append(Line(key[0], key[1], bc, pc, bt, pt))
    return lines


def to_csv(lines: Sequence[Line]) -> str:
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(HEADER)
    writer.writerows(line.cells() for line in lines)
    return buffer.getvalue()
