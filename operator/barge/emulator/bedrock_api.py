"""Amazon Bedrock batch inference and runtime, as boto3 (botocore 1.43 `bedrock` and `bedrock-runtime`, rest-json)
sends and parses them, under `/bedrock` (both clients' endpoint_url):

* control plane: `POST /model-invocation-job` (CreateModelInvocationJob), `GET /model-invocation-job/{id}`,
  `GET /model-invocation-jobs` (newest first, nameContains, nextToken), `POST /model-invocation-job/{id}/stop`;
* runtime: `POST /model/{modelId}/invoke` (InvokeModel with the Anthropic messages body) for the sync fallback.

The records live in a REAL S3 (moto's server in the tests): the create reads `<s3InputDataConfig.s3Uri>` from the
S3 at `BARGE_EMULATOR_S3_ENDPOINT` (keys `testing`, moto takes any), and an ended job writes
`<s3OutputDataConfig.s3Uri>/<jobId>/<input file>.out` (lines `{recordId, modelInput, modelOutput | error}`) and
`manifest.json.out` there, as Bedrock does. `clientRequestToken` is honoured: a create with a token already used
answers the same jobArn and creates nothing. A job under the minimum number of records
(`BARGE_EMULATOR_BEDROCK_MIN_RECORDS`, default 100, Bedrock's default quota) is `Failed` at validation, with the
reason, as Bedrock's own validation refuses it.

Statuses on the emulator's clock: Submitted -> Validating -> Scheduled -> InProgress -> Completed, or
PartiallyCompleted (some records expired: absent from the output), Expired (all of them), Failed (validation),
Stopping -> Stopped (what finished before the stop is in the output). Errors are AWS-shaped: the
`x-amzn-ErrorType` header and `{"message"}`; an access key `invalid` is UnrecognizedClientException (403).
"""

from __future__ import annotations

import asyncio
import json
import os
import re
from datetime import UTC, datetime
from typing import Any

import orjson
from aiohttp import web

from barge.emulator import anthropic_api
from barge.emulator.core import STORE, Answer, Batch, Item, Store, answer, garble, item_from_messages, sync_call

PREFIX = "/bedrock"
S3_ENV = "BARGE_EMULATOR_S3_ENDPOINT"
MIN_RECORDS_ENV = "BARGE_EMULATOR_BEDROCK_MIN_RECORDS"
MAX_RECORDS = 50_000
ACCOUNT = "123456789012"
REGION = "us-east-1"
ANTHROPIC_VERSION = "bedrock-2023-05-31"
JOB_NAME = re.compile(r"[a-zA-Z0-9]{1,63}(-*[a-zA-Z0-9\+\-\.]){0,63}")
ROLE_ARN = re.compile(r"arn:aws(-[^:]+)?:iam::([0-9]{12})?:role/.+")
_STATUS = {400: "ValidationException", 403: "AccessDeniedException", 404: "ResourceNotFoundException"}


def error(status: int, message: str, code: str = "", headers: dict[str, str] | None = None) -> web.Response:
    code = code or _STATUS.get(status, "InternalServerException" if status >= 500 else "ValidationException")
    return web.json_response({"message": message}, status=status, headers={"x-amzn-ErrorType": code, **(headers or {})})


def unauthorized() -> web.Response:
    return error(403, "The security token included in the request is invalid.", "UnrecognizedClientException")


def access_key(request: web.Request) -> str | None:
    """The access key id of a SigV4 `Authorization` header (`... Credential=AKID/date/region/service/...`)."""
    match = re.search(r"Credential=([^/,\s]+)/", request.headers.get("authorization", ""))
    return match.group(1) if match else None


def _store(request: web.Request) -> Store:
    return request.app[STORE]


def _iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).isoformat().replace("+00:00", "Z")


def _split(uri: str) -> tuple[str, str]:
    if not uri.startswith("s3://") or not uri[5:]:
        raise ValueError(f"not an s3:// URI: {uri!r}")
    bucket, _, key = uri[5:].partition("/")
    return bucket, key


def _s3() -> Any:
    endpoint = os.environ.get(S3_ENV, "")
    if not endpoint:
        raise RuntimeError(f"the emulator has no S3: set {S3_ENV} (moto's server)")
    import s3fs  # type: ignore[import-untyped]  # the emulator's S3 client (aiobotocore underneath); imported where Bedrock is used

    keys = {"key": "testing", "secret": "testing"}  # moto takes any
    return s3fs.S3FileSystem(**keys, client_kwargs={"endpoint_url": endpoint, "region_name": REGION})


