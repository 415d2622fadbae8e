"""OpenAI Batch (files + batches + chat completions) and Azure OpenAI Global Batch, as the `openai` SDK sees them.

OpenAI lives under /v1, Azure under /openai (the AzureOpenAI client adds ?api-version and, for chat
completions, /deployments/{name}). File validation problems fail the batch with errors.data, as the real
services do; per-request problems end up as lines in the error file.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import orjson
from aiohttp import BodyPartReader, web

from barge.emulator import flex
from barge.emulator.core import (
    Answer,
    Batch,
    Item,
    ProviderName,
    answer,
    answer_response,
    item_from_messages,
    status_word,
    stream_bytes,
    sync_call,
    valid_custom_id,
)
from barge.emulator.embeddings import EMBEDDINGS_URLS, embedding_json, item_from_embeddings, sync_item
from barge.emulator.embeddings import read_body as read_embeddings
from barge.emulator.embeddings import routes as embeddings_routes
from barge.emulator.openai_files import list_files
from barge.emulator.openai_shapes import (
    CHAT_URLS,
    MAX_FILE_BYTES,
    MAX_LINES,
    batch_json,
    billing_error,
    completion_json,
    error,
    file_json,
    is_output,
    output_line,
    provider_of,
    store_of,
)
from barge.emulator.responses import RESPONSES_URLS, item_from_responses
from barge.emulator.responses_api import routes as responses_routes


def groq_window(window: object) -> bool:
    """Groq's batches take a completion window of 24 hours to 7 days ("24h", "48h", "7d")."""
    if not isinstance(window, str) or len(window) < 2 or window[-1] not in "hd" or not window[:-1].isdigit():
        return False
    hours = int(window[:-1]) * (24 if window[-1] == "d" else 1)
    return 24 <= hours <= 168


async def upload_file(request: web.Request) -> web.Response:
    store = store_of(request)
    if not request.content_type.startswith("multipart/"):
        return error(400, "Expected multipart/form-data with fields file and purpose")
    fields: dict[str, Any] = {}
    reader = await request.multipart()
    async for part in reader:
        if not isinstance(part, BodyPartReader):
            continue
        if part.name == "file":
            data = bytearray()
            while chunk := await part.read_chunk(1 << 20):
                data += chunk
                if len(data) > MAX_FILE_BYTES:
                    return error(400, f"File exceeds the maximum size of {MAX_FILE_BYTES} bytes", param="file")
            fields["file"] = bytes(data)
            fields["filename"] = part.filename or "upload.jsonl"
        elif part.name:
            fields[part.name] = (await part.read()).decode()
    if "file" not in fields:
        return error(400, "file: field required", param="file")
    if fields.get("purpose") != "batch":
        return error(400, "purpose: the emulator accepts purpose=batch only", param="purpose")
    file_id = f"file-{len(store.files) + len(store.deleted_files) + 1:06d}in"  # grows with every file: never reused
    store.files[file_id] = {
        "kind": "input",
        "data": fields["file"],
        "bytes": len(fields["file"]),
        "filename": fields["filename"],
        "purpose": "batch",
        "created_at": store.clock(),
    }
    return web.json_response(file_json(file_id, store.files[file_id]))


async def get_file(request: web.Request) -> web.Response:
    store = store_of(request)
    file_id = request.match_info["file_id"]
    if file_id not in store.files:
        return error(404, f"No such File object: {file_id}", param="id")
    return web.json_response(file_json(file_id, store.files[file_id]))


async def delete_file(request: web.Request) -> web.Response:
    store = store_of(request)
    file_id = request.match_info["file_id"]
    fault = store.delete_fault()
    if fault is not None:
        return error(fault[0], fault[1], type_="server_error" if fault[0] >= 500 else "permission_error")
    if store.files.pop(file_id, None) is None:
        return error(404, f"No such File object: {file_id}", param="id")
    store.deleted_files.add(file_id)
    return web.json_response({"id": file_id, "object": "file", "deleted": True})


