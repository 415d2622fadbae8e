"""Mistral's files and batch jobs, as the `mistralai` SDK (3.7.0) sends and parses them, under `/mistral` (the
SDK's server_url): `/v1/files` (multipart upload, retrieve, delete, content), `/v1/batch/jobs` (create, list, get,
delete, cancel) and `/v1/chat/completions` for the synchronous fallback.

Statuses QUEUED -> RUNNING -> SUCCESS | FAILED | TIMEOUT_EXCEEDED, or CANCELLATION_REQUESTED -> CANCELLED. Output and
error files hold lines `{"id", "custom_id", "response": {"status_code", "body"}, "error"}`; requests a job never
processed (the profile's expired draws: the job ends TIMEOUT_EXCEEDED; or cancelled) are in neither file.
"""

from __future__ import annotations

import json
from typing import Any

import orjson
from aiohttp import BodyPartReader, web

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
    valid_custom_id,
)

PREFIX = "/mistral/v1"
ENDPOINTS = ("/v1/chat/completions",)
MAX_FILE_BYTES = 512 * 1024 * 1024


def error(
    status: int, message: str, type_: str = "invalid_request_error", headers: dict[str, str] | None = None
) -> web.Response:
    body = {"object": "error", "message": message, "type": type_, "param": None, "code": str(status)}
    return web.json_response(body, status=status, headers=headers)


def _store(request: web.Request) -> Store:
    return request.app[STORE]


def _file_json(file_id: str, meta: dict[str, Any], *, deleted: bool | None = None) -> dict[str, Any]:
    out = {
        "id": file_id,
        "object": "file",
        "bytes": meta.get("bytes", len(meta.get("data", b""))),
        "created_at": int(meta.get("created_at", 0)),
        "filename": meta.get("filename", f"{file_id}.jsonl"),
        "purpose": "batch",
        "sample_type": {"input": "batch_request", "output": "batch_result"}.get(meta["kind"], "batch_error"),
        "source": "upload" if meta["kind"] == "input" else "mistral",
        "num_lines": meta.get("num_lines"),
    }
    if deleted is not None:
        out["deleted"] = deleted
    return out


async def upload_file(request: web.Request) -> web.Response:
    store = _store(request)
    if not request.content_type.startswith("multipart/"):
        return error(400, "Expected multipart/form-data with a file")
    fields: dict[str, Any] = {}
    async for part in await request.multipart():
        if not isinstance(part, BodyPartReader):
            continue
        if part.name == "file":
            data = bytearray()
            while chunk := await part.read_chunk(1 << 20):
                data += chunk
                if len(data) > MAX_FILE_BYTES:
                    return error(400, f"File exceeds the maximum size of {MAX_FILE_BYTES} bytes")
            fields["file"], fields["filename"] = bytes(data), part.filename or "upload.jsonl"
        elif part.name:
            fields[part.name] = (await part.read()).decode()
    if "file" not in fields:
        return error(422, "file: field required")
    if fields.get("purpose") != "batch":
        return error(400, "purpose: the emulator accepts purpose=batch only")
    file_id = f"mf-{store.instance}-{len(store.files) + 1:06d}"
    data = fields["file"]
    store.files[file_id] = {
        "kind": "input",
        "data": data,
        "bytes": len(data),
        "filename": fields["filename"],
        "created_at": store.clock(),
        "num_lines": len(data.splitlines()),
    }
    return web.json_response(_file_json(file_id, store.files[file_id]))


async def get_file(request: web.Request) -> web.Response:
    file_id = request.match_info["file_id"]
    meta = _store(request).files.get(file_id)
    if meta is None:
        return error(404, f"File {file_id} not found")
    return web.json_response(_file_json(file_id, meta, deleted=False))


async def delete_file(request: web.Request) -> web.Response:
    store = _store(request)
    file_id = request.match_info["file_id"]
    fault = store.delete_fault()
    if fault is not None:
        return error(fault[0], fault[1], "server_error" if fault[0] >= 500 else "permission_error")
    if store.files.pop(file_id, None) is None:
        return error(404, f"File {file_id} not found")
    store.deleted_files.add(file_id)
    return web.json_response({"id": file_id, "object": "file", "deleted": True})


def _processed(ans: Answer) -> bool:
    return ans.outcome not in ("expired", "canceled")


def _is_output(ans: Answer) -> bool:
    return ans.outcome in ("succeeded", "refusal")


def _line(batch: Batch, item: Item, ans: Answer, index: int) -> dict[str, Any]:
    if _is_output(ans):
        body: dict[str, Any] = {
            "id": f"cmpl-{batch.id}-{index}",
            "object": "chat.completion",
            "model": item.model,
            "created": int(batch.end_at),
            "choices": [{"index": 0, "message": {"role": "assistant", "content": ans.text}, "finish_reason": "stop"}],
            "usage": {
                "prompt_tokens": ans.input_tokens + ans.cache_read_tokens + ans.cache_write_tokens,
                "completion_tokens": ans.output_tokens,
                "total_tokens": ans.input_tokens + ans.output_tokens,
            },
        }
        status = 200
    else:
        status = 500 if ans.outcome == "server_error" else 400
        kind = "server_error" if status == 500 else "invalid_request_error"
        body = {"object": "error", "message": ans.message, "type": kind, "code": str(status)}
    return {
        "id": f"line-{index}",
        "custom_id": item.custom_id,
        "response": {"status_code": status, "body": body},
        "error": None,
    }


