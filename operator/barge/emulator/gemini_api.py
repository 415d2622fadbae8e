"""The Gemini API's Files and Batch Mode, as the `google-genai` SDK (3.3.0) sends and parses them, under `/gemini`
(the SDK's `http_options.base_url`; its default API version `v1` and `v1beta` alike): the resumable upload
(`POST /upload/{v}/files`, start then `upload, finalize` with `X-Goog-Upload-*` headers), `GET|DELETE /{v}/files/x`,
`GET /{v}/files/x:download?alt=media`, `POST /{v}/models/m:batchGenerateContent`, `GET /{v}/batches` (pageSize,
pageToken), `GET|DELETE /{v}/batches/x`, `POST /{v}/batches/x:cancel`, and `POST /{v}/models/m:generateContent`
for the synchronous fallback. The key travels in `x-goog-api-key`.

A batch is a long-running operation `{name: "batches/..", metadata: {displayName, state, createTime, endTime,
model, output: {responsesFile}}, done}`; states `BATCH_STATE_PENDING -> RUNNING -> SUCCEEDED | FAILED |
EXPIRED`, or `CANCELLED` (the SDK reads them as `JOB_STATE_*`). Input lines are `{"key", "request":
GenerateContentRequest}`; the responses file holds `{"key", "response": GenerateContentResponse}` or `{"key",
"error": google.rpc.Status}` lines. Where the emulator is more generous than the real API: a batch in which the
profile draws expired requests ends `BATCH_STATE_EXPIRED` *with* a responses file (the expired ones as
`DEADLINE_EXCEEDED` errors), and a cancelled one lists its unprocessed requests as `CANCELLED` errors; the real
API documents that an expired batch has no retrievable results (the adapter handles both: what no file names is
routed by the engine as missing, and retried).
"""

from __future__ import annotations

import itertools
import json
import weakref
from datetime import UTC, datetime
from typing import Any

import orjson
from aiohttp import web

from barge.emulator.core import (
    STORE,
    Answer,
    Batch,
    Item,
    Store,
    answer,
    answer_response,
    item_from_messages,
    stream_bytes,
    sync_call,
)

PREFIX = "/gemini"
#: Upload sessions in progress, per emulator store (a session's bytes until its `upload, finalize`).
UPLOADS: weakref.WeakKeyDictionary[Store, dict[str, dict[str, Any]]] = weakref.WeakKeyDictionary()
_UPLOAD_IDS = itertools.count(1)
VERSIONS = ("v1", "v1beta")
MAX_FILE_BYTES = 2 * 1024 * 1024 * 1024  # the Files API's 2 GB
STATUS = {400: "INVALID_ARGUMENT", 401: "UNAUTHENTICATED", 403: "PERMISSION_DENIED", 404: "NOT_FOUND"}
STATUS |= {409: "ALREADY_EXISTS", 429: "RESOURCE_EXHAUSTED", 500: "INTERNAL", 503: "UNAVAILABLE"}


def error(
    status: int, message: str, headers: dict[str, str] | None = None, details: list[dict[str, Any]] | None = None
) -> web.Response:
    """google.rpc.Status in the API's error envelope, as the SDK's errors.APIError reads it."""
    body: dict[str, Any] = {"code": status, "message": message, "status": STATUS.get(status, "UNKNOWN")}
    if details:
        body["details"] = details
    return web.json_response({"error": body}, status=status, headers=headers)


def unauthorized() -> web.Response:
    """What the API answers a bad key: 400 INVALID_ARGUMENT with the ErrorInfo reason API_KEY_INVALID."""
    info = {
        "@type": "type.googleapis.com/google.rpc.ErrorInfo",
        "reason": "API_KEY_INVALID",
        "domain": "googleapis.com",
    }
    return error(400, "API key not valid. Please pass a valid API key.", details=[info])


def api_key(request: web.Request) -> str | None:
    """The request's key (`x-goog-api-key`); an upload session's URL is its own credential, as Google's is (the
    SDK sends no key with the bytes)."""
    if request.path.startswith(f"{PREFIX}/upload/") and "upload_id" in request.query:
        return "upload-session"
    return request.headers.get("x-goog-api-key")