async def file_content(request: web.Request) -> web.StreamResponse:
    store = store_of(request)
    file_id = request.match_info["file_id"]
    meta = store.files.get(file_id)
    if meta is None:
        return error(404, f"No such File object: {file_id}", param="id")
    if meta["kind"] == "input":
        return await stream_bytes(request, meta["data"], "application/octet-stream")
    batch = store.batches[meta["batch"]]
    want_output = meta["kind"] == "output"

    def render(index: int, item: Item, ans: Answer) -> bytes | None:
        if is_output(ans) != want_output:
            return None
        return orjson.dumps(output_line(batch, item, ans, index))

    return await stream_bytes(request, batch.rendered(meta["kind"], render), "application/octet-stream")


def _validate_lines(
    data: bytes, provider: ProviderName, endpoint: str = "/v1/chat/completions"
) -> tuple[list[Item], list[dict[str, Any]]]:
    """Parse an input file; returns the items and the batch-level validation errors (empty when valid). Every
    line must POST to the batch's `endpoint` (chat completions, embeddings or responses)."""
    urls = next((u for u in (EMBEDDINGS_URLS, RESPONSES_URLS) if endpoint in u), CHAT_URLS)
    items: list[Item] = []
    errors: list[dict[str, Any]] = []
    seen: set[str] = set()
    models: set[str] = set()

    def fail(code: str, line: int | None, message: str, param: str | None = None) -> None:
        if len(errors) < 100:
            errors.append({"code": code, "line": line, "message": message, "param": param})

    for n, raw in enumerate(data.splitlines(), start=1):
        if not raw.strip():
            continue
        try:
            obj = json.loads(raw)
        except (json.JSONDecodeError, UnicodeDecodeError):
            fail("invalid_json_line", n, "This line is not parseable as valid JSON.")
            continue
        if not isinstance(obj, dict) or not isinstance(obj.get("body"), dict):
            fail("invalid_request", n, "Each line needs custom_id, method, url and body.", "body")
            continue
        custom_id = obj.get("custom_id")
        if not valid_custom_id(custom_id):
            fail("invalid_custom_id", n, "custom_id must match ^[a-zA-Z0-9_-]{1,64}$", "custom_id")
            continue
        if custom_id in seen:
            fail("duplicate_custom_id", n, f"The custom_id {custom_id!r} is used more than once.", "custom_id")
            continue
        seen.add(custom_id)
        if obj.get("method") != "POST" or obj.get("url") not in urls:
            fail("url_mismatch", n, f"Every line must POST to the batch's endpoint ({endpoint}).", "url")
            continue
        if obj["body"].get("stream"):
            fail("invalid_request", n, "stream is not supported in batches.", "body.stream")
            continue
        if urls is EMBEDDINGS_URLS:
            item = item_from_embeddings(custom_id, obj["body"], line=n)
        elif urls is RESPONSES_URLS:
            item = item_from_responses(custom_id, obj["body"], line=n)
        else:
            item = item_from_messages(custom_id, obj["body"], line=n)
        models.add(item.model)
        items.append(item)
    if len(models) > 1:
        fail(
            "model_mismatch",
            None,
            f"All lines must use the same model (deployment); found {sorted(models)}.",
            "body.model",
        )
    if not items and not errors:
        fail("empty_file", None, "The input file has no requests.")
    if len(items) > MAX_LINES[provider]:
        fail("too_many_tasks", None, f"A batch may contain at most {MAX_LINES[provider]} requests.")
    return items, errors


async def _json_object(request: web.Request) -> dict[str, Any] | web.Response:
    """The request's JSON object, or the provider's 400 answer when it is not one."""
    try:
        body = json.loads(await request.read())
    except (json.JSONDecodeError, UnicodeDecodeError):
        return error(400, "We could not parse the JSON body of your request.")
    if not isinstance(body, dict):
        return error(400, "The body must be a JSON object.")
    return body