def _read(uri: str) -> bytes:
    with _s3().open(uri.removeprefix("s3://"), "rb") as fh:
        data: bytes = fh.read()
        return data


def _write(uri: str, data: bytes) -> None:
    with _s3().open(uri.removeprefix("s3://"), "wb") as fh:
        fh.write(data)


def _min_records() -> int:
    return int(os.environ.get(MIN_RECORDS_ENV, "100"))


def _texts(blocks: Any) -> str:
    return "".join(str(b.get("text") or "") for b in blocks if isinstance(b, dict)) if isinstance(blocks, list) else ""


def converse_item(custom_id: str, body: dict[str, Any], model: str, line: int = 0) -> Item:
    """A Converse body (messages of content blocks, system blocks, inferenceConfig.maxTokens) as an Item."""
    messages = body.get("messages")
    raw = body.get("inferenceConfig")
    config: dict[str, Any] = raw if isinstance(raw, dict) else {}
    chat = [{"role": m.get("role"), "content": _texts(m.get("content"))} for m in messages or [] if isinstance(m, dict)]
    params: dict[str, Any] = {"model": model, "messages": chat}
    if body.get("system"):
        params["system"] = _texts(body["system"])
    if "maxTokens" in config:
        params["max_tokens"] = config["maxTokens"]
    return item_from_messages(custom_id, params, line=line)


def converse_json(item: Item, ans: Answer) -> dict[str, Any]:
    stop = "content_filtered" if ans.outcome == "refusal" else "max_tokens" if ans.truncated else "end_turn"
    return {
        "output": {"message": {"role": "assistant", "content": [{"text": ans.text}] if ans.text else []}},
        "stopReason": stop,
        "usage": {
            "inputTokens": ans.input_tokens,
            "outputTokens": ans.output_tokens,
            "totalTokens": ans.input_tokens + ans.output_tokens,
        },
        "metrics": {"latencyMs": 1},
    }


def _records(data: bytes, model: str, converse: bool = False) -> tuple[list[Item], str]:
    """The input's records as Items, or the validation failure (Bedrock fails the whole job at validation)."""
    items: list[Item] = []
    seen: set[str] = set()
    for n, raw in enumerate(data.splitlines(), start=1):
        if not raw.strip():
            continue
        try:
            obj = json.loads(raw)
        except (json.JSONDecodeError, UnicodeDecodeError):
            return [], f"line {n} of the input is not valid JSON"
        if not isinstance(obj, dict) or not isinstance(obj.get("modelInput"), dict):
            return [], f"line {n}: each record needs modelInput (a JSON object)"
        record_id = obj.get("recordId") or f"rec{n:011d}"  # Bedrock adds a recordId when there is none
        if not isinstance(record_id, str) or record_id in seen:
            return [], f"line {n}: recordId invalid or used twice"
        seen.add(record_id)
        body = obj["modelInput"]
        if converse:
            items.append(converse_item(record_id, body, model, n))
            continue
        item = item_from_messages(record_id, {**body, "model": model}, line=n)
        if body.get("anthropic_version") != ANTHROPIC_VERSION and not item.invalid:
            item.invalid = f"anthropic_version: expected {ANTHROPIC_VERSION}"
        items.append(item)
    if len(items) < _min_records():
        return [], (
            f"The number of records ({len(items)}) is under the minimum number of records per batch inference job "
            f"({_min_records()}) for {model}"
        )
    if len(items) > MAX_RECORDS:
        return [], f"The number of records ({len(items)}) is over the records per batch inference job ({MAX_RECORDS})"
    return items, ""


def _job_id(batch: Batch) -> str:
    return batch.id


def _arn(batch: Batch) -> str:
    return f"arn:aws:bedrock:{REGION}:{ACCOUNT}:model-invocation-job/{batch.id}"


def _status(batch: Batch, now: float) -> str:
    elapsed = (now - batch.created_at) / max(batch.processing_seconds, 1e-9)
    if batch.validation_errors:
        return "Failed" if batch.ended(now) else ("Submitted" if elapsed < 0.05 else "Validating")
    if batch.cancel_at is not None:
        return "Stopped" if batch.ended(now) else "Stopping"
    if not batch.ended(now):
        return (
            "Submitted"
            if elapsed < 0.05
            else "Validating"
            if elapsed < 0.1
            else "Scheduled"
            if elapsed < 0.15
            else "InProgress"
        )
    outcomes = [batch.final_outcome(i) for i in range(len(batch.items))]
    if outcomes and all(o == "expired" for o in outcomes):
        return "Expired"
    return "PartiallyCompleted" if "expired" in outcomes else "Completed"