#: The API's answer to a project out of money or quota (no RetryInfo: waiting does not help).
BILLING = "You exceeded your current quota, please check your plan and billing details."


def rate_limited(seconds: float) -> web.Response:
    """A per-minute limit: 429 with a RetryInfo detail (the API sends no Retry-After header)."""
    info = {"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": f"{max(1, round(seconds))}s"}
    return error(429, "Resource has been exhausted (e.g. check quota).", details=[info])


def _store(request: web.Request) -> Store:
    return request.app[STORE]


def _version(request: web.Request) -> str | None:
    version = request.match_info["version"]
    return version if version in VERSIONS else None


def _rfc3339(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).isoformat().replace("+00:00", "Z")


def _file_json(name: str, meta: dict[str, Any]) -> dict[str, Any]:
    out = {
        "name": name,
        "displayName": meta.get("display_name", ""),
        "mimeType": meta.get("mime_type", "application/jsonl"),
        "sizeBytes": str(meta.get("bytes", 0)),
        "createTime": _rfc3339(meta.get("created_at", 0)),
        "state": "ACTIVE",
        "source": "UPLOADED" if meta["kind"] == "input" else "GENERATED",
    }
    if meta["kind"] != "input":
        out["downloadUri"] = f"{name}:download?alt=media"
    return out


async def upload(request: web.Request) -> web.Response:
    """Both steps of the resumable protocol: `start` (JSON metadata, answers an upload URL), then the bytes."""
    store = _store(request)
    version = _version(request)
    if version is None:
        return error(404, "unknown API version")
    sessions = UPLOADS.setdefault(store, {})
    upload_id = request.query.get("upload_id")
    command = request.headers.get("X-Goog-Upload-Command", "")
    if upload_id is None:
        if request.headers.get("X-Goog-Upload-Protocol") != "resumable" or command != "start":
            return error(400, "expected a resumable upload start")
        try:
            size = int(request.headers.get("X-Goog-Upload-Header-Content-Length", ""))
            meta = json.loads(await request.read() or b"{}")
        except (ValueError, UnicodeDecodeError):
            return error(400, "invalid upload start")
        if not 0 <= size <= MAX_FILE_BYTES:
            return error(400, f"files are limited to {MAX_FILE_BYTES} bytes")
        file = meta.get("file") if isinstance(meta, dict) else None
        file = file if isinstance(file, dict) else {}
        upload_id = f"{store.instance}-{next(_UPLOAD_IDS)}"
        sessions[upload_id] = {"size": size, "data": bytearray(), "file": file}
        url = f"{request.scheme}://{request.host}{request.path}?upload_id={upload_id}&upload_protocol=resumable"
        return web.json_response({}, headers={"X-Goog-Upload-URL": url, "X-Goog-Upload-Status": "active"})
    session = sessions.get(upload_id)
    if session is None:
        return error(404, "unknown upload", {"X-Goog-Upload-Status": "final"})
    try:
        offset = int(request.headers.get("X-Goog-Upload-Offset", ""))
    except ValueError:
        return error(400, "X-Goog-Upload-Offset is required", {"X-Goog-Upload-Status": "final"})
    if offset != len(session["data"]):
        return error(400, "X-Goog-Upload-Offset does not match", {"X-Goog-Upload-Status": "final"})
    session["data"] += await request.read()
    if "finalize" not in command:
        return web.json_response({}, headers={"X-Goog-Upload-Status": "active"})
    del sessions[upload_id]
    data = bytes(session["data"])
    if len(data) != session["size"]:
        return error(400, "the upload's size differs from the size announced", {"X-Goog-Upload-Status": "final"})
    name = f"files/gf{store.instance}{len(store.files):06d}"
    store.files[name] = {
        "kind": "input",
        "data": data,
        "bytes": len(data),
        "display_name": str(session["file"].get("displayName") or ""),
        "mime_type": str(session["file"].get("mimeType") or "application/jsonl"),
        "created_at": store.clock(),
    }
    return web.json_response({"file": _file_json(name, store.files[name])}, headers={"X-Goog-Upload-Status": "final"})