def _status(batch: Batch, now: float) -> str:
    if batch.validation_errors:
        return "FAILED" if batch.ended(now) else "QUEUED"
    if batch.cancel_at is not None:
        return "CANCELLED" if batch.ended(now) else "CANCELLATION_REQUESTED"
    if not batch.ended(now):
        return "QUEUED" if now - batch.created_at < batch.processing_seconds * 0.1 else "RUNNING"
    return "TIMEOUT_EXCEEDED" if "expired" in batch.outcomes else "SUCCESS"


def _job_json(store: Store, batch: Batch, now: float) -> dict[str, Any]:
    ended = batch.ended(now)
    answers = batch.answers() if ended and not batch.validation_errors else []
    done = [a for _, a in answers if _processed(a)]
    n_ok = sum(_is_output(a) for a in done)
    files: dict[str, str | None] = {"output": None, "error": None}
    for kind, count in (("output", n_ok), ("error", len(done) - n_ok)):
        file_id = f"mf-{batch.id}-{kind}"
        if count:
            files[kind] = file_id
            if file_id not in store.deleted_files:
                store.files.setdefault(file_id, {"kind": kind, "batch": batch.id, "created_at": batch.end_at})
    return {
        "id": batch.id,
        "object": "batch",
        "input_files": [batch.input_file_id],
        "endpoint": batch.endpoint,
        "model": batch.items[0].model if batch.items else None,
        "metadata": batch.metadata,
        "errors": batch.validation_errors,
        "status": _status(batch, now),
        "created_at": int(batch.created_at),
        "total_requests": len(batch.items),
        "completed_requests": len(done),
        "succeeded_requests": n_ok,
        "failed_requests": len(done) - n_ok,
        "output_file": files["output"],
        "error_file": files["error"],
        "outputs": None,
        "started_at": int(batch.created_at),
        "completed_at": int(batch.end_at) if ended else None,
    }


async def file_content(request: web.Request) -> web.StreamResponse:
    store = _store(request)
    file_id = request.match_info["file_id"]
    meta = store.files.get(file_id)
    if meta is None:
        return error(404, f"File {file_id} not found")
    if meta["kind"] == "input":
        return await stream_bytes(request, meta["data"], "application/octet-stream")
    batch = store.batches[meta["batch"]]
    want_output = meta["kind"] == "output"

    def render(index: int, item: Item, ans: Answer) -> bytes | None:
        if not _processed(ans) or _is_output(ans) != want_output:
            return None
        return orjson.dumps(_line(batch, item, ans, index))

    return await stream_bytes(request, batch.rendered(f"mistral-{meta['kind']}", render), "application/octet-stream")


def _items(data: bytes, model: str) -> tuple[list[Item], list[dict[str, Any]]]:
    items: list[Item] = []
    seen: set[str] = set()
    for n, raw in enumerate(data.splitlines(), start=1):
        if not raw.strip():
            continue
        try:
            obj = json.loads(raw)
        except (json.JSONDecodeError, UnicodeDecodeError):
            return [], [{"message": f"line {n} is not valid JSON", "count": 1}]
        if not isinstance(obj, dict) or not isinstance(obj.get("body"), dict):
            return [], [{"message": f"line {n}: each line needs custom_id and body", "count": 1}]
        custom_id = obj.get("custom_id")
        if not valid_custom_id(custom_id) or custom_id in seen:
            return [], [{"message": f"line {n}: custom_id missing, invalid or used twice", "count": 1}]
        seen.add(custom_id)
        items.append(item_from_messages(custom_id, {**obj["body"], "model": model}, line=n))
    if not items:
        return [], [{"message": "the input file has no requests", "count": 1}]
    return items, []


async def create_job(request: web.Request) -> web.Response:
    store = _store(request)
    if store.profile.billing_error:
        return error(402, "Insufficient credit balance: check your billing details", "billing_error")
    try:
        body = json.loads(await request.read())
    except (json.JSONDecodeError, UnicodeDecodeError):
        return error(400, "Invalid JSON body")
    if not isinstance(body, dict):
        return error(400, "The body must be a JSON object")
    if body.get("endpoint") not in ENDPOINTS:
        return error(400, f"Unsupported endpoint {body.get('endpoint')!r}; the emulator serves /v1/chat/completions")
    model, files, metadata = body.get("model"), body.get("input_files"), body.get("metadata")
    if not isinstance(model, str) or not model:
        return error(400, "model is required")
    if body.get("requests") is not None or not isinstance(files, list) or len(files) != 1:
        return error(400, "the emulator takes exactly one input file (input_files), no inline requests")
    meta = store.files.get(str(files[0]))
    if meta is None or meta["kind"] != "input":
        return error(404, f"File {files[0]} not found")
    if metadata is not None and (
        not isinstance(metadata, dict) or not all(isinstance(v, str) for v in metadata.values())
    ):
        return error(422, "metadata: a map of strings")
    hours = body.get("timeout_hours", 24)
    if not isinstance(hours, int) or not 1 <= hours <= 168:
        return error(422, "timeout_hours: between 1 and 168")
    items, errors = _items(meta["data"], model)
    batch = store.new_batch("mistral", items, input_file_id=str(files[0]), metadata=metadata, validation_errors=errors)
    meta["batch"] = batch.id
    if store.creates <= store.profile.batch.create_failures_after_accept:
        return error(500, "Internal server error", "server_error")
    return web.json_response(_job_json(store, batch, store.clock()))