def _processed(ans: Answer) -> bool:
    return ans.outcome not in ("expired", "canceled")


def _answered(ans: Answer) -> bool:
    return ans.outcome in ("succeeded", "refusal") or ans.garbled


def _output_line(batch: Batch, item: Item, ans: Answer, index: int, inputs: dict[str, Any]) -> bytes:
    line: dict[str, Any] = {"recordId": item.custom_id, "modelInput": inputs.get(item.custom_id)}
    if _answered(ans) and (batch.metadata or {}).get("invocation") == "Converse":
        line["modelOutput"] = converse_json(item, ans)
    elif _answered(ans):
        message = anthropic_api.message_json(item, ans, f"msg_bdrk_{batch.id}_{index}")
        line["modelOutput"] = {k: v for k, v in message.items() if k != "model"} | {"model": item.model}
    else:
        status = 500 if ans.outcome == "server_error" else 400
        line["error"] = {"errorCode": status, "errorMessage": ans.message or ans.outcome}
    out = orjson.dumps(line)
    return garble(out, index) if ans.garbled else out


def _finish(batch: Batch, now: float) -> None:
    """Once ended, the output and manifest are in S3 (written once, as Bedrock writes them at the end)."""
    meta = batch.metadata or {}
    if not batch.ended(now) or meta.get("written") or batch.validation_errors:
        return
    inputs: dict[str, Any] = {}
    for n, raw in enumerate(_read(meta["inputUri"]).splitlines(), start=1):
        if raw.strip():
            obj = json.loads(raw)
            inputs[obj.get("recordId") or f"rec{n:011d}"] = obj.get("modelInput")
    lines, ok, errors, tin, tout = [], 0, 0, 0, 0
    for index, (item, ans) in enumerate(batch.answers()):
        if not _processed(ans):
            continue
        lines.append(_output_line(batch, item, ans, index, inputs))
        if _answered(ans):
            ok += 1
        else:
            errors += 1
        tin, tout = tin + ans.input_tokens, tout + ans.output_tokens
    prefix = meta["outputUri"].rstrip("/") + f"/{_job_id(batch)}/"
    name = meta["inputUri"].rsplit("/", 1)[-1]
    _write(prefix + name + ".out", b"".join(x + b"\n" for x in lines))
    manifest = {
        "totalRecordCount": len(batch.items),
        "processedRecordCount": len(lines),
        "successRecordCount": ok,
        "errorRecordCount": errors,
        "inputTokenCount": tin,
        "outputTokenCount": tout,
    }
    _write(prefix + "manifest.json.out", orjson.dumps(manifest))
    meta["written"] = "1"
    meta["processed"], meta["ok"], meta["errors"] = str(len(lines)), str(ok), str(errors)


def _job_json(batch: Batch, now: float) -> dict[str, Any]:
    meta = batch.metadata or {}
    status = _status(batch, now)
    ended = batch.ended(now)
    out: dict[str, Any] = {
        "jobArn": _arn(batch),
        "jobName": meta["jobName"],
        "modelId": meta["modelId"],
        "clientRequestToken": meta.get("token"),
        "roleArn": meta["roleArn"],
        "status": status,
        "submitTime": _iso(batch.created_at),
        "lastModifiedTime": _iso(batch.end_at if ended else now),
        "inputDataConfig": {"s3InputDataConfig": {"s3Uri": meta["inputUri"], "s3InputFormat": "JSONL"}},
        "outputDataConfig": {"s3OutputDataConfig": {"s3Uri": meta["outputUri"]}},
        "timeoutDurationInHours": int(meta.get("hours", "24")),
        "jobExpirationTime": _iso(batch.created_at + int(meta.get("hours", "24")) * 3600),
        "modelInvocationType": meta.get("invocation", "InvokeModel"),
    }
    if batch.validation_errors:
        out["message"] = str(batch.validation_errors[0]["message"])
    if ended:
        out["endTime"] = _iso(batch.end_at)
    if not batch.validation_errors:
        out["totalRecordCount"] = len(batch.items)
    if meta.get("written"):
        out["processedRecordCount"] = int(meta["processed"])
        out["successRecordCount"] = int(meta["ok"])
        out["errorRecordCount"] = int(meta["errors"])
    return out