def _valid_expiry(expiry: object, provider: ProviderName) -> bool:
    """OpenAI keeps output files 1 hour to 30 days after creation when asked; Azure 14 to 30 days."""
    if not isinstance(expiry, dict) or expiry.get("anchor") != "created_at":
        return False
    seconds = expiry.get("seconds")
    low = 14 * 86400 if provider == "azure" else 3600
    return isinstance(seconds, int) and not isinstance(seconds, bool) and low <= seconds <= 30 * 86400


async def create_batch(request: web.Request) -> web.Response:
    store = store_of(request)
    provider = provider_of(request)
    if store.profile.billing_error:
        return billing_error()
    body = await _json_object(request)
    if isinstance(body, web.Response):
        return body
    file_id = body.get("input_file_id")
    meta = store.files.get(file_id) if isinstance(file_id, str) else None
    if meta is None or meta["kind"] != "input":
        return error(400, f"Invalid input_file_id: {file_id!r}", param="input_file_id")
    endpoint = body.get("endpoint")
    served = CHAT_URLS + EMBEDDINGS_URLS + (RESPONSES_URLS if provider == "openai" else ())  # Azure: no responses
    if endpoint not in served:
        return error(
            400,
            f"Unsupported endpoint {endpoint!r}; the emulator serves {', '.join(sorted(set(served)))} here",
            param="endpoint",
        )
    window = body.get("completion_window")
    if window != "24h" and not (request.path.startswith("/groq/") and groq_window(window)):
        return error(400, "completion_window must be 24h", param="completion_window")
    metadata = body.get("metadata")
    if metadata is not None and (
        not isinstance(metadata, dict)
        or len(metadata) > 16
        or any(len(str(k)) > 64 or not isinstance(v, str) or len(v) > 512 for k, v in metadata.items())
    ):
        return error(
            400, "metadata: at most 16 pairs, keys up to 64 and string values up to 512 characters", param="metadata"
        )
    expiry = body.get("output_expires_after")
    if expiry is not None and not _valid_expiry(expiry, provider):
        low = "1209600 (14 days)" if provider == "azure" else "3600 (1 hour)"
        return error(
            400,
            f"output_expires_after: anchor must be created_at and seconds between {low} and 2592000 (30 days)",
            param="output_expires_after",
        )
    if store.profile.batch.create_seconds:
        await asyncio.sleep(store.profile.batch.create_seconds)
    items, errors = _validate_lines(meta["data"], provider, endpoint)
    limit = store.profile.batch.azure_enqueued_token_limit
    if provider == "azure" and limit and not errors:
        now = store.clock()
        deployment = items[0].model
        enqueued = sum(
            i.input_tokens
            for b in store.batches.values()
            if b.provider == "azure"
            and not b.validation_errors  # a batch refused at validation holds no quota
            and not b.ended(now)
            and b.items
            and b.items[0].model == deployment
            for i in b.items
        )
        if enqueued + sum(i.input_tokens for i in items) > limit:
            errors = [
                {
                    "code": "token_limit_exceeded",
                    "line": None,
                    "param": None,
                    "message": f"Enqueued token limit reached for {deployment}: {enqueued} enqueued, limit "
                    f"{limit}. Wait for running jobs to finish and retry.",
                }
            ]
    batch = store.new_batch(
        provider,
        items,
        input_file_id=file_id,
        endpoint=endpoint,
        metadata=metadata,
        validation_errors=errors,
        output_expires_after=expiry,
    )
    meta["batch"] = batch.id
    if store.creates <= store.profile.batch.create_failures_after_accept:
        return error(500, "The server had an error while processing your request.", type_="server_error")
    return web.json_response(batch_json(store, batch, store.clock()))


def _find(request: web.Request) -> Batch | None:
    batch = store_of(request).batches.get(request.match_info["batch_id"])
    if batch is None or batch.provider != provider_of(request):
        return None
    return batch


