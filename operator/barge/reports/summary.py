"""Spend per tenant and model, for `barge report`'s terminal table and its `--format csv`: a pure builder."""

from __future__ import annotations

import csv
import io
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from decimal import Decimal

from barge.batch import prices
from barge.ledger.spend import SpendRow
from barge.providers.base import Usage

HEADER = ("tenant", "model", "requests", "input", "output", "cache_read", "cache_write", "list_usd", "cost_usd",
          "saved_usd")  # fmt: skip


@dataclass
class Line:
    tenant: str
    model: str
    requests: int = 0
    usage: tuple[int, int, int, int] = (0, 0, 0, 0)
    list_usd: Decimal = Decimal(0)
    cost_usd: Decimal = Decimal(0)

    def cells(self) -> tuple[str, ...]:
        saved = self.list_usd - self.cost_usd
        money = (prices.money(self.list_usd), prices.money(self.cost_usd), prices.money(saved))
        return (self.tenant, self.model, str(self.requests), *map(str, self.usage), *money)


def by_tenant_model(rows: Iterable[SpendRow], table: prices.PriceTable) -> list[Line]:
    """One line per (tenant, model), sorted, with the tokens, the list cost, what was billed and the difference."""
    lines: dict[tuple[str, str], Line] = {}
    for r in rows:
        line = lines.setdefault((r.tenant, r.model), Line(r.tenant, r.model))
        line.requests += r.requests
        a, b, c, d = line.usage
        line.usage = (a + r.usage[0], b + r.usage[1], c + r.usage[2], d + r.usage[3])
        line.list_usd += table.cost(r.model, Usage(*r.usage), batch=False)
        line.cost_usd += table.cost(r.model, Usage(*r.usage), batch=r.via in prices.BATCH_RATE)
    return [lines[k] for k in sorted(lines)]


def to_csv(lines: Sequence[Line]) -> str:
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(HEADER)
    writer.writerows(line.cells() for line in lines)
    return buffer.getvalue()