def _find(request: web.Request) -> Batch | None:
    batch = _store(request).batches.get(request.match_info["job_id"])
    return batch if batch is not None and batch.provider == "mistral" and not batch.archived else None


async def get_job(request: web.Request) -> web.Response:
    batch = _find(request)
    if batch is None:
        return error(404, f"Batch job {request.match_info['job_id']} not found")
    return web.json_response(_job_json(_store(request), batch, _store(request).clock()))


async def delete_job(request: web.Request) -> web.Response:
    store = _store(request)
    batch = _find(request)
    if batch is None:
        return error(404, f"Batch job {request.match_info['job_id']} not found")
    if not batch.ended(store.clock()):
        return error(400, "A batch job can be deleted once it has finished")
    batch.archived = True
    return web.json_response({"id": batch.id, "object": "batch", "deleted": True})


async def cancel_job(request: web.Request) -> web.Response:
    store = _store(request)
    batch = _find(request)
    if batch is None:
        return error(404, f"Batch job {request.match_info['job_id']} not found")
    now = store.clock()
    if batch.ended(now):
        return error(400, f"Cannot cancel a batch job with status {_status(batch, now)}")
    if batch.cancel_at is None:
        batch.cancel_at = now
    return web.json_response(_job_json(store, batch, now))


async def list_jobs(request: web.Request) -> web.Response:
    store = _store(request)
    try:
        page, size = int(request.query.get("page", "0")), int(request.query.get("page_size", "100"))
    except ValueError:
        return error(422, "page and page_size must be integers")
    jobs = store.listing("mistral")
    now = store.clock()
    data = [_job_json(store, b, now) for b in jobs[page * size : (page + 1) * size]]
    return web.json_response({"object": "list", "data": data, "total": len(jobs)})


async def chat_completion(request: web.Request) -> web.Response:
    store = _store(request)
    if store.profile.billing_error:
        return error(402, "Insufficient credit balance: check your billing details", "billing_error")
    try:
        body = json.loads(await request.read())
    except (json.JSONDecodeError, UnicodeDecodeError):
        return error(400, "Invalid JSON body")
    item = item_from_messages("sync", body if isinstance(body, dict) else {})
    if item.invalid:
        return web.json_response(
            {"detail": [{"type": "value_error", "loc": ["body"], "msg": item.invalid}]}, status=422
        )
    outcome = await sync_call(request.app, item)
    if isinstance(outcome, float):
        return error(429, "Requests rate limit exceeded", "rate_limited", {"retry-after": str(max(1, round(outcome)))})
    if outcome == "server_error":
        return error(500, "Internal server error", "server_error")
    ans = answer(item, outcome, cache_hit=False)
    if ans.outcome == "invalid_request":
        return error(400, ans.message)
    payload = {
        "id": f"cmpl-sync-{store.sync_requests}",
        "object": "chat.completion",
        "model": item.model,
        "created": int(store.clock()),
        "choices": [{"index": 0, "message": {"role": "assistant", "content": ans.text}, "finish_reason": "stop"}],
        "usage": {
            "prompt_tokens": ans.input_tokens,
            "completion_tokens": ans.output_tokens,
            "total_tokens": ans.input_tokens + ans.output_tokens,
        },
    }
    return answer_response(payload, ans, store.sync_requests)


def unauthorized() -> web.Response:
    return web.json_response({"message": "Unauthorized", "request_id": "emulated"}, status=401)


def routes() -> list[web.RouteDef]:
    return [
        web.post(f"{PREFIX}/files", upload_file),
        web.get(f"{PREFIX}/files/{{file_id}}", get_file),
        web.delete(f"{PREFIX}/files/{{file_id}}", delete_file),
        web.get(f"{PREFIX}/files/{{file_id}}/content", file_content),
        web.post(f"{PREFIX}/batch/jobs", create_job),
        web.get(f"{PREFIX}/batch/jobs", list_jobs),
        web.get(f"{PREFIX}/batch/jobs/{{job_id}}", get_job),
        web.delete(f"{PREFIX}/batch/jobs/{{job_id}}", delete_job),
        web.post(f"{PREFIX}/batch/jobs/{{job_id}}/cancel", cancel_job),
        web.post(f"{PREFIX}/chat/completions", chat_completion),
    ]
