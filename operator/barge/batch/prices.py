"""Cost: a versioned price table, estimates before submit, actual cost from usage, savings.

Money is Decimal end to end and rendered as a string: float cents drift when summed over 100k items.
Cache writes are priced at the 1-hour TTL rate Barge asks for (2x input on Anthropic).
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from barge.providers.base import Usage

MILLION = Decimal(1_000_000)
#: The ledger's `via` values billed at the batch rate: batches, and synchronous answers served at OpenAI's flex tier.
BATCH_RATE = frozenset({"batch", "flex"})
CENT_PLACES = Decimal("0.000001")


@dataclass(frozen=True)
class Price:
    input: Decimal
    output: Decimal
    cache_write: Decimal
    cache_read: Decimal
    cache_read_batched: bool = True
    """False: cached input costs `cache_read` in a batch too, not half of it (Gemini, where "the cache hit discount
    takes precedence over the batch discount": the two do not stack); prices.yaml `cacheStacksWithBatch: false`."""


@dataclass(frozen=True)
class PriceTable:
    version: str
    batch_discount: Decimal
    models: dict[str, Price]

    def price(self, model: str) -> Price | None:
        if model in self.models:
            return self.models[model]
        prefixes = sorted((m for m in self.models if model.startswith(m)), key=len, reverse=True)
        return self.models[prefixes[0]] if prefixes else None

    def with_price(self, model: str, price: Price) -> PriceTable:
        """This table with `model` priced as given (a job's own spec.budget.price)."""
        return PriceTable(self.version, self.batch_discount, {**self.models, model: price})

    def cost(self, model: str, usage: Usage, *, batch: bool) -> Decimal:
        """Cost of this usage; 0 for a model the table does not know (the status says so)."""
        price = self.price(model)
        if price is None:
            return Decimal(0)
        total = (
            usage.input_tokens * price.input
            + usage.output_tokens * price.output
            + usage.cache_write_tokens * price.cache_write
            + usage.cache_read_tokens * price.cache_read
        ) / MILLION
        if batch and not price.cache_read_batched:
            cached = usage.cache_read_tokens * price.cache_read / MILLION
            return (total - cached) * self.batch_discount + cached
        if batch:
            total *= self.batch_discount
        return total  # exact; rounded only for display (money), so sums never drift


def parse(data: dict[str, Any]) -> PriceTable:
    models = {
        name: Price(
            Decimal(str(p["input"])),
            Decimal(str(p["output"])),
            Decimal(str(p.get("cacheWrite", "0"))),
            Decimal(str(p.get("cacheRead", "0"))),
            bool(p.get("cacheStacksWithBatch", True)),
        )
        for name, p in (data.get("models") or {}).items()
    }
    return PriceTable(str(data.get("version", "custom")), Decimal(str(data.get("batchDiscount", "0.5"))), models)


def load(path: Path | None = None) -> PriceTable:
    if path is not None:
        return parse(yaml.safe_load(path.read_text()))
    text = resources.files("barge.batch").joinpath("prices.yaml").read_text()
    return parse(yaml.safe_load(text))


def money(value: Decimal) -> str:
    """USD as shown in status: at most 6 decimals, no exponent, no trailing zeros."""
    text = format(value.quantize(CENT_PLACES), "f").rstrip("0").rstrip(".")
    return text or "0"