def _find(store: Store, identifier: str) -> Batch | None:
    job_id = identifier.rsplit("/", 1)[-1]
    batch = store.batches.get(job_id)
    return batch if batch is not None and batch.provider == "bedrock" else None


async def create_job(request: web.Request) -> web.Response:
    store = _store(request)
    if store.profile.billing_error:
        return error(
            403, "Your AWS account is not authorized: its billing information is invalid or its payment is due"
        )
    try:
        body = json.loads(await request.read())
    except (json.JSONDecodeError, UnicodeDecodeError):
        return error(400, "Invalid JSON body")
    if not isinstance(body, dict):
        return error(400, "The body must be a JSON object")
    token = body.get("clientRequestToken")
    if isinstance(token, str):
        for batch in store.batches.values():  # the idempotency key: the same job, nothing created
            if batch.provider == "bedrock" and (batch.metadata or {}).get("token") == token:
                return web.json_response({"jobArn": _arn(batch)})
    name, role, model = body.get("jobName"), body.get("roleArn"), body.get("modelId")
    if not isinstance(name, str) or not JOB_NAME.fullmatch(name) or len(name) > 63:
        return error(400, f"1 validation error detected: Value {name!r} at 'jobName' failed to satisfy constraint")
    if not isinstance(role, str) or not ROLE_ARN.fullmatch(role):
        return error(400, f"1 validation error detected: Value {role!r} at 'roleArn' failed to satisfy constraint")
    invocation = body.get("modelInvocationType", "InvokeModel")
    if invocation not in ("InvokeModel", "Converse"):
        return error(400, f"modelInvocationType: InvokeModel or Converse, not {invocation!r}")
    if not isinstance(model, str) or not model:
        return error(400, "modelId is required")
    if invocation == "InvokeModel" and ".anthropic." not in f".{model}":
        return error(400, f"The emulator's InvokeModel records are Anthropic Claude bodies, not {model!r}'s")
    hours = body.get("timeoutDurationInHours", 24)
    if not isinstance(hours, int) or not 24 <= hours <= 168:
        return error(400, "timeoutDurationInHours: between 24 and 168")
    try:
        in_uri = str(body["inputDataConfig"]["s3InputDataConfig"]["s3Uri"])
        out_uri = str(body["outputDataConfig"]["s3OutputDataConfig"]["s3Uri"])
        _split(in_uri), _split(out_uri)
    except (KeyError, TypeError, ValueError) as exc:
        return error(400, f"inputDataConfig / outputDataConfig: an s3Uri each ({exc})")
    if any(b.provider == "bedrock" and (b.metadata or {}).get("jobName") == name for b in store.batches.values()):
        return error(400, f"A model invocation job named {name} already exists", "ConflictException")
    items: list[Item]
    try:
        data = await asyncio.to_thread(_read, in_uri)
    except FileNotFoundError:
        items, why = [], f"The input {in_uri} does not exist or the role cannot read it"
    else:
        items, why = _records(data, model, invocation == "Converse")
    meta = {"jobName": name, "token": str(token or ""), "roleArn": role, "modelId": model, "inputUri": in_uri}
    meta |= {"outputUri": out_uri, "hours": str(hours), "invocation": str(invocation)}
    validation = [{"code": "ValidationFailed", "message": why}] if why else []
    batch = store.new_batch("bedrock", items, metadata=meta, validation_errors=validation)
    if store.creates <= store.profile.batch.create_failures_after_accept:
        return error(500, "Internal server error", "InternalServerException")
    return web.json_response({"jobArn": _arn(batch)})


async def get_job(request: web.Request) -> web.Response:
    store = _store(request)
    batch = _find(store, request.match_info["job"])
    if batch is None:
        return error(404, f"Model invocation job {request.match_info['job']} not found")
    now = store.clock()
    await asyncio.to_thread(_finish, batch, now)
    return web.json_response(_job_json(batch, now))