def _response(item: Item, ans: Answer, batch_id: str) -> dict[str, Any]:
    """A GenerateContentResponse in the API's JSON (camelCase)."""
    usage = {
        "promptTokenCount": ans.input_tokens + ans.cache_read_tokens + ans.cache_write_tokens,
        "candidatesTokenCount": ans.output_tokens,
        "totalTokenCount": ans.input_tokens + ans.cache_read_tokens + ans.cache_write_tokens + ans.output_tokens,
    }
    if ans.cache_read_tokens:
        usage["cachedContentTokenCount"] = ans.cache_read_tokens
    if ans.outcome == "refusal":
        candidate: dict[str, Any] = {"finishReason": "SAFETY", "index": 0, "safetyRatings": []}
    else:
        finish = "MAX_TOKENS" if ans.truncated else "STOP"
        content = {"role": "model", "parts": [{"text": ans.text}]}
        candidate = {"content": content, "finishReason": finish, "index": 0}
    return {"candidates": [candidate], "usageMetadata": usage, "modelVersion": item.model, "responseId": batch_id}


def _rpc_error(ans: Answer) -> dict[str, Any]:
    code = {"server_error": 500, "expired": 504, "canceled": 499}.get(ans.outcome, 400)
    status = {499: "CANCELLED", 504: "DEADLINE_EXCEEDED"}.get(code) or STATUS[code]
    return {"code": {499: 1, 504: 4}.get(code, code), "message": ans.message, "status": status}


def _line(batch: Batch, index: int, item: Item, ans: Answer) -> bytes:
    if ans.outcome in ("succeeded", "refusal"):
        return orjson.dumps({"key": item.custom_id, "response": _response(item, ans, f"{batch.id}-{index}")})
    return orjson.dumps({"key": item.custom_id, "error": _rpc_error(ans)})


def _state(batch: Batch, now: float) -> str:
    if batch.validation_errors:
        return "BATCH_STATE_FAILED" if batch.ended(now) else "BATCH_STATE_PENDING"
    if batch.cancel_at is not None and batch.ended(now):
        return "BATCH_STATE_CANCELLED"
    if not batch.ended(now):
        return (
            "BATCH_STATE_PENDING" if now - batch.created_at < batch.processing_seconds * 0.1 else "BATCH_STATE_RUNNING"
        )
    return "BATCH_STATE_EXPIRED" if "expired" in batch.outcomes else "BATCH_STATE_SUCCEEDED"


def _operation(store: Store, batch: Batch, now: float) -> dict[str, Any]:
    state = _state(batch, now)
    metadata: dict[str, Any] = {
        "@type": "type.googleapis.com/google.ai.generativelanguage.v1main.GenerateContentBatch",
        "model": f"models/{batch.items[0].model}" if batch.items else "",
        "displayName": (batch.metadata or {}).get("displayName", ""),
        "inputConfig": {"fileName": batch.input_file_id},
        "createTime": _rfc3339(batch.created_at),
        "updateTime": _rfc3339(min(now, batch.end_at)),
        "state": state,
        "batchStats": {"requestCount": str(len(batch.items))},
        "name": batch.id,
    }
    done = batch.ended(now)
    out: dict[str, Any] = {"name": batch.id, "metadata": metadata, "done": done}
    if done:
        metadata["endTime"] = _rfc3339(batch.end_at)
    if done and not batch.validation_errors:
        file_name = f"files/{batch.id.split('/')[-1]}-responses"
        if file_name not in store.deleted_files:
            store.files.setdefault(file_name, {"kind": "output", "batch": batch.id, "created_at": batch.end_at})
            metadata["output"] = {"responsesFile": file_name}
        out["response"] = {"@type": metadata["@type"], **metadata}
    if done and batch.validation_errors:
        out["error"] = {"code": 3, "message": batch.validation_errors[0]["message"]}
    return out


