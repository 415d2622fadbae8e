"""The OpenAI and Azure OpenAI emulator's answers: their JSON shapes (batch, output line, file, chat completion, error)
and the helpers its handlers share (openai_api.py). Apart so that each module stays readable on its own.
"""

from __future__ import annotations

from typing import Any

from aiohttp import web

from barge.emulator import embeddings, responses
from barge.emulator.core import (
    BATCH_EXPIRY_SECONDS,
    STORE,
    Answer,
    Batch,
    Item,
    ProviderName,
    Store,
    status_word,
)

MAX_FILE_BYTES = 200 * 1024 * 1024
MAX_LINES = {"openai": 50_000, "azure": 100_000}
CHAT_URLS = ("/v1/chat/completions", "/chat/completions")


def error(
    status: int,
    message: str,
    *,
    type_: str = "invalid_request_error",
    code: str | None = None,
    param: str | None = None,
    headers: dict[str, str] | None = None,
) -> web.Response:
    body = {"error": {"message": message, "type": type_, "param": param, "code": code}}
    return web.json_response(body, status=status, headers=headers)


def billing_error() -> web.Response:
    return error(
        429,
        "You exceeded your current quota, please check your plan and billing details.",
        type_="insufficient_quota",
        code="insufficient_quota",
    )


def provider_of(request: web.Request) -> ProviderName:
    return "azure" if request.path.startswith("/openai/") else "openai"


def store_of(request: web.Request) -> Store:
    return request.app[STORE]


def ts(value: float | None) -> int | None:
    return None if value is None else int(value)


def message_json(ans: Answer, completion_id: str) -> dict[str, Any]:
    """The choice's message; a forced tool's call is its one tool call (arguments: JSON text, as OpenAI sends)."""
    if ans.tool_call is not None:
        name = ans.tool_call[0]
        call = {"id": f"call_{completion_id}", "type": "function", "function": {"name": name, "arguments": ans.text}}
        return {"role": "assistant", "content": None, "refusal": None, "tool_calls": [call]}
    return {"role": "assistant", "content": None if ans.outcome == "refusal" else ans.text, "refusal": None}


def completion_json(item: Item, ans: Answer, completion_id: str, created: float) -> dict[str, Any]:
    refused = ans.outcome == "refusal"
    return {
        "id": completion_id,
        "object": "chat.completion",
        "created": int(created),
        "model": item.model,
        "choices": [
            {
                "index": 0,
                "message": message_json(ans, completion_id),
                "finish_reason": "content_filter"
                if refused
                else ("tool_calls" if ans.tool_call else "length" if ans.truncated else "stop"),
                "logprobs": None,
            }
        ],
        "usage": {
            "prompt_tokens": ans.input_tokens + ans.cache_read_tokens + ans.cache_write_tokens,
            "completion_tokens": ans.output_tokens,
            "total_tokens": ans.input_tokens + ans.cache_read_tokens + ans.cache_write_tokens + ans.output_tokens,
            "prompt_tokens_details": {"cached_tokens": ans.cache_read_tokens},
        },
    }


def file_id_of(batch: Batch, kind: str) -> str:
    return f"file-{batch.id.removeprefix('batch_')}-{kind}"


def is_output(ans: Answer) -> bool:
    return ans.outcome in ("succeeded", "refusal")


