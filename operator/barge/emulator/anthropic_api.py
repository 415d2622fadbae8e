"""Anthropic Messages and Message Batches, as the `anthropic` SDK sees them (shapes per PROVIDERS.md)."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime
from typing import Any

import orjson
from aiohttp import web

from barge.emulator.core import (
    BATCH_EXPIRY_SECONDS,
    STORE,
    Answer,
    Batch,
    Item,
    Store,
    answer,
    answer_response,
    item_from_messages,
    status_word,
    stream_bytes,
    sync_call,
    valid_custom_id,
)

MAX_REQUESTS = 100_000
MAX_BYTES = 256 * 1024 * 1024
CREDIT_MESSAGE = "Your credit balance is too low to access the Anthropic API. Please go to Plans & Billing."
ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    500: "api_error",
    529: "overloaded_error",
}


def error(status: int, message: str, headers: dict[str, str] | None = None) -> web.Response:
    body = {"type": "error", "error": {"type": ERROR_TYPES[status], "message": message}}
    return web.json_response(body, status=status, headers=headers)


def rfc3339(ts: float | None) -> str | None:
    if ts is None:
        return None
    return datetime.fromtimestamp(ts, UTC).isoformat().replace("+00:00", "Z")


def batch_json(batch: Batch, now: float, base: str) -> dict[str, Any]:
    ended = batch.ended(now)
    return {
        "id": batch.id,
        "type": "message_batch",
        "processing_status": status_word(batch, now),
        "request_counts": batch.counts(now),
        "created_at": rfc3339(batch.created_at),
        "expires_at": rfc3339(batch.created_at + BATCH_EXPIRY_SECONDS),
        "ended_at": rfc3339(batch.end_at) if ended else None,
        "cancel_initiated_at": rfc3339(batch.cancel_at),
        "archived_at": None,
        "results_url": f"{base}/v1/messages/batches/{batch.id}/results" if ended else None,
    }


def content_blocks(ans: Answer, msg_id: str) -> list[dict[str, Any]]:
    """A forced tool's call is a tool_use block (its input the minimal instance of the tool's input_schema)."""
    if ans.tool_call is not None:
        name, arguments = ans.tool_call
        return [{"type": "tool_use", "id": f"toolu_{msg_id}", "name": name, "input": arguments}]
    return [{"type": "text", "text": ans.text}] if ans.text else []


def message_json(item: Item, ans: Answer, msg_id: str) -> dict[str, Any]:
    return {
        "id": msg_id,
        "type": "message",
        "role": "assistant",
        "model": item.model,
        "content": content_blocks(ans, msg_id),
        "stop_reason": "refusal"
        if ans.outcome == "refusal"
        else ("tool_use" if ans.tool_call else "max_tokens" if ans.truncated else "end_turn"),
        "stop_sequence": None,
        "usage": {
            "input_tokens": ans.input_tokens,
            "output_tokens": ans.output_tokens,
            "cache_creation_input_tokens": ans.cache_write_tokens,
            "cache_read_input_tokens": ans.cache_read_tokens,
        },
    }


def result_line(batch: Batch, item: Item, ans: Answer, index: int) -> dict[str, Any]:
    if ans.outcome in ("succeeded", "refusal"):
        result: dict[str, Any] = {"type": "succeeded", "message": message_json(item, ans, f"msg_{batch.id}_{index}")}
    elif ans.outcome in ("canceled", "expired"):
        result = {"type": ans.outcome}
    else:
        kind = "invalid_request_error" if ans.outcome == "invalid_request" else "api_error"
        result = {"type": "errored", "error": {"type": "error", "error": {"type": kind, "message": ans.message}}}
    return {"custom_id": item.custom_id, "result": result}


def _base(request: web.Request) -> str:
    return f"{request.scheme}://{request.host}"


def _store(request: web.Request) -> Store:
    return request.app[STORE]


async def create_batch(request: web.Request) -> web.Response:
    store = _store(request)
    if request.content_length and request.content_length > MAX_BYTES:
        return error(413, f"Request exceeds the maximum size of {MAX_BYTES} bytes")
    raw = await request.read()
    if len(raw) > MAX_BYTES:  # a chunked upload has no Content-Length to check up front
        return error(413, f"Request exceeds the maximum size of {MAX_BYTES} bytes")
    try:
        body = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError):
        return error(400, "Request body is not valid JSON")
    if store.profile.billing_error:
        return error(400, CREDIT_MESSAGE)
    requests = body.get("requests") if isinstance(body, dict) else None
    if not isinstance(requests, list) or not requests:
        return error(400, "requests: field required and must be a non-empty list")
    if len(requests) > MAX_REQUESTS:
        return error(400, f"requests: a batch may contain at most {MAX_REQUESTS} requests")
    items: list[Item] = []
    seen: set[str] = set()
    for n, req in enumerate(requests):
        if not isinstance(req, dict) or not isinstance(req.get("params"), dict):
            return error(400, f"requests.{n}.params: field required")
        custom_id = req.get("custom_id")
        if not valid_custom_id(custom_id):
            return error(400, f"requests.{n}.custom_id: must match ^[a-zA-Z0-9_-]{{1,64}}$")
        if custom_id in seen:
            return error(400, f"requests.{n}.custom_id: duplicate custom_id {custom_id!r} within the batch")
        seen.add(custom_id)
        if req["params"].get("stream"):
            return error(400, f"requests.{n}.params.stream: streaming is not supported in batches")
        items.append(item_from_messages(custom_id, req["params"]))
    if store.profile.batch.create_seconds:
        await asyncio.sleep(store.profile.batch.create_seconds)
    batch = store.new_batch("anthropic", items, betas=request.headers.get("anthropic-beta", ""))
    if store.creates <= store.profile.batch.create_failures_after_accept:
        return error(500, "Internal server error")  # stored anyway: the duplicate-create trap
    return web.json_response(batch_json(batch, store.clock(), _base(request)))


def _find(request: web.Request) -> Batch | None:
    batch = _store(request).batches.get(request.match_info["batch_id"])
    if batch is None or batch.provider != "anthropic" or batch.archived:
        return None
    return batch


def _missing(request: web.Request) -> web.Response:
    return error(404, f"message batch {request.match_info['batch_id']!r} not found")


async def retrieve_batch(request: web.Request) -> web.Response:
    batch = _find(request)
    if batch is None:
        return _missing(request)
    return web.json_response(batch_json(batch, _store(request).clock(), _base(request)))


async def list_batches(request: web.Request) -> web.Response:
    store = _store(request)
    try:
        limit = int(request.query.get("limit", "20"))
    except ValueError:
        return error(400, "limit: must be an integer")
    if not 1 <= limit <= 1000:
        return error(400, "limit: must be between 1 and 1000")
    batches = store.listing("anthropic")
    ids = [b.id for b in batches]
    after, before = request.query.get("after_id"), request.query.get("before_id")
    for cursor in (after, before):
        if cursor and cursor not in ids:
            return error(400, f"cursor {cursor!r} does not name a batch")
    if after:
        page = batches[ids.index(after) + 1 :][:limit]
        has_more = ids.index(after) + 1 + limit < len(ids)
    elif before:
        start = max(0, ids.index(before) - limit)
        page = batches[start : ids.index(before)]
        has_more = start > 0
    else:
        page, has_more = batches[:limit], len(batches) > limit
    now = store.clock()
    return web.json_response(
        {
            "data": [batch_json(b, now, _base(request)) for b in page],
            "has_more": has_more,
            "first_id": page[0].id if page else None,
            "last_id": page[-1].id if page else None,
        }
    )


async def cancel_batch(request: web.Request) -> web.Response:
    store = _store(request)
    batch = _find(request)
    if batch is None:
        return _missing(request)
    now = store.clock()
    if batch.cancel_at is None and not batch.ended(now):
        batch.cancel_at = now
    return web.json_response(batch_json(batch, now, _base(request)))


async def delete_batch(request: web.Request) -> web.Response:
    store = _store(request)
    fault = store.delete_fault()
    if fault is not None:
        return error(fault[0], fault[1])
    batch = _find(request)
    if batch is None:
        return _missing(request)
    if not batch.ended(store.clock()):
        return error(400, "Batches can only be deleted once they have finished processing; cancel it first")
    batch.archived = True
    return web.json_response({"id": batch.id, "type": "message_batch_deleted"})


async def batch_results(request: web.Request) -> web.StreamResponse:
    store = _store(request)
    batch = _find(request)
    if batch is None:
        return _missing(request)
    if not batch.ended(store.clock()):
        return error(404, f"results for {batch.id} are not available until processing has ended")
    body = batch.rendered(
        "anthropic",
        lambda index, item, ans: orjson.dumps(result_line(batch, item, ans, index)),
    )
    return await stream_bytes(request, body, "application/binary")


async def create_message(request: web.Request) -> web.Response:
    """POST /v1/messages: the synchronous path (fallback and workers)."""
    store = _store(request)
    try:
        body = json.loads(await request.read())
    except (json.JSONDecodeError, UnicodeDecodeError):
        return error(400, "Request body is not valid JSON")
    if store.profile.billing_error:
        return error(400, CREDIT_MESSAGE)
    if not isinstance(body, dict):
        return error(400, "body must be a JSON object")
    if body.get("stream"):
        return error(400, "stream: the emulator does not stream")
    item = item_from_messages("sync", body)
    if item.invalid:
        return error(400, item.invalid)
    outcome = await sync_call(request.app, item)
    if isinstance(outcome, float):
        return error(
            429,
            "Number of request tokens has exceeded your per-minute rate limit",
            headers={"retry-after": str(max(1, round(outcome)))},
        )
    if outcome == "server_error":
        return error(529, "Overloaded")
    ans = answer(item, outcome, cache_hit=False)
    if ans.outcome == "invalid_request":
        return error(400, ans.message)
    return answer_response(message_json(item, ans, f"msg_sync_{store.sync_requests}"), ans, store.sync_requests)


def routes() -> list[web.RouteDef]:
    return [
        web.post("/v1/messages", create_message),
        web.post("/v1/messages/batches", create_batch),
        web.get("/v1/messages/batches", list_batches),
        web.get("/v1/messages/batches/{batch_id}", retrieve_batch),
        web.post("/v1/messages/batches/{batch_id}/cancel", cancel_batch),
        web.delete("/v1/messages/batches/{batch_id}", delete_batch),
        web.get("/v1/messages/batches/{batch_id}/results", batch_results),
    ]
