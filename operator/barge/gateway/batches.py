"""OpenAI batches as LLMBatchJobs, and back: pure builders, one status table.

A batch `batch_<24 hex>` is the LLMBatchJob `gw-<24 hex>` of the caller's namespace, labelled as the gateway's;
the OpenAI fields that have no place in the spec (input file, endpoint, window, metadata, creation time, cancel
time) are one JSON annotation. The job's phase and counts are the batch's status:

| job | batch status |
| --- | --- |
| cancelled by the gateway (annotation), job ended or Suspended | cancelled |
| cancelled by the gateway, job still running | cancelling |
| Succeeded | completed |
| Failed with DeadlineExceeded | expired |
| Failed | failed |
| Pending (planning, not yet admitted) | validating |
| Queued, Submitting, Running, Retrying, FallingBack, Suspended: nothing left to submit or collect | finalizing |
| Queued, Submitting, Running, Retrying, FallingBack, Suspended | in_progress |

request_counts: total = counts.total, completed = succeeded + refused, failed = invalid + failed.
"""

from __future__ import annotations

import hashlib
import os
from datetime import datetime, timedelta
from typing import Any

import orjson

from barge.gateway import answers

LABEL = "barge.dev/gateway"
ANNOTATION = "barge.dev/gateway-batch"
JOB_PREFIX = "gw-"
BATCH_PREFIX = "batch_"
OUTPUT_SUFFIX, ERROR_SUFFIX = "-output", "-errors"
WINDOW = timedelta(hours=24)
RUNNING = ("Queued", "Submitting", "Running", "Retrying", "FallingBack", "Suspended")


def new_batch_id() -> str:
    return BATCH_PREFIX + os.urandom(12).hex()


def idempotent_id(namespace: str, key: str, prefix: str = BATCH_PREFIX, kind: str = "") -> str:
    """The batch id an Idempotency-Key names: the same key in the same namespace (and API) names the same batch, so
    a retried create finds the job the first attempt made. `kind` keeps one key's OpenAI and Anthropic batches apart
    (their jobs share the gw-<24 hex> names; OpenAI's digest predates it and stays as it was)."""
    salt = f"\x00{kind}" if kind else ""
    return prefix + hashlib.sha256(f"{namespace}\x00{key}{salt}".encode()).hexdigest()[:24]


def job_name(batch_id: str, prefix: str = BATCH_PREFIX) -> str | None:
    """The job of a batch id, or None for an id that is not one of the gateway's (a 404, never an API path)."""
    rest = batch_id.removeprefix(prefix)
    if rest == batch_id or len(rest) != 24 or any(c not in "0123456789abcdef" for c in rest):
        return None
    return JOB_PREFIX + rest


def batch_id_of(name: str, prefix: str = BATCH_PREFIX) -> str:
    return prefix + name.removeprefix(JOB_PREFIX)


def kind_of(job: dict[str, Any]) -> str:
    """Which API made the job: openai or anthropic (the label's value)."""
    return str(((job.get("metadata") or {}).get("labels") or {}).get(LABEL) or "")


def build_job(
    batch_id: str,
    namespace: str,
    *,
    pool: str,
    input_url: str,
    output_url: str,
    max_tokens: int,
    endpoint: str,
    input_file_id: str,
    metadata: dict[str, str] | None,
    now: datetime,
    kind: str = "openai",
    prefix: str = BATCH_PREFIX,
    model: str = "",
) -> dict[str, Any]:
    """The LLMBatchJob of a new batch: passthrough requests on the pool the file's model alias names (`model`, what
    the caller sent, is the batch's model; the pool may differ through an alias of the admin's)."""
    name = job_name(batch_id, prefix)
    assert name is not None
    record = {
        "input_file_id": input_file_id,
        "endpoint": endpoint,
        "completion_window": "24h",
        "metadata": metadata or {},
        "created_at": int(now.timestamp()),
        "model": model or pool,
    }
    return {
        "apiVersion": "barge.dev/v1alpha1",
        "kind": "LLMBatchJob",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {LABEL: kind, "app.kubernetes.io/managed-by": "barge-gateway"},
            "annotations": {ANNOTATION: orjson.dumps(record).decode()},
        },
        "spec": {
            "provider": {"type": "pool", "poolRef": {"name": pool}},
            "input": {"url": input_url, "idField": "custom_id"},
            "customId": "{id}",
            "request": {"mode": "passthrough", "maxTokens": max_tokens},
            "output": {"url": output_url},
            "deadline": (now + WINDOW).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "successRatio": "0",  # an OpenAI batch completes whatever share of its requests failed
        },
    }


def record_of(job: dict[str, Any]) -> dict[str, Any]:
    raw = ((job.get("metadata") or {}).get("annotations") or {}).get(ANNOTATION) or "{}"
    try:
        found = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return {}
    return found if isinstance(found, dict) else {}