def gemini_request_body(model: str, request: dict[str, Any]) -> dict[str, Any]:
    """A GenerateContentRequest read as the chat body the emulator's core answers (user text, system text,
    maxOutputTokens, a response schema); problems are kept for item_from_messages to report."""
    messages: list[dict[str, Any]] = []
    system = request.get("systemInstruction") or request.get("system_instruction")
    if isinstance(system, dict):
        messages.append({"role": "system", "content": _parts_text(system.get("parts"))})
    contents = request.get("contents")
    for content in contents if isinstance(contents, list) else []:
        if isinstance(content, dict):
            role = "assistant" if content.get("role") == "model" else "user"
            messages.append({"role": role, "content": _parts_text(content.get("parts"))})
    body: dict[str, Any] = {"model": model, "messages": messages}
    config = request.get("generationConfig") or request.get("generation_config") or {}
    if isinstance(config, dict):
        if "maxOutputTokens" in config:
            body["max_tokens"] = config["maxOutputTokens"]
        schema = config.get("responseJsonSchema") or config.get("responseSchema")
        if isinstance(schema, dict) and config.get("responseMimeType") == "application/json":
            body["response_format"] = {"type": "json_schema", "json_schema": {"name": "out", "schema": schema}}
    return body


def _parts_text(parts: Any) -> str:
    if not isinstance(parts, list):
        return ""
    return "".join(str(p.get("text", "")) for p in parts if isinstance(p, dict))


def _items(data: bytes, model: str) -> tuple[list[Item], list[dict[str, Any]]]:
    items: list[Item] = []
    seen: set[str] = set()
    for n, raw in enumerate(data.splitlines(), start=1):
        if not raw.strip():
            continue
        try:
            obj = json.loads(raw)
        except (json.JSONDecodeError, UnicodeDecodeError):
            return [], [{"message": f"line {n} is not valid JSON"}]
        if not isinstance(obj, dict) or not isinstance(obj.get("request"), dict):
            return [], [{"message": f"line {n}: each line needs key and request"}]
        key = obj.get("key")
        if not isinstance(key, str) or not key or key in seen:
            return [], [{"message": f"line {n}: key missing or used twice"}]
        seen.add(key)
        items.append(item_from_messages(key, gemini_request_body(model, obj["request"]), line=n))
    if not items:
        return [], [{"message": "the input file has no requests"}]
    return items, []


async def _json(request: web.Request) -> dict[str, Any] | None:
    try:
        body = json.loads(await request.read())
    except (json.JSONDecodeError, UnicodeDecodeError):
        return None
    return body if isinstance(body, dict) else None


async def models_post(request: web.Request) -> web.Response:
    """`models/{model}:batchGenerateContent` and `models/{model}:generateContent`."""
    if _version(request) is None:
        return error(404, "unknown API version")
    model, _, method = request.match_info["rest"].partition(":")
    if method == "batchGenerateContent":
        return await create_batch(request, model)
    if method == "generateContent":
        return await generate_content(request, model)
    return error(404, f"unknown method {method!r} on models/{model}")


async def create_batch(request: web.Request, model: str) -> web.Response:
    store = _store(request)
    if store.profile.billing_error:
        return error(429, BILLING)
    body = await _json(request)
    batch = body.get("batch") if body is not None else None
    if not isinstance(batch, dict):
        return error(400, "Invalid JSON payload: batch is required")
    source = batch.get("inputConfig")
    file_name = source.get("fileName") if isinstance(source, dict) else None
    if not isinstance(file_name, str):
        return error(400, "the emulator takes a file input (inputConfig.fileName), no inline requests")
    meta = store.files.get(file_name)
    if meta is None or meta.get("kind") != "input":
        return error(404, f"File {file_name} not found")
    display_name = batch.get("displayName", "")
    if not isinstance(display_name, str) or len(display_name) > 512:
        return error(400, "displayName: a string of at most 512 characters")
    items, problems = _items(meta["data"], model)
    metadata = {"displayName": display_name}
    created = store.new_batch("gemini", items, input_file_id=file_name, metadata=metadata, validation_errors=problems)
    meta["batch"] = created.id
    if store.creates <= store.profile.batch.create_failures_after_accept:
        return error(500, "An internal error has occurred.")
    return web.json_response(_operation(store, created, store.clock()))


def _find(request: web.Request, batch_id: str) -> Batch | None:
    batch = _store(request).batches.get(f"batches/{batch_id}")
    return batch if batch is not None and batch.provider == "gemini" and not batch.archived else None


async def batches_get(request: web.Request) -> web.Response:
    if _version(request) is None:
        return error(404, "unknown API version")
    batch = _find(request, request.match_info["rest"])
    if batch is None:
        return error(404, f"batches/{request.match_info['rest']} not found")
    return web.json_response(_operation(_store(request), batch, _store(request).clock()))


