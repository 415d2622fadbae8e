"""The providers' own usage and cost reports, read with an admin key, for reconciliation (reports/reconcile.py).

| provider  | cost (what it will invoice)             | usage (tokens, batch split)                         |
| --------- | --------------------------------------- | --------------------------------------------------- |
| openai    | GET /v1/organization/costs (admin SDK)  | GET /v1/organization/usage/completions (model, batch) |
| anthropic | GET /v1/organizations/cost_report       | GET /v1/organizations/usage_report/messages         |
|           | (generic get; amounts in cents)         | (service_tier batch vs standard)                    |
| azure-openai | Cost Management Query, daily ActualCost (azure_costs.py, plain HTTP) | none: meters, not tokens |
| mistral   | not available (NOT_AVAILABLE says why)  |                                                     |
| gemini    | not available (NOT_AVAILABLE says why)  |                                                     |

Both are read per UTC day (bucket_width 1d), every page. The pinned openai SDK has an admin client
(`client.admin.organization.usage`); the pinned anthropic SDK has only its beta analytics reports, so the
Admin API's usage and cost report are read with the SDK's generic `get`. The admin key is used for these reads only.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

from barge.providers import azure_costs

DAY = 86400

#: Providers Barge runs batches on whose own bill cannot be compared per UTC day, and why: reconciliation says so
#: (`not available for <provider>: <reason>`) and exports no difference for them, never a silent 0.
NOT_AVAILABLE = {
    "mistral": "Mistral's Admin API (GET /api/admin/usage, beta, Enterprise plans only) reports cost per billing "
    "month (month and year), not per UTC day; Barge compares per day",
    "gemini": "the Gemini API has no usage or cost report of its own: Google bills it through Cloud Billing "
    "(a project's BigQuery billing export), which an API key cannot read",
}


class NotAvailable(ValueError):
    """The provider has no usage or cost report Barge can compare with (the message is the reason)."""


@dataclass(frozen=True, slots=True)
class ProviderDay:
    """One provider's figures for one UTC day (`day`: YYYY-MM-DD)."""

    provider: str
    day: str
    cost_usd: Decimal
    batch_tokens: int = 0
    other_tokens: int = 0


def day_of(when: float) -> str:
    return datetime.fromtimestamp(when, UTC).strftime("%Y-%m-%d")