def _epoch(stamp: str | None) -> int | None:
    if not stamp:
        return None
    try:
        return int(datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp())
    except ValueError:
        return None


def status_of(job: dict[str, Any]) -> str:
    """The batch status of a job (the table in the module docstring)."""
    status = job.get("status") or {}
    phase = status.get("phase") or "Pending"
    ended = phase in ("Succeeded", "Failed")
    if record_of(job).get("cancelled_at") is not None:
        return "cancelled" if ended or phase == "Suspended" else "cancelling"
    if phase == "Succeeded":
        return "completed"
    if phase == "Failed":
        conditions = {c.get("type"): c.get("status") for c in status.get("conditions") or []}
        return "expired" if conditions.get("DeadlineExceeded") == "True" else "failed"
    if phase in RUNNING:
        counts = status.get("counts") or {}
        left = sum(int(counts.get(k) or 0) for k in ("pending", "submitted", "retrying"))
        return "finalizing" if counts.get("total") and not left else "in_progress"
    return "validating"


def batch_object(job: dict[str, Any]) -> dict[str, Any]:
    """The OpenAI batch object of a job."""
    record = record_of(job)
    status = job.get("status") or {}
    counts = status.get("counts") or {}
    state = status_of(job)
    name = (job.get("metadata") or {}).get("name", "")
    batch_id = batch_id_of(name)
    done = int(counts.get("succeeded") or 0) + int(counts.get("refused") or 0)
    bad = int(counts.get("invalid") or 0) + int(counts.get("failed") or 0)
    ended = _epoch(status.get("completedAt"))
    created = int(record.get("created_at") or 0)
    out: dict[str, Any] = {
        "id": batch_id,
        "object": "batch",
        "endpoint": record.get("endpoint", "/v1/chat/completions"),
        "errors": None,
        "input_file_id": record.get("input_file_id", ""),
        "completion_window": record.get("completion_window", "24h"),
        "status": state,
        "output_file_id": batch_id + OUTPUT_SUFFIX if state in ("completed", "cancelled", "expired") and done else None,
        "error_file_id": batch_id + ERROR_SUFFIX if state in ("completed", "cancelled", "expired") and bad else None,
        "created_at": created,
        "in_progress_at": _epoch(status.get("startedAt")),
        "expires_at": created + int(WINDOW.total_seconds()),
        "finalizing_at": None,
        "completed_at": ended if state == "completed" else None,
        "failed_at": ended if state == "failed" else None,
        "expired_at": ended if state == "expired" else None,
        "cancelling_at": record.get("cancelled_at"),
        "cancelled_at": ended if state == "cancelled" else None,
        "request_counts": {"total": int(counts.get("total") or 0), "completed": done, "failed": bad},
        "metadata": record.get("metadata") or None,
        "model": record.get("model"),
    }
    if state == "failed":
        message = str(status.get("message") or "the batch failed")
        out["errors"] = {"object": "list", "data": [{"code": "batch_failed", "message": message, "line": None}]}
    return out


def _request_id(custom_id: str, salt: str) -> str:
    return hashlib.sha256(f"{salt}\x00{custom_id}".encode()).hexdigest()[:24]


def output_line(result: dict[str, Any], batch_id: str, model: str) -> dict[str, Any]:
    """One line of an output file (OpenAI's BatchRequestOutput) from one results.jsonl line of the job."""
    custom_id = str(result.get("id") or "")
    usage = result.get("usage") or {}
    tin, tout = int(usage.get("input_tokens") or 0), int(usage.get("output_tokens") or 0)
    rid = _request_id(custom_id, batch_id)
    message, finish = answers.openai_message(result)  # tool calls and the stop reason, whichever API answered
    body = {
        "id": f"chatcmpl-{rid}",
        "object": "chat.completion",
        "created": 0,
        "model": model,
        "choices": [{"index": 0, "message": message, "finish_reason": finish, "logprobs": None}],
        "usage": {"prompt_tokens": tin, "completion_tokens": tout, "total_tokens": tin + tout},
    }
    return {
        "id": f"batch_req_{rid}",
        "custom_id": custom_id,
        "response": {"status_code": 200, "request_id": f"req_{rid}", "body": body},
        "error": None,
    }


def error_line(failure: dict[str, Any], batch_id: str) -> dict[str, Any]:
    """One line of an error file from one failures.jsonl line: `error` names Barge's reason, `response` is null
    (no provider answered that request with a body worth passing on)."""
    custom_id = str(failure.get("id") or "")
    reason = str(failure.get("reason") or "")
    if failure.get("line") is not None:
        reason = f"line {failure['line']}: {reason}"
    return {
        "id": f"batch_req_{_request_id(custom_id, batch_id)}",
        "custom_id": custom_id or None,
        "response": None,
        "error": {"code": str(failure.get("error_type") or failure.get("status") or "failed"), "message": reason},
    }