async def list_jobs(request: web.Request) -> web.Response:
    store = _store(request)
    try:
        size = int(request.query.get("maxResults", "100"))
        start = int(request.query.get("nextToken", "0"))
    except ValueError:
        return error(400, "maxResults and nextToken must be integers")
    if not 1 <= size <= 1000:
        return error(400, "maxResults: between 1 and 1000")
    jobs = store.listing("bedrock")
    if request.query.get("sortOrder") == "Ascending":
        jobs.reverse()
    contains = request.query.get("nameContains", "")
    jobs = [b for b in jobs if contains in (b.metadata or {}).get("jobName", "")]
    now = store.clock()
    page = jobs[start : start + size]
    for batch in page:
        await asyncio.to_thread(_finish, batch, now)
    out: dict[str, Any] = {"invocationJobSummaries": [_job_json(b, now) for b in page]}
    if start + size < len(jobs):
        out["nextToken"] = str(start + size)
    return web.json_response(out)


async def stop_job(request: web.Request) -> web.Response:
    store = _store(request)
    batch = _find(store, request.match_info["job"])
    if batch is None:
        return error(404, f"Model invocation job {request.match_info['job']} not found")
    now = store.clock()
    if batch.ended(now):
        return error(400, f"The job cannot be stopped: its status is {_status(batch, now)}")
    if batch.cancel_at is None:
        batch.cancel_at = now
    return web.json_response({})


async def invoke_model(request: web.Request) -> web.Response:
    store = _store(request)
    if store.profile.billing_error:
        return error(
            403, "Your AWS account is not authorized: its billing information is invalid or its payment is due"
        )
    model = request.match_info["model"]
    try:
        body = json.loads(await request.read())
    except (json.JSONDecodeError, UnicodeDecodeError):
        return error(400, "Malformed input request: the body is not JSON")
    if not isinstance(body, dict):
        return error(400, "Malformed input request: the body must be a JSON object")
    if body.get("anthropic_version") != ANTHROPIC_VERSION:
        return error(400, f"Malformed input request: anthropic_version must be {ANTHROPIC_VERSION}")
    item = item_from_messages("sync", {**body, "model": model})
    if item.invalid:
        return error(400, f"Malformed input request: {item.invalid}")
    outcome = await sync_call(request.app, item)
    if isinstance(outcome, float):
        return error(
            429,
            "Too many requests, please wait before trying again.",
            "ThrottlingException",
            {"retry-after": str(max(1, round(outcome)))},
        )
    if outcome == "server_error":
        return error(500, "The server encountered an internal error", "InternalServerException")
    ans = answer(item, outcome, cache_hit=False)
    if ans.outcome == "invalid_request":
        return error(400, ans.message)
    message = anthropic_api.message_json(item, ans, f"msg_bdrk_sync_{store.sync_requests}")
    data = orjson.dumps(message)
    if ans.garbled:
        data = garble(data, store.sync_requests)
    return web.Response(body=data, content_type="application/json")


async def converse(request: web.Request) -> web.Response:
    store = _store(request)
    if store.profile.billing_error:
        return error(
            403, "Your AWS account is not authorized: its billing information is invalid or its payment is due"
        )
    try:
        body = json.loads(await request.read())
    except (json.JSONDecodeError, UnicodeDecodeError):
        return error(400, "Malformed input request: the body is not JSON")
    if not isinstance(body, dict):
        return error(400, "Malformed input request: the body must be a JSON object")
    item = converse_item("sync", body, request.match_info["model"])
    if item.invalid:
        return error(400, f"Malformed input request: {item.invalid}")
    outcome = await sync_call(request.app, item)
    if isinstance(outcome, float):
        return error(
            429,
            "Too many requests, please wait before trying again.",
            "ThrottlingException",
            {"retry-after": str(max(1, round(outcome)))},
        )
    if outcome == "server_error":
        return error(500, "The server encountered an internal error", "InternalServerException")
    ans = answer(item, outcome, cache_hit=False)
    if ans.outcome == "invalid_request":
        return error(400, ans.message)
    return web.json_response(converse_json(item, ans))


def routes() -> list[web.RouteDef]:
    return [
        web.post(f"{PREFIX}/model-invocation-job", create_job),
        web.get(f"{PREFIX}/model-invocation-jobs", list_jobs),
        web.post(f"{PREFIX}/model-invocation-job/{{job:.+}}/stop", stop_job),
        web.get(f"{PREFIX}/model-invocation-job/{{job:.+}}", get_job),
        web.post(f"{PREFIX}/model/{{model}}/invoke", invoke_model),
        web.post(f"{PREFIX}/model/{{model}}/converse", converse),
    ]