async def batches_post(request: web.Request) -> web.Response:
    """`batches/{id}:cancel` (best effort and asynchronous, as documented)."""
    batch_id, _, method = request.match_info["rest"].partition(":")
    batch = _find(request, batch_id)
    if method != "cancel":
        return error(404, f"unknown method {method!r}")
    if batch is None:
        return error(404, f"batches/{batch_id} not found")
    now = _store(request).clock()
    if batch.ended(now):
        return error(400, f"Batch batches/{batch_id} is already in state {_state(batch, now)}")
    if batch.cancel_at is None:
        batch.cancel_at = now
    return web.json_response({})


async def batches_delete(request: web.Request) -> web.Response:
    store = _store(request)
    batch = _find(request, request.match_info["rest"])
    if batch is None:
        return error(404, f"batches/{request.match_info['rest']} not found")
    fault = store.delete_fault()
    if fault is not None:
        return error(fault[0], fault[1])
    batch.archived = True
    return web.json_response({})


async def batches_list(request: web.Request) -> web.Response:
    store = _store(request)
    try:
        size = int(request.query.get("pageSize", "50"))
        start = int(request.query.get("pageToken", "0") or "0")
    except ValueError:
        return error(400, "pageSize and pageToken must be integers")
    size = max(1, min(size, 1000))
    jobs = store.listing("gemini")
    now = store.clock()
    out: dict[str, Any] = {"operations": [_operation(store, b, now) for b in jobs[start : start + size]]}
    if start + size < len(jobs):
        out["nextPageToken"] = str(start + size)
    return web.json_response(out)


async def files_get(request: web.Request) -> web.StreamResponse:
    """`files/{id}` (metadata) and `files/{id}:download?alt=media` (a generated file's bytes)."""
    store = _store(request)
    file_id, _, method = request.match_info["rest"].partition(":")
    name = f"files/{file_id}"
    meta = store.files.get(name)
    if meta is None:
        return error(404, f"File {name} not found")
    if not method:
        return web.json_response(_file_json(name, meta))
    if method != "download":
        return error(404, f"unknown method {method!r}")
    if meta["kind"] == "input":  # as the real API: "Files created by upload can't be downloaded"
        return error(400, f"File {name} was uploaded and cannot be downloaded")
    batch = store.batches[meta["batch"]]
    body = batch.rendered("gemini-responses", lambda i, item, ans: _line(batch, i, item, ans))
    return await stream_bytes(request, body, "application/octet-stream")


async def files_delete(request: web.Request) -> web.Response:
    store = _store(request)
    name = f"files/{request.match_info['rest']}"
    fault = store.delete_fault()
    if fault is not None:
        return error(fault[0], fault[1])
    if store.files.pop(name, None) is None:
        return error(404, f"File {name} not found")
    store.deleted_files.add(name)
    return web.json_response({})


async def generate_content(request: web.Request, model: str) -> web.Response:
    store = _store(request)
    if store.profile.billing_error:
        return error(429, BILLING)
    body = await _json(request)
    if body is None:
        return error(400, "Invalid JSON payload")
    item = item_from_messages("sync", gemini_request_body(model, body))
    if item.invalid:
        return error(400, item.invalid)
    outcome = await sync_call(request.app, item)
    if isinstance(outcome, float):
        return rate_limited(outcome)
    if outcome == "server_error":
        return error(500, "An internal error has occurred.")
    ans = answer(item, outcome, cache_hit=False)
    if ans.outcome == "invalid_request":
        return error(400, ans.message)
    return answer_response(_response(item, ans, f"sync-{store.sync_requests}"), ans, store.sync_requests)


def routes() -> list[web.RouteDef]:
    v = f"{PREFIX}/{{version}}"
    return [
        web.post(f"{PREFIX}/upload/{{version}}/files", upload),
        web.get(f"{v}/files/{{rest}}", files_get),
        web.delete(f"{v}/files/{{rest}}", files_delete),
        web.post(f"{v}/models/{{rest}}", models_post),
        web.get(f"{v}/batches", batches_list),
        web.get(f"{v}/batches/{{rest}}", batches_get),
        web.post(f"{v}/batches/{{rest}}", batches_post),
        web.delete(f"{v}/batches/{{rest}}", batches_delete),
    ]
