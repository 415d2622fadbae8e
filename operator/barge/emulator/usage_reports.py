"""The providers' admin usage and cost reports, served from what this emulator actually processed.

| route                                       | face      | answer                                        |
| ------------------------------------------- | --------- | --------------------------------------------- |
| GET /v1/organization/usage/completions      | OpenAI    | per day, model and batch: tokens, requests    |
| GET /v1/organization/costs                  | OpenAI    | per day and line item: amount {value, usd}    |
| GET /v1/organizations/usage_report/messages | Anthropic | per day, model and service tier (batch / ...) |
| GET /v1/organizations/cost_report           | Anthropic | per day, model and tier: amount in cents      |

OpenAI's reports count the batches of the OpenAI face only: Azure's are on Azure's bill (emulator/azure_costs.py).
What counts: every request of an ended batch, at its answer's tokens (an error or a cancel is billed nothing),
on the day the batch ended, priced at the batch rate of the shipped price table (barge/batch/prices.yaml) times
the profile's `billing.overchargeRatio` (1 by default: the bill matches what was processed; 1.1 bills 10% more,
for the test that reconciliation shows it). Synchronous calls are not counted (the emulator keeps no per-call
usage). One day bucket per UTC day of the query window, empty ones included, as the providers answer.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

from aiohttp import web

from barge.batch import prices
from barge.emulator.core import STORE, Store
from barge.providers.base import Usage

DAY = 86400
Key = tuple[int, str, bool]  # (day start, model, batch)


def _processed(store: Store, faces: tuple[str, ...]) -> dict[Key, list[int]]:
    """(day, model, batch) -> [requests, input, output, cache_read, cache_write] of the ended batches of `faces`."""
    now = store.clock()
    out: dict[Key, list[int]] = {}
    for batch in store.batches.values():
        if batch.provider not in faces or not batch.ended(now):
            continue
        day = int(batch.end_at // DAY) * DAY
        for item, ans in batch.answers():
            row = out.setdefault((day, item.model, True), [0, 0, 0, 0, 0])
            row[0] += 1
            row[1] += ans.input_tokens
            row[2] += ans.output_tokens
            row[3] += ans.cache_read_tokens
            row[4] += ans.cache_write_tokens
    return out


def _cost(store: Store, model: str, counts: list[int], batch: bool) -> Decimal:
    usage = Usage(counts[1], counts[2], counts[3], counts[4])
    return prices.load().cost(model, usage, batch=batch) * Decimal(str(store.profile.billing_overcharge_ratio))


def _days(start: float, end: float) -> Iterator[int]:
    day = int(start // DAY) * DAY
    while day < end:
        yield day
        day += DAY


def _window(request: web.Request, unix: bool) -> tuple[float, float]:
    q = request.query
    try:
        if unix:
            start = float(q["start_time"])
            end = float(q.get("end_time") or start + 7 * DAY)
        else:
            start = _parse_iso(q["starting_at"])
            end = _parse_iso(q["ending_at"]) if q.get("ending_at") else start + 7 * DAY
    except (KeyError, ValueError) as exc:
        raise web.HTTPBadRequest(reason=f"invalid or missing time range: {exc}") from None
    if end <= start or end - start > 180 * DAY:
        raise web.HTTPBadRequest(reason="the time range must be positive and at most 180 days")
    return start, end


def _parse_iso(text: str) -> float:
    value = datetime.fromisoformat(text.replace("Z", "+00:00"))
    return (value if value.tzinfo else value.replace(tzinfo=UTC)).timestamp()


def _iso(when: int) -> str:
    return datetime.fromtimestamp(when, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _openai_page(start: float, end: float, results: dict[int, list[dict[str, Any]]]) -> web.Response:
    data = [
        {"object": "bucket", "start_time": d, "end_time": d + DAY, "results": results.get(d, [])}
        for d in _days(start, end)
    ]
    return web.json_response({"object": "page", "data": data, "has_more": False, "next_page": None})


async def openai_completions(request: web.Request) -> web.Response:
    start, end = _window(request, unix=True)
    results: dict[int, list[dict[str, Any]]] = {}
    for (day, model, batch), c in sorted(_processed(request.app[STORE], ("openai",)).items()):
        results.setdefault(day, []).append(
            {
                "object": "organization.usage.completions.result",
                "model": model,
                "batch": batch,
                "num_model_requests": c[0],
                "input_tokens": c[1] + c[3],  # OpenAI's input_tokens include the cached ones
                "input_cached_tokens": c[3],
                "output_tokens": c[2],
            }
        )
    return _openai_page(start, end, results)


async def openai_costs(request: web.Request) -> web.Response:
    start, end = _window(request, unix=True)
    store = request.app[STORE]
    results: dict[int, list[dict[str, Any]]] = {}
    for (day, model, batch), c in sorted(_processed(store, ("openai",)).items()):
        value = _cost(store, model, c, batch)
        results.setdefault(day, []).append(
            {
                "object": "organization.costs.result",
                "amount": {"value": float(value), "currency": "usd"},
                "line_item": f"{model}, {'batch' if batch else 'standard'}",
                "project_id": None,
            }
        )
    return _openai_page(start, end, results)


def _anthropic_page(start: float, end: float, results: dict[int, list[dict[str, Any]]]) -> web.Response:
    data = [
        {"starting_at": _iso(d), "ending_at": _iso(d + DAY), "results": results.get(d, [])} for d in _days(start, end)
    ]
    return web.json_response({"data": data, "has_more": False, "next_page": None})


async def anthropic_usage(request: web.Request) -> web.Response:
    start, end = _window(request, unix=False)
    results: dict[int, list[dict[str, Any]]] = {}
    for (day, model, batch), c in sorted(_processed(request.app[STORE], ("anthropic",)).items()):
        results.setdefault(day, []).append(
            {
                "model": model,
                "service_tier": "batch" if batch else "standard",
                "uncached_input_tokens": c[1],
                "output_tokens": c[2],
                "cache_read_input_tokens": c[3],
                "cache_creation": {"ephemeral_1h_input_tokens": c[4], "ephemeral_5m_input_tokens": 0},
            }
        )
    return _anthropic_page(start, end, results)


async def anthropic_costs(request: web.Request) -> web.Response:
    start, end = _window(request, unix=False)
    store = request.app[STORE]
    results: dict[int, list[dict[str, Any]]] = {}
    for (day, model, batch), c in sorted(_processed(store, ("anthropic",)).items()):
        cents = _cost(store, model, c, batch) * 100
        results.setdefault(day, []).append(
            {
                "currency": "USD",
                "amount": format(cents.normalize(), "f"),
                "model": model,
                "cost_type": "tokens",
                "service_tier": "batch" if batch else "standard",
            }
        )
    return _anthropic_page(start, end, results)


def routes() -> list[web.RouteDef]:
    return [
        web.get("/v1/organization/usage/completions", openai_completions),
        web.get("/v1/organization/costs", openai_costs),
        web.get("/v1/organizations/usage_report/messages", anthropic_usage),
        web.get("/v1/organizations/cost_report", anthropic_costs),
    ]
