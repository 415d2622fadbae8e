"""The synchronous `POST /v1/responses` of the emulator (OpenAI's Responses API; shapes in responses.py)."""

from __future__ import annotations

from aiohttp import web

from barge.emulator import flex
from barge.emulator.core import answer, answer_response, sync_call
from barge.emulator.openai_shapes import billing_error, error, store_of
from barge.emulator.responses import item_from_responses, response_json


async def create_response(request: web.Request) -> web.Response:
    """The synchronous `POST /v1/responses`: quota, latency, faults and the flex tier as for chat completions."""
    store = store_of(request)
    if store.profile.billing_error:
        return billing_error()
    try:
        body = await request.json()
    except ValueError:
        return error(400, "We could not parse the JSON body of your request.")
    if not isinstance(body, dict):
        return error(400, "The body must be a JSON object.")
    if body.get("stream") or body.get("background"):
        return error(400, "stream and background: the emulator answers in the call", param="stream")
    item = item_from_responses("sync", body)
    if item.invalid:
        return error(400, item.invalid)
    outcome = await (flex.flex_call if flex.asks_flex(body) else sync_call)(request.app, item)
    if outcome == flex.UNAVAILABLE:
        return flex.unavailable()
    if isinstance(outcome, float):
        return error(
            429,
            "Rate limit reached for requests",
            type_="requests",
            code="rate_limit_exceeded",
            headers={"retry-after": str(max(1, round(outcome)))},
        )
    if outcome == "server_error":
        return error(500, "The server had an error while processing your request.", type_="server_error")
    ans = answer(item, outcome, cache_hit=False)
    if ans.outcome == "invalid_request":
        return error(400, ans.message)
    payload = response_json(item, ans, f"resp_sync_{store.sync_requests}", store.clock())
    payload["service_tier"] = flex.tier_of(body)
    return answer_response(payload, ans, store.sync_requests)


def routes() -> list[web.RouteDef]:
    return [web.post("/v1/responses", create_response)]