async def retrieve_batch(request: web.Request) -> web.Response:
    store = store_of(request)
    batch = _find(request)
    if batch is None:
        return error(404, f"No batch found with id '{request.match_info['batch_id']}'.")
    return web.json_response(batch_json(store, batch, store.clock()))


async def cancel_batch(request: web.Request) -> web.Response:
    store = store_of(request)
    batch = _find(request)
    if batch is None:
        return error(404, f"No batch found with id '{request.match_info['batch_id']}'.")
    now = store.clock()
    if batch.ended(now):
        return error(400, f"Cannot cancel a batch with status '{status_word(batch, now)}'.")
    if batch.cancel_at is None:
        batch.cancel_at = now
    return web.json_response(batch_json(store, batch, now))


async def list_batches(request: web.Request) -> web.Response:
    store = store_of(request)
    try:
        limit = int(request.query.get("limit", "20"))
    except ValueError:
        return error(400, "limit must be an integer", param="limit")
    if not 1 <= limit <= 100:
        return error(400, "limit must be between 1 and 100", param="limit")
    batches = store.listing(provider_of(request))
    ids = [b.id for b in batches]
    after = request.query.get("after")
    start = ids.index(after) + 1 if after in ids else 0
    page = batches[start : start + limit]
    now = store.clock()
    return web.json_response(
        {
            "object": "list",
            "data": [batch_json(store, b, now) for b in page],
            "first_id": page[0].id if page else None,
            "last_id": page[-1].id if page else None,
            "has_more": start + limit < len(batches),
        }
    )


async def chat_completion(request: web.Request) -> web.Response:
    store = store_of(request)
    if store.profile.billing_error:
        return billing_error()
    body = await _json_object(request)
    if isinstance(body, web.Response):
        return body
    if "deployment" in request.match_info:
        body.setdefault("model", request.match_info["deployment"])
    if body.get("stream"):
        return error(400, "stream: the emulator does not stream", param="stream")
    item = item_from_messages("sync", body)
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
    payload = completion_json(item, ans, f"chatcmpl-sync-{store.sync_requests}", store.clock())
    payload["service_tier"] = flex.tier_of(body)
    return answer_response(payload, ans, store.sync_requests)


async def embeddings(request: web.Request) -> web.Response:
    """A synchronous embeddings call (OpenAI /v1/embeddings, Azure's deployment path): the emulator's quota,
    latency and faults as for chat, then one deterministic vector per input."""
    store = store_of(request)
    if store.profile.billing_error:
        return billing_error()
    body = await _json_object(request)
    if isinstance(body, web.Response):
        return body
    if "deployment" in request.match_info:
        body.setdefault("model", request.match_info["deployment"])
    asked = read_embeddings(body)
    if isinstance(asked, str):
        return error(400, asked)
    texts, dims, encoding = asked
    outcome = await sync_call(request.app, sync_item(body, texts))
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
    return web.json_response(embedding_json(str(body["model"]), texts, dims, encoding))


def routes() -> list[web.RouteDef]:
    out = []
    for prefix in ("/v1", "/openai"):
        out += [
            web.post(f"{prefix}/files", upload_file),
            web.get(f"{prefix}/files", list_files),
            web.get(f"{prefix}/files/{{file_id}}", get_file),
            web.delete(f"{prefix}/files/{{file_id}}", delete_file),
            web.get(f"{prefix}/files/{{file_id}}/content", file_content),
            web.post(f"{prefix}/batches", create_batch),
            web.get(f"{prefix}/batches", list_batches),
            web.get(f"{prefix}/batches/{{batch_id}}", retrieve_batch),
            web.post(f"{prefix}/batches/{{batch_id}}/cancel", cancel_batch),
        ]
    out += [
        web.post("/v1/chat/completions", chat_completion),
        web.post("/openai/chat/completions", chat_completion),
        web.post("/openai/deployments/{deployment}/chat/completions", chat_completion),
        *embeddings_routes(embeddings),
        *responses_routes(),
    ]
    return out
