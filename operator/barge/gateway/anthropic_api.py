"""The Anthropic Message Batches API (/v1/messages/batches) for the `anthropic` SDK, on the same jobs and checks.

A create's requests are Anthropic Messages params; each becomes an OpenAI chat body (providers/chat_convert
`to_openai`), so the batch is the same passthrough LLMBatchJob as an OpenAI one and runs on whatever pool its
model alias names (on an Anthropic pool Barge converts the body back). A request that cannot convert, a custom_id
used twice or a second model alias refuses the create with a 400 naming the requests, never a silent drop. The
requests are written as an input file in the tenant's folder (`anthropic/<batch id>.jsonl`), line by line.

| job (batch status, batches.py) | processing_status | results |
| --- | --- | --- |
| validating, in_progress, finalizing | in_progress | none yet (results_url null) |
| cancelling | canceling | none yet |
| completed, failed, expired, cancelled | ended | succeeded, errored; canceled or expired for the rest |

Results: succeeded from results.jsonl, errored from failures.jsonl (invalid: invalid_request_error, failed:
api_error, with Barge's reason), and in a cancelled or expired batch every other request canceled or expired.
A refusal (status refused) is a succeeded result with stop_reason "refusal", as Anthropic returns it.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import orjson
from aiohttp import web
from kubernetes_asyncio.client.exceptions import ApiException

from barge.batch import failpoints
from barge.gateway import answers, batches, files
from barge.gateway.auth import Caller
from barge.gateway.server import AFTER_CREATE, CHUNK, Gateway, HttpError, _take
from barge.providers.chat_convert import Unconvertible, to_openai
from barge.storage import StorageError, join, read_lines, write_lines

PREFIX = "msgbatch_"
KIND = "anthropic"
MAX_REQUESTS_SHOWN = 20
_KINDS = {401: "authentication_error", 403: "permission_error", 404: "not_found_error", 413: "request_too_large"}


def error(status: int, message: str, code: str | None = None, param: str | None = None) -> web.Response:
    kind = _KINDS.get(status, "invalid_request_error" if status < 500 else "api_error")
    body = {"type": "error", "error": {"type": kind, "message": message}}
    return web.Response(status=status, body=orjson.dumps(body), content_type="application/json")


def _stamp(epoch: int | None) -> str | None:
    return None if epoch is None else datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def batch_object(job: dict[str, Any]) -> dict[str, Any]:
    """The Anthropic MessageBatch of a job (the table in the module docstring)."""
    openai_view = batches.batch_object(job)
    state = openai_view["status"]
    counts = (job.get("status") or {}).get("counts") or {}
    total = int(counts.get("total") or 0)
    done, bad = openai_view["request_counts"]["completed"], openai_view["request_counts"]["failed"]
    ended = state in ("completed", "failed", "expired", "cancelled")
    rest = max(0, total - done - bad)
    batch_id = batches.batch_id_of(job["metadata"]["name"], PREFIX)
    ended_at = next(
        (openai_view[k] for k in ("completed_at", "failed_at", "expired_at", "cancelled_at") if openai_view[k]), None
    )
    return {
        "id": batch_id,
        "type": "message_batch",
        "processing_status": "ended" if ended else ("canceling" if state == "cancelling" else "in_progress"),
        "request_counts": {
            "processing": 0 if ended else rest,
            "succeeded": done,
            "errored": bad if state != "failed" else bad + rest,
            "canceled": rest if state == "cancelled" else 0,
            "expired": rest if state == "expired" else 0,
        },
        "created_at": _stamp(openai_view["created_at"]),
        "expires_at": _stamp(openai_view["expires_at"]),
        "ended_at": _stamp(ended_at or (int(time.time()) if ended else None)),
        "cancel_initiated_at": _stamp(openai_view["cancelling_at"]),
        "archived_at": None,
        "results_url": f"/v1/messages/batches/{batch_id}/results" if ended else None,
    }


def result_line(item: dict[str, Any], model: str) -> dict[str, Any]:
    """One results line from one results.jsonl line (succeeded) or failures.jsonl line (errored)."""
    custom_id = str(item.get("id") or "")
    if item.get("status") in ("succeeded", "refused"):
        usage = item.get("usage") or {}
        content, stop = answers.anthropic_content(item)  # tool use and the stop reason, whichever API answered
        message = {
            "id": "msg_" + custom_id.encode().hex()[:24],
            "type": "message",
            "role": "assistant",
            "model": model,
            "content": content,
            "stop_reason": stop,
            "stop_sequence": None,
            "usage": {
                "input_tokens": int(usage.get("input_tokens") or 0),
                "output_tokens": int(usage.get("output_tokens") or 0),
                "cache_read_input_tokens": int(usage.get("cache_read_tokens") or 0),
                "cache_creation_input_tokens": int(usage.get("cache_write_tokens") or 0),
            },
        }
        return {"custom_id": custom_id, "result": {"type": "succeeded", "message": message}}
    kind = "invalid_request_error" if item.get("status") == "invalid" else "api_error"
    reason = str(item.get("reason") or "")
    return {
        "custom_id": custom_id,
        "result": {"type": "errored", "error": {"type": "error", "error": {"type": kind, "message": reason}}},
    }


def convert(requests: Any) -> tuple[list[bytes], str, int]:
    """The input file lines of a create's requests, its one model alias and its largest max_tokens; HttpError 400
    naming every request that cannot be taken (up to MAX_REQUESTS_SHOWN of them)."""
    if not isinstance(requests, list) or not requests:
        raise HttpError(400, "requests must be a non-empty list", param="requests")
    problems: list[str] = []
    lines: list[bytes] = []
    seen: set[str] = set()
    model: str | None = None
    cap = 0
    for n, request in enumerate(requests):
        try:
            if not isinstance(request, dict) or not isinstance(request.get("params"), dict):
                raise Unconvertible("needs custom_id and params")
            cid = request.get("custom_id")
            if not isinstance(cid, str) or not 1 <= len(cid) <= 64:
                raise Unconvertible("custom_id must be a string of 1 to 64 characters")
            if cid in seen:
                raise Unconvertible(f"custom_id {cid!r} is used by an earlier request")
            seen.add(cid)
            params = request["params"]
            alias = params.get("model")
            if not isinstance(alias, str) or not alias:
                raise Unconvertible("params.model must name a model alias")
            if model is not None and alias != model:
                raise Unconvertible(f"params.model {alias!r} differs from the first request's {model!r}: one per batch")
            model = alias
            max_tokens = params.get("max_tokens")
            if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1:
                raise Unconvertible("params.max_tokens must be a positive integer")
            cap = max(cap, max_tokens)
            body = to_openai(params)
        except Unconvertible as exc:
            problems.append(f"requests[{n}]: {exc}")
            continue
        line = {"custom_id": cid, "method": "POST", "url": "/v1/chat/completions", "body": body}
        lines.append(orjson.dumps(line))
    if problems:
        more = f" (and {len(problems) - MAX_REQUESTS_SHOWN} more)" if len(problems) > MAX_REQUESTS_SHOWN else ""
        raise HttpError(400, "the batch was refused: " + "; ".join(problems[:MAX_REQUESTS_SHOWN]) + more)
    assert model is not None
    return lines, model, cap


class MessageBatches:
    def __init__(self, gateway: Gateway) -> None:
        self.g = gateway

    def routes(self) -> list[web.RouteDef]:
        w = self.g.wrap
        return [
            web.post("/v1/messages/batches", w(self.create, error)),
            web.get("/v1/messages/batches", w(self.list, error)),
            web.get("/v1/messages/batches/{id}", w(self.retrieve, error)),
            web.post("/v1/messages/batches/{id}/cancel", w(self.cancel, error)),
            web.delete("/v1/messages/batches/{id}", w(self.delete, error)),
            web.get("/v1/messages/batches/{id}/results", w(self.results, error)),
        ]

    async def _job(self, caller: Caller, batch_id: str) -> dict[str, Any]:
        name = batches.job_name(batch_id, PREFIX)
        job = await self.g.jobs.get(caller.namespace, name) if name else None
        if job is None or batches.kind_of(job) != KIND:
            raise HttpError(404, f"message batch {batch_id} not found")
        return job

    async def create(self, request: web.Request) -> web.Response:
        caller = await self.g._caller(request, "create")
        if request.content_length is not None and request.content_length > self.g.settings.max_upload_bytes:
            raise HttpError(413, f"the batch is over the gateway's limit of {self.g.settings.max_upload_bytes} bytes")
        try:
            body = await request.json(loads=orjson.loads)
        except ValueError:
            raise HttpError(400, "the request body must be JSON") from None
        requests = body.get("requests") if isinstance(body, dict) else None
        if isinstance(requests, list) and len(requests) > self.g.settings.max_lines:
            raise HttpError(413, f"more than {self.g.settings.max_lines} requests (the gateway's limit per batch)")
        lines, model, cap = convert(requests)
        pool = await self.g.pool_for(caller, model)
        place = self.g.place(caller)
        key = request.headers.get("Idempotency-Key")
        if key:  # a retry finds the batch the first attempt made, and never rewrites its input
            batch_id = batches.idempotent_id(caller.namespace, key, PREFIX, KIND)
            made = await self.g.jobs.get(caller.namespace, str(batches.job_name(batch_id, PREFIX)))
            if made is not None:
                return _json(batch_object(self._same_kind(made)))
        else:
            batch_id = PREFIX + files.new_file_id().removeprefix(files.FILE_PREFIX)
        input_url = join(join(place.root, "anthropic"), batch_id + ".jsonl")
        await self.g._off_loop(write_lines, input_url, lines, place.storage)
        job = batches.build_job(
            batch_id,
            caller.namespace,
            pool=pool,
            model=model,
            input_url=input_url,
            output_url=place.outputs(batch_id),
            max_tokens=cap,
            endpoint="/v1/messages",
            input_file_id="",
            metadata=None,
            now=datetime.now(UTC),
            kind=KIND,
            prefix=PREFIX,
        )
        try:
            made = await self.g.jobs.create(job)
            failpoints.hit(AFTER_CREATE)  # crash tests: the job exists, the caller never heard of it
        except ApiException as exc:
            if exc.status != 409 or not key:
                raise
            made = await self.g.jobs.get(caller.namespace, str(job["metadata"]["name"]))  # a retry racing the first
            if made is None:
                raise
            made = self._same_kind(made)
        return _json(batch_object(made))

    @staticmethod
    def _same_kind(job: dict[str, Any]) -> dict[str, Any]:
        if batches.kind_of(job) != KIND:
            raise HttpError(409, "Idempotency-Key names an object that is not a message batch")
        return job

    async def retrieve(self, request: web.Request) -> web.Response:
        caller = await self.g._caller(request, "get")
        return _json(batch_object(await self._job(caller, request.match_info["id"])))

    async def list(self, request: web.Request) -> web.Response:
        caller = await self.g._caller(request, "list")
        try:
            limit = max(1, min(1000, int(request.query.get("limit", "20"))))
        except ValueError:
            raise HttpError(400, "limit must be an integer") from None
        objs = [batch_object(j) for j in await self.g.jobs.list(caller.namespace) if batches.kind_of(j) == KIND]
        objs.sort(key=lambda b: (b["created_at"] or "", b["id"]), reverse=True)
        after = request.query.get("after_id")
        if after:
            ids = [o["id"] for o in objs]
            objs = objs[ids.index(after) + 1 :] if after in ids else []
        page = objs[:limit]
        return _json(
            {
                "data": page,
                "has_more": len(objs) > limit,
                "first_id": page[0]["id"] if page else None,
                "last_id": page[-1]["id"] if page else None,
            }
        )

    async def cancel(self, request: web.Request) -> web.Response:
        caller = await self.g._caller(request, "patch")
        job = await self._job(caller, request.match_info["id"])
        if batch_object(job)["processing_status"] == "ended":
            return _json(batch_object(job))  # Anthropic answers an ended batch's cancel with the batch as it is
        record = batches.record_of(job)
        record.setdefault("cancelled_at", int(time.time()))
        patch = {
            "metadata": {"annotations": {batches.ANNOTATION: orjson.dumps(record).decode()}},
            "spec": {"suspend": True},
        }
        return _json(batch_object(await self.g.jobs.patch(caller.namespace, job["metadata"]["name"], patch)))

    async def delete(self, request: web.Request) -> web.Response:
        caller = await self.g._caller(request, "delete")
        job = await self._job(caller, request.match_info["id"])
        if batch_object(job)["processing_status"] != "ended":
            raise HttpError(400, "a message batch can be deleted only once it has ended; cancel it first")
        await self.g.jobs.delete(caller.namespace, job["metadata"]["name"])
        return _json({"id": request.match_info["id"], "type": "message_batch_deleted"})

    async def results(self, request: web.Request) -> web.StreamResponse:
        caller = await self.g._caller(request, "get")
        batch_id = request.match_info["id"]
        job = await self._job(caller, batch_id)
        obj = batch_object(job)
        if obj["processing_status"] != "ended":
            raise HttpError(400, f"message batch {batch_id} has not ended yet (results_url is null until then)")
        counts = obj["request_counts"]
        rest = "canceled" if counts["canceled"] else ("expired" if counts["expired"] else None)
        lines = self._lines(self.g.place(caller), job, batch_id, str(batches.record_of(job).get("model") or ""), rest)
        response = web.StreamResponse(headers={"Content-Type": "application/binary"})
        await response.prepare(request)
        iterator = iter(lines)
        while chunk := await self.g._off_loop(_take, iterator, CHUNK * 4):
            await response.write(chunk)
        await response.write_eof()
        return response

    def _lines(
        self, place: files.Place, job: dict[str, Any], batch_id: str, model: str, rest: str | None
    ) -> Iterator[bytes]:
        out = place.outputs(batch_id)
        seen: set[str] = set()
        for name in ("results.jsonl", "failures.jsonl"):
            try:
                for _, raw in read_lines(join(out, name), place.storage):
                    item = orjson.loads(raw) if raw.strip() else {}
                    if item.get("id") is None:
                        continue  # a blank line, or the "more invalid lines" summary line
                    seen.add(str(item["id"]))
                    yield orjson.dumps(result_line(item, model)) + b"\n"
            except StorageError:  # a file the job never wrote (cancelled before any result)
                continue
        if rest is not None:  # every request without a result was cancelled or expired with its batch
            for _, raw in read_lines(job["spec"]["input"]["url"], place.storage):
                cid = str(orjson.loads(raw).get("custom_id"))
                if cid not in seen:
                    yield orjson.dumps({"custom_id": cid, "result": {"type": rest}}) + b"\n"


def _json(data: Any) -> web.Response:
    return web.Response(body=orjson.dumps(data), content_type="application/json")