def _iso(when: float) -> str:
    return datetime.fromtimestamp(when, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _merge(days: dict[str, list[Any]], day: str, cost: Decimal = Decimal(0), batch: int = 0, other: int = 0) -> None:
    row = days.setdefault(day, [Decimal(0), 0, 0])
    row[0] += cost
    row[1] += batch
    row[2] += other


def _out(provider: str, days: dict[str, list[Any]]) -> list[ProviderDay]:
    return [ProviderDay(provider, d, v[0], v[1], v[2]) for d, v in sorted(days.items())]


def _pages(fetch: Any) -> Iterator[Any]:
    page: str | None = None
    for _ in range(1000):  # a report of a few months is a handful of pages; never loop on a broken cursor
        answer = fetch(page)
        yield answer
        page = _field(answer, "next_page")
        if not _field(answer, "has_more") or not page:
            return


def _field(obj: Any, name: str) -> Any:
    return obj.get(name) if isinstance(obj, dict) else getattr(obj, name, None)


def openai_days(client: Any, start: float, end: float) -> list[ProviderDay]:
    """OpenAI's costs and completions usage per day, with an `openai.OpenAI` client made with `admin_api_key`."""
    usage = client.admin.organization.usage
    days: dict[str, list[Any]] = {}
    window = {"start_time": int(start), "end_time": int(end), "bucket_width": "1d", "limit": 31}
    for answer in _pages(lambda p: usage.costs(**window, **({"page": p} if p else {}))):
        for bucket in answer.data:
            day = day_of(bucket.start_time)
            for r in bucket.results:
                amount = getattr(r, "amount", None)
                value = getattr(amount, "value", None) if amount is not None else None
                if value is not None:
                    _merge(days, day, cost=Decimal(str(value)))
    group = {**window, "group_by": ["model", "batch"]}
    for answer in _pages(lambda p: usage.completions(**group, **({"page": p} if p else {}))):
        for bucket in answer.data:
            day = day_of(bucket.start_time)
            for r in bucket.results:
                tokens = int(getattr(r, "input_tokens", 0) or 0) + int(getattr(r, "output_tokens", 0) or 0)
                if getattr(r, "batch", None):
                    _merge(days, day, batch=tokens)
                else:
                    _merge(days, day, other=tokens)
    return _out("openai", days)


def anthropic_days(client: Any, start: float, end: float) -> list[ProviderDay]:
    """Anthropic's cost report (amounts in cents, as decimal strings) and messages usage report per day, with an
    `anthropic.Anthropic` client made with the admin key (generic get: the pinned SDK has no client for them)."""
    days: dict[str, list[Any]] = {}
    window: dict[str, Any] = {"starting_at": _iso(start), "ending_at": _iso(end), "bucket_width": "1d", "limit": 31}

    def get(path: str, params: dict[str, Any], page: str | None) -> Any:
        query = {**params, **({"page": page} if page else {})}
        return client.get(path, cast_to=object, options={"params": query})

    for answer in _pages(lambda p: get("/v1/organizations/cost_report", window, p)):
        for bucket in answer.get("data") or []:
            day = str(bucket.get("starting_at", ""))[:10]
            for r in bucket.get("results") or []:
                if str(r.get("currency", "USD")).upper() == "USD" and r.get("amount") is not None:
                    _merge(days, day, cost=Decimal(str(r["amount"])) / 100)
    usage = {**window, "group_by": ["model", "service_tier"]}
    for answer in _pages(lambda p: get("/v1/organizations/usage_report/messages", usage, p)):
        for bucket in answer.get("data") or []:
            day = str(bucket.get("starting_at", ""))[:10]
            for r in bucket.get("results") or []:
                creation = r.get("cache_creation") or {}
                tokens = sum(
                    int(r.get(k) or 0) for k in ("uncached_input_tokens", "cache_read_input_tokens", "output_tokens")
                ) + sum(int(v or 0) for v in creation.values())
                if r.get("service_tier") == "batch":
                    _merge(days, day, batch=tokens)
                else:
                    _merge(days, day, other=tokens)
    return _out("anthropic", days)


def fetch_days(
    provider: str,
    admin_key: str,
    base_url: str | None,
    start: float,
    end: float,
    *,
    azure: azure_costs.AzureScope | None = None,
) -> list[ProviderDay]:
    """The provider's figures per day for [start, end), read with its admin key (made into a client here: the only
    module that may import the SDKs). For azure-openai `admin_key` is the service principal's client secret and
    `azure` says whose and which scope. A provider in NOT_AVAILABLE raises NotAvailable with the reason."""
    if provider in NOT_AVAILABLE:
        raise NotAvailable(f"not available for {provider}: {NOT_AVAILABLE[provider]}")
    if provider == "azure-openai":
        if azure is None:
            raise ValueError(
                "azure-openai reconciliation needs the service principal's tenant and client ids and a scope"
            )
        costs = azure_costs.fetch(azure, admin_key, start, end)
        return [ProviderDay(provider, day, cost) for day, cost in sorted(costs.items())]
    if provider == "openai":
        import openai

        oa = openai.OpenAI(api_key="unused", admin_api_key=admin_key, base_url=base_url, max_retries=2)
        try:
            return openai_days(oa, start, end)
        finally:
            oa.close()
    if provider == "anthropic":
        import anthropic

        an = anthropic.Anthropic(api_key=admin_key, base_url=base_url, max_retries=2)
        try:
            return anthropic_days(an, start, end)
        finally:
            an.close()
    raise ValueError(f"no usage and cost report is read for provider {provider!r} (openai, anthropic, azure-openai)")
