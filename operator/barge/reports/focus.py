"""FinOps FOCUS 1.2 cost and usage rows from the ledger's spend rows: what finance loads into its FinOps tools.

One row per (tenant, namespace, job, model, provider, charge period, token kind): the tokens are the row's
ConsumedQuantity (ConsumedUnit "Tokens"), priced per million (PricingUnit "1M Tokens"). The price table is the
operator's (list prices); a job's batch tokens are billed at the batch discount:

| column                         | value                                                                      |
| ------------------------------ | -------------------------------------------------------------------------- |
| ListCost                       | every token of the row at the list (synchronous) price                     |
| ContractedCost                 | = ListCost (Barge knows no negotiated rate)                                |
| EffectiveCost = BilledCost     | batch tokens at list x batchDiscount + synchronous tokens at list          |
| ListCost - EffectiveCost       | the batch discount                                                         |
| ChargePeriodStart/End          | the hour (or day, `period="day"`) the usage was recorded in, UTC           |
| BillingPeriodStart/End         | the UTC calendar month of the charge period                                |
| SubAccountId / SubAccountName  | the tenant                                                                 |
| ResourceId / ResourceName      | the job's ledger key (namespace/name/uid) / namespace/name                 |
| SkuId / SkuMeter / SkuPriceId  | the model / the token kind / model:kind                                    |
| Tags                           | JSON: barge.dev/tenant, barge.dev/namespace, barge.dev/job, barge.dev/schedule |

Columns Barge has no value for are present and empty (null), as the spec allows for conditional columns; Barge's
own columns carry the `x_` prefix the spec reserves for them, `x_FocusVersion` says "1.2" on every row.
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal

from barge.batch import prices
from barge.ledger.spend import SpendRow

FOCUS_VERSION = "1.2"
KINDS = ("input", "output", "cache_read", "cache_write")
METERS = {"input": "Input Tokens", "output": "Output Tokens", "cache_read": "Cache Read Tokens",
          "cache_write": "Cache Write Tokens"}  # fmt: skip
PROVIDERS = {  # provider type -> (ProviderName = PublisherName = InvoiceIssuerName, ServiceName)
    "anthropic": ("Anthropic", "Claude API"),
    "openai": ("OpenAI", "OpenAI API"),
    "azure-openai": ("Microsoft", "Azure OpenAI"),
    "mistral": ("Mistral AI", "Mistral API"),
    "gemini": ("Google", "Gemini API"),
    "vertex": ("Google", "Vertex AI"),
    "openai-compatible": ("Self-hosted", "OpenAI-compatible API"),
    "pool": ("Self-hosted", "Barge InferencePool"),
}
#: Every column written, in order: FOCUS 1.2 columns first, then Barge's own (x_).
COLUMNS = (
    "AvailabilityZone", "BilledCost", "BillingAccountId", "BillingAccountName", "BillingAccountType",
    "BillingCurrency", "BillingPeriodEnd", "BillingPeriodStart", "CapacityReservationId",
    "CapacityReservationStatus", "ChargeCategory", "ChargeClass", "ChargeDescription", "ChargeFrequency",
    "ChargePeriodEnd", "ChargePeriodStart", "CommitmentDiscountCategory", "CommitmentDiscountId",
    "CommitmentDiscountName", "CommitmentDiscountQuantity", "CommitmentDiscountStatus", "CommitmentDiscountType",
    "CommitmentDiscountUnit", "ConsumedQuantity", "ConsumedUnit", "ContractedCost", "ContractedUnitPrice",
    "EffectiveCost", "InvoiceId", "InvoiceIssuerName", "ListCost", "ListUnitPrice", "PricingCategory",
    "PricingCurrency", "PricingCurrencyContractedUnitPrice", "PricingCurrencyEffectiveCost",
    "PricingCurrencyListUnitPrice", "PricingQuantity", "PricingUnit", "ProviderName", "PublisherName",
    "RegionId", "RegionName", "ResourceId", "ResourceName", "ResourceType", "ServiceCategory", "ServiceName",
    "ServiceSubcategory", "SkuId", "SkuMeter", "SkuPriceDetails", "SkuPriceId", "SubAccountId", "SubAccountName",
    "SubAccountType", "Tags",
    "x_FocusVersion", "x_TokenKind", "x_BatchTokens", "x_SyncTokens", "x_Requests", "x_PriceTableVersion",
)  # fmt: skip

#: The typed columns (FOCUS 1.2's data types; every other column is a String): what a Parquet file stores them as.
DECIMALS = (
    "BilledCost", "CommitmentDiscountQuantity", "ConsumedQuantity", "ContractedCost", "ContractedUnitPrice",
    "EffectiveCost", "ListCost", "ListUnitPrice", "PricingCurrencyContractedUnitPrice",
    "PricingCurrencyEffectiveCost", "PricingCurrencyListUnitPrice", "PricingQuantity",
)  # fmt: skip
DATETIMES = ("BillingPeriodEnd", "BillingPeriodStart", "ChargePeriodEnd", "ChargePeriodStart")
KEYVALUES = ("SkuPriceDetails", "Tags")  # a JSON object of strings, as in the CSV
INTEGERS = ("x_BatchTokens", "x_SyncTokens", "x_Requests")
DATETIME_FORMAT = "%Y-%m-%dT%H:%M:%SZ"


@dataclass(frozen=True)
class Key:
    """What one FOCUS row is per (beside the token kind)."""

    tenant: str
    job: str
    model: str
    provider: str
    schedule: str
    start: int
    end: int

    @property
    def namespace(self) -> str:
        return self.names[0]

    @property
    def names(self) -> tuple[str, str]:
        """(namespace, namespace/name) of an operator job (ledger key namespace/name/uid); a local run's key
        (`barge run`: local:<manifest>:<namespace>/<name>) has no namespace and is named whole."""
        parts = self.job.split("/")
        if self.job.startswith("local:") or len(parts) != 3:
            return "", self.job
        return parts[0], f"{parts[0]}/{parts[1]}"


def _iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _month(ts: float) -> tuple[str, str]:
    start = datetime.fromtimestamp(ts, UTC).replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    end = start.replace(year=start.year + 1, month=1) if start.month == 12 else start.replace(month=start.month + 1)
    return start.strftime("%Y-%m-%dT%H:%M:%SZ"), end.strftime("%Y-%m-%dT%H:%M:%SZ")


def _decimal(value: Decimal) -> str:
    text = format(value.normalize(), "f") if value else "0"
    return text.rstrip("0").rstrip(".") if "." in text else text


def group(rows: Iterable[SpendRow], period: str = "hour") -> dict[Key, dict[str, list[int]]]:
    """(key) -> {via: [requests, input, output, cache read, cache write]}, hours folded into days for "day"."""
    if period not in ("hour", "day"):
        raise ValueError(f"charge period must be hour or day, not {period!r}")
    span = 3600 if period == "hour" else 86400
    out: dict[Key, dict[str, list[int]]] = {}
    for r in rows:
        start = r.hour - r.hour % span
        key = Key(r.tenant, r.job, r.model, r.provider, r.schedule, start, start + span)
        counted = out.setdefault(key, {}).setdefault(r.via, [0, 0, 0, 0, 0])
        for n, value in enumerate((r.requests, *r.usage)):
            counted[n] += value
    return out


def _unit_price(price: prices.Price | None, kind: str) -> Decimal:
    if price is None:
        return Decimal(0)
    return {"input": price.input, "output": price.output, "cache_read": price.cache_read,
            "cache_write": price.cache_write}[kind]  # fmt: skip


def build_rows(
    rows: Iterable[SpendRow],
    table: prices.PriceTable,
    *,
    period: str = "hour",
    billing_account: str = "barge",
    currency: str = "USD",
) -> list[dict[str, str]]:
    """The FOCUS rows (column -> text, "" for null) for these spend rows; a token kind with no tokens has none."""
    out = []
    for key, vias in sorted(group(rows, period).items(), key=lambda kv: (kv[0].start, kv[0].job, kv[0].model)):
        price = table.price(key.model)
        provider, service = PROVIDERS.get(key.provider, (key.provider or "unknown", key.provider or "unknown"))
        batch, sync = vias.get("batch", [0] * 5), vias.get("sync", [0] * 5)
        if "flex" in vias:  # sync answers at OpenAI's flex tier: billed at the batch rate
            batch = [x + y for x, y in zip(batch, vias["flex"], strict=True)]
        tags = {
            "barge.dev/tenant": key.tenant,
            "barge.dev/namespace": key.namespace,
            "barge.dev/job": key.names[1],
            "barge.dev/schedule": key.schedule,
        }
        billing_start, billing_end = _month(key.start)
        for n, kind in enumerate(KINDS, start=1):
            tokens_b, tokens_s = batch[n], sync[n]
            tokens = tokens_b + tokens_s
            if not tokens:
                continue
            unit = _unit_price(price, kind)
            listed = unit * tokens / prices.MILLION
            effective = (unit * tokens_b * table.batch_discount + unit * tokens_s) / prices.MILLION
            out.append(
                {
                    **dict.fromkeys(COLUMNS, ""),
                    "BilledCost": _decimal(effective),
                    "BillingAccountId": billing_account,
                    "BillingAccountName": billing_account,
                    "BillingCurrency": currency,
                    "BillingPeriodEnd": billing_end,
                    "BillingPeriodStart": billing_start,
                    "ChargeCategory": "Usage",
                    "ChargeDescription": f"{METERS[kind]} of {key.model} ({tokens_b} batch, {tokens_s} synchronous)",
                    "ChargeFrequency": "Usage-Based",
                    "ChargePeriodEnd": _iso(key.end),
                    "ChargePeriodStart": _iso(key.start),
                    "ConsumedQuantity": str(tokens),
                    "ConsumedUnit": "Tokens",
                    "ContractedCost": _decimal(listed),
                    "ContractedUnitPrice": _decimal(unit),
                    "EffectiveCost": _decimal(effective),
                    "InvoiceIssuerName": provider,
                    "ListCost": _decimal(listed),
                    "ListUnitPrice": _decimal(unit),
                    "PricingCategory": "Standard",
                    "PricingQuantity": _decimal(Decimal(tokens) / prices.MILLION),
                    "PricingUnit": "1M Tokens",
                    "ProviderName": provider,
                    "PublisherName": provider,
                    "ResourceId": key.job,
                    "ResourceName": key.names[1],
                    "ResourceType": "LLMBatchJob",
                    "ServiceCategory": "AI and Machine Learning",
                    "ServiceName": service,
                    "ServiceSubcategory": "Generative AI",
                    "SkuId": key.model,
                    "SkuMeter": METERS[kind],
                    "SkuPriceId": f"{key.model}:{kind}",
                    "SubAccountId": key.tenant,
                    "SubAccountName": key.tenant,
                    "SubAccountType": "Tenant",
                    "Tags": json.dumps(tags, sort_keys=True, separators=(",", ":")),
                    "x_FocusVersion": FOCUS_VERSION,
                    "x_TokenKind": kind,
                    "x_BatchTokens": str(tokens_b),
                    "x_SyncTokens": str(tokens_s),
                    "x_Requests": str(batch[0] + sync[0]),
                    "x_PriceTableVersion": table.version,
                }
            )
    return out


def to_csv(rows: Sequence[dict[str, str]]) -> str:
    """RFC 4180 CSV with a header of every column (`COLUMNS`), one line per row."""
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=COLUMNS, lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    return buffer.getvalue()