def batch_json(store: Store, batch: Batch, now: float) -> dict[str, Any]:
    status = status_word(batch, now)
    ended = batch.ended(now)
    answers = batch.answers() if ended and not batch.validation_errors else []
    n_ok = sum(is_output(a) for _, a in answers)
    n_err = len(answers) - n_ok
    has_files = ended and not batch.validation_errors
    output_file = file_id_of(batch, "output") if has_files and n_ok else None
    # Azure points error_file_id at an (empty) file even when nothing failed, or leaves it "".
    error_file = file_id_of(batch, "error") if has_files and (n_err or batch.provider == "azure") else None
    if error_file is None and batch.provider == "azure":
        error_file = ""
    for kind, file_id in (("output", output_file), ("error", error_file)):
        if file_id and file_id not in store.deleted_files:
            store.files.setdefault(file_id, {"kind": kind, "batch": batch.id, "created_at": batch.end_at})
    if ended:
        counts: dict[str, int | None] = {"total": len(batch.items), "completed": n_ok, "failed": n_err}
    elif batch.provider == "azure" and status == "validating":
        counts = {"total": None, "completed": None, "failed": None}  # Azure may answer nulls
    else:
        done = sum(batch.created_at + off * batch.processing_seconds <= now for off in batch.finish_offsets)
        counts = {"total": len(batch.items), "completed": done, "failed": 0}
    in_progress_at = batch.created_at + batch.processing_seconds * 0.1
    finalizing_at = batch.created_at + batch.processing_seconds * 0.9
    return {
        "id": batch.id,
        "object": "batch",
        "endpoint": batch.endpoint,
        "model": batch.items[0].model if batch.items else None,
        "errors": {"object": "list", "data": batch.validation_errors} if batch.validation_errors else None,
        "input_file_id": batch.input_file_id,
        "completion_window": batch.completion_window,
        "status": status,
        "output_file_id": output_file,
        "error_file_id": error_file,
        "created_at": ts(batch.created_at),
        "in_progress_at": ts(in_progress_at) if now >= in_progress_at and not batch.validation_errors else None,
        "expires_at": ts(batch.created_at + BATCH_EXPIRY_SECONDS),
        "finalizing_at": ts(finalizing_at) if now >= finalizing_at and batch.cancel_at is None else None,
        "completed_at": ts(batch.end_at) if status == "completed" else None,
        "failed_at": ts(batch.end_at) if status == "failed" else None,
        "expired_at": ts(batch.end_at) if status == "expired" else None,
        "cancelling_at": ts(batch.cancel_at),
        "cancelled_at": ts(batch.end_at) if status == "cancelled" else None,
        "request_counts": counts,
        "metadata": batch.metadata,
    }


def output_line(batch: Batch, item: Item, ans: Answer, index: int) -> dict[str, Any]:
    request_id = f"req_{batch.id}_{index}"
    line: dict[str, Any] = {"id": f"batch_req_{batch.id}_{index}", "custom_id": item.custom_id}
    if is_output(ans) and item.embedding is not None:  # a /v1/embeddings line (emulator/embeddings.py)
        body = embeddings.item_answer_json(item, ans)
        line |= {"response": {"status_code": 200, "request_id": request_id, "body": body}, "error": None}
    elif is_output(ans) and batch.endpoint in responses.RESPONSES_URLS:  # a /v1/responses line
        body = responses.response_json(item, ans, f"resp_{batch.id}_{index}", batch.end_at)
        line |= {"response": {"status_code": 200, "request_id": request_id, "body": body}, "error": None}
    elif is_output(ans):
        body = completion_json(item, ans, f"chatcmpl-{batch.id}-{index}", batch.end_at)
        line |= {"response": {"status_code": 200, "request_id": request_id, "body": body}, "error": None}
    elif ans.outcome == "invalid_request":
        body = {"error": {"message": ans.message, "type": "invalid_request_error", "param": None, "code": None}}
        line |= {"response": {"status_code": 400, "request_id": request_id, "body": body}, "error": None}
    elif ans.outcome == "server_error":
        body = {"error": {"message": ans.message, "type": "server_error", "param": None, "code": None}}
        line |= {"response": {"status_code": 500, "request_id": request_id, "body": body}, "error": None}
    elif ans.outcome == "expired":
        line |= {
            "response": None,
            "error": {
                "code": "batch_expired",
                "message": "This request could not be executed before the completion window expired.",
            },
        }
    else:
        line |= {
            "response": None,
            "error": {
                "code": "batch_cancelled",
                "message": "This request was not executed because the batch was cancelled.",
            },
        }
    return line


def file_json(file_id: str, meta: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": file_id,
        "object": "file",
        "bytes": meta.get("bytes", 0),
        "created_at": int(meta["created_at"]),
        "filename": meta.get("filename", f"{file_id}.jsonl"),
        "purpose": meta.get("purpose", "batch_output"),
        "status": "processed",
        "expires_at": None,
        "status_details": None,
    }
