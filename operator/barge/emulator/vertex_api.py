"""Vertex AI batch prediction (Gemini and Claude on Vertex) and its synchronous calls, under `/vertex`, as
google-auth 2.63, `google-genai` 3.3.0 (`vertexai=True`, `http_options.base_url` `<emulator>/vertex/`, API
version `v1beta1` or `v1`) and `anthropic.AnthropicVertex` (base_url `<emulator>/vertex/v1`) send and parse them:

| call | answer |
| --- | --- |
| `POST /token` (a service-account key's `token_uri`) | `{access_token: "ya29.barge-<n>", expires_in, token_type}` |
| `POST /{v}/projects/{p}/locations/{l}/batchPredictionJobs` | the BatchPredictionJob, `JOB_STATE_PENDING` |
| `GET .../batchPredictionJobs` (pageSize, pageToken) | `{batchPredictionJobs, nextPageToken}`, newest first |
| `GET .../batchPredictionJobs/{id}`; `POST ...:cancel`; `DELETE` | the job; `{}`; a done long-running operation |
| `POST .../publishers/google/models/{m}:generateContent` | a GenerateContentResponse (gemini_api's) |
| `POST .../publishers/anthropic/models/{m}:rawPredict` | an Anthropic Message (anthropic_api's) |

The token endpoint takes google-auth's JWT-bearer grant and does NOT verify the JWT's signature: it checks the
claims only (`iss`; `aud` Google's token endpoint, which google-auth always names whatever the key's token_uri,
or one ending in `/vertex/token`; `exp` ahead; a `scope` or a `target_audience`). An `iss` starting with
`invalid` is refused `invalid_grant`, as a deleted key is. Every other call needs `Authorization: Bearer` with a
token it issued (else 401 UNAUTHENTICATED); errors are google.rpc.Status in gemini_api's envelope.

A job reads one JSONL object from a real GCS (the JSON API of the server at `BARGE_EMULATOR_GCS_ENDPOINT`,
gcp-storage-emulator in the tests) and, once ended, writes `<outputUriPrefix>/prediction-model-<created, UTC>/
predictions.jsonl` (its `outputInfo.gcsOutputDirectory`). Gemini lines are `{"request": GenerateContentRequest}`
and come back `{status: "", processed_time, request, response}`; Claude lines (model
`publishers/anthropic/models/...`) are `{custom_id, request: {anthropic_version: vertex-2023-10-16, ...}}` (no
`model`) and come back `{custom_id, request, response: Message, status: ""}`. An errored line has a non-empty
`status` and no `response`; a line the job never reached (cancelled, expired) is not in the file and counts as
`incompleteCount`. A job whose input cannot be read line by line fails whole (`JOB_STATE_FAILED`, `error`).
States: PENDING -> RUNNING -> SUCCEEDED, or EXPIRED (the profile drew expired requests: the emulator still writes
what was done), CANCELLING -> CANCELLED (what finished first is written), FAILED. Claude jobs are capped at 4 live
per project (`BARGE_EMULATOR_VERTEX_CLAUDE_JOBS`), Vertex's default quota: the 5th create is 429.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import re
import time
import urllib.error
import urllib.parse
import urllib.request
from datetime import UTC, datetime
from typing import Any, cast

import orjson
from aiohttp import web

from barge.emulator import anthropic_api, gemini_api
from barge.emulator.core import (
    STORE,
    Answer,
    Batch,
    Item,
    ProviderName,
    Store,
    answer,
    answer_response,
    garble,
    item_from_messages,
    sync_call,
    valid_custom_id,
)
from barge.emulator.gemini_api import _response as gemini_response

PREFIX = "/vertex"
TOKEN_PATH = f"{PREFIX}/token"
GCS_ENV = "BARGE_EMULATOR_GCS_ENDPOINT"
CLAUDE_JOBS_ENV = "BARGE_EMULATOR_VERTEX_CLAUDE_JOBS"
CLAUDE_JOBS = 4  # Vertex's default quota of concurrent Claude batch jobs per project
VERSIONS = ("v1", "v1beta1")
ANTHROPIC_VERSION = "vertex-2023-10-16"
#: What anthropic 2.14's AnthropicVertex puts in the body by default (its ANTHROPIC_API_VERSION, not the
#: documented vertex-2023-10-16); rawPredict takes both, a batch line only the documented one.
SDK_ANTHROPIC_VERSION = "2026-10-21"
JWT_GRANT = "urn:ietf:params:oauth:grant-type:jwt-bearer"
GOOGLE_OAUTH2_AUDIENCE = "https://oauth2.googleapis.com/token"
TOKEN_SECONDS = 3600
MAX_DISPLAY_NAME = 128
VERTEX = cast(ProviderName, "vertex")  # not (yet) one of core.ProviderName's, which this module does not own
MODEL = re.compile(r"(?:projects/[^/]+/locations/[^/]+/)?publishers/(google|anthropic)/models/([^/]+)")
BILLING = "This API method requires billing to be enabled. Please enable billing on the project and retry."
_NO_PROXY = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # the GCS server is local: no proxy


def error(status: int, message: str, details: list[dict[str, Any]] | None = None, rpc_status: str = "") -> web.Response:
    """google.rpc.Status in the API's error envelope (`rpc_status` when the code's usual name is not it)."""
    body: dict[str, Any] = {"code": status, "message": message, "status": rpc_status or gemini_api.STATUS.get(status)}
    body["status"] = body["status"] or ("INTERNAL" if status >= 500 else "UNKNOWN")
    if details:
        body["details"] = details
    return web.json_response({"error": body}, status=status)


def unauthorized() -> web.Response:
    return error(
        401,
        "Request had invalid authentication credentials. Expected OAuth 2 access token, login cookie or other "
        "valid authentication credential.",
    )


def _tokens(store: Store) -> dict[str, float]:
    """The access tokens issued -> their expiry on the store's clock (on the store, so its state file keeps them)."""
    tokens: dict[str, float] = vars(store).setdefault("vertex_tokens", {})
    return tokens


def access_token(request: web.Request) -> str | None:
    """The request's bearer token if this emulator issued it and it has not expired (the token endpoint needs
    none), else None."""
    if request.path == TOKEN_PATH:
        return "token-endpoint"
    auth = request.headers.get("authorization", "")
    token = auth[7:] if auth.startswith("Bearer ") else ""
    store = request.app[STORE]
    return token if token and _tokens(store).get(token, 0.0) > store.clock() else None


def _oauth_error(code: str, description: str) -> web.Response:
    return web.json_response({"error": code, "error_description": description}, status=400)


def _b64(segment: str) -> Any:
    return json.loads(base64.urlsafe_b64decode(segment + "=" * (-len(segment) % 4)))


def _claims(assertion: str) -> dict[str, Any]:
    """A JWT's payload, its signature unchecked (ValueError if it is not header.payload.signature of JSON)."""
    parts = assertion.split(".")
    if len(parts) != 3 or not isinstance(_b64(parts[0]), dict):
        raise ValueError("not a JWT")
    claims = _b64(parts[1])
    if not isinstance(claims, dict):
        raise ValueError("the JWT's payload is not an object")
    return claims


async def token(request: web.Request) -> web.Response:
    """The JWT-bearer grant google-auth's service-account credentials send (form-encoded; JSON taken too)."""
    store = request.app[STORE]
    if request.content_type == "application/json":
        raw = await _json(request) or {}
        form = {str(k): str(v) for k, v in raw.items()}
    else:
        form = {k: str(v) for k, v in (await request.post()).items()}
    if form.get("grant_type") != JWT_GRANT:
        return _oauth_error("unsupported_grant_type", f"Invalid grant_type: {form.get('grant_type', '')}")
    try:
        claims = _claims(form.get("assertion", ""))
    except ValueError:
        return _oauth_error("invalid_grant", "Invalid JWT: the assertion is not a JSON Web Token.")
    iss, aud, exp = claims.get("iss"), claims.get("aud"), claims.get("exp")
    if not isinstance(iss, str) or not iss:
        return _oauth_error("invalid_grant", "Invalid JWT: iss (the service account's email) is required.")
    if iss.startswith("invalid"):
        return _oauth_error("invalid_grant", "Invalid JWT Signature.")
    if not isinstance(aud, str) or not (aud == GOOGLE_OAUTH2_AUDIENCE or aud.endswith(TOKEN_PATH)):
        return _oauth_error("invalid_grant", "Invalid JWT: Failed audience check.")
    if not isinstance(exp, int | float) or exp <= time.time():  # the client's wall clock made it, not the store's
        return _oauth_error(
            "invalid_grant",
            "Invalid JWT: Token must be a short-lived token (60 minutes) and in a reasonable timeframe.",
        )
    if not claims.get("scope") and not claims.get("target_audience"):
        return _oauth_error("invalid_scope", "Invalid oauth scope or ID token audience provided.")
    tokens = _tokens(store)
    access = f"ya29.barge-{len(tokens) + 1}"
    tokens[access] = store.clock() + TOKEN_SECONDS
    return web.json_response({"access_token": access, "expires_in": TOKEN_SECONDS, "token_type": "Bearer"})


# --- GCS, through the JSON API of the server at GCS_ENV ------------------------------------------------------


def _split(uri: str) -> tuple[str, str]:
    bucket, _, name = uri.removeprefix("gs://").partition("/")
    if not uri.startswith("gs://") or not bucket or not name:
        raise ValueError(f"not a gs://bucket/object URI: {uri!r}")
    return bucket, name


def _endpoint() -> str:
    endpoint = os.environ.get(GCS_ENV, "").rstrip("/")
    if not endpoint.startswith(("http://", "https://")):
        raise RuntimeError(f"the emulator has no GCS: set {GCS_ENV} (a GCS JSON API server, gcp-storage-emulator)")
    return endpoint


def _call(url: str, data: bytes | None = None) -> bytes:
    headers = {"Content-Type": "application/octet-stream"} if data is not None else {}
    request = urllib.request.Request(url, data=data, headers=headers, method="POST" if data is not None else "GET")  # noqa: S310 - http(s) only (_endpoint)
    try:
        with _NO_PROXY.open(request, timeout=60) as resp:
            body: bytes = resp.read()
            return body
    except urllib.error.HTTPError as exc:
        if exc.code == 404:
            raise FileNotFoundError(f"{url}: not found (no such bucket or object)") from exc
        raise


def gcs_read(uri: str) -> bytes:
    """The bytes of `gs://bucket/object` (FileNotFoundError when there is no such object or bucket). Blocking."""
    bucket, name = _split(uri)
    quoted = urllib.parse.quote(name, safe="")
    return _call(f"{_endpoint()}/storage/v1/b/{urllib.parse.quote(bucket, safe='')}/o/{quoted}?alt=media")


def gcs_write(uri: str, data: bytes) -> None:
    """Write `data` as `gs://bucket/object` (FileNotFoundError when the bucket does not exist). Blocking."""
    bucket, name = _split(uri)
    query = urllib.parse.urlencode({"uploadType": "media", "name": name})
    _call(f"{_endpoint()}/upload/storage/v1/b/{urllib.parse.quote(bucket, safe='')}/o?{query}", data)


# --- jobs ----------------------------------------------------------------------------------------------------


def _store(request: web.Request) -> Store:
    return request.app[STORE]


def _rfc3339(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).isoformat().replace("+00:00", "Z")


async def _json(request: web.Request) -> dict[str, Any] | None:
    try:
        body = json.loads(await request.read())
    except (json.JSONDecodeError, UnicodeDecodeError):
        return None
    return body if isinstance(body, dict) else None


def _meta(batch: Batch) -> dict[str, str]:
    return batch.metadata if batch.metadata is not None else {}


def _new_job(store: Store, items: list[Item], **extra: Any) -> Batch:
    """core's new_batch (its draws, its clock), renamed: a numeric id, as the SDK takes a bare job id only if it
    is all digits, and the provider "vertex"."""
    batch = store.new_batch("gemini", items, **extra)
    del store.batches[batch.id]
    batch.id = f"7{int(store.instance, 16):010d}{store.creates:06d}"
    batch.provider = VERTEX
    store.batches[batch.id] = batch
    return batch


def _gemini_item(n: int, request: dict[str, Any], model: str) -> Item:
    item = item_from_messages(f"line{n}", gemini_api.gemini_request_body(model, request), line=n)
    labels = request.get("labels", {})
    if not isinstance(labels, dict) or not all(isinstance(v, str) for v in labels.values()):
        item.invalid = "; ".join(filter(None, [item.invalid, "labels: a map of strings to strings"]))
    else:
        item.labels = labels
    return item


def _claude_item(custom_id: str, n: int, request: dict[str, Any], model: str) -> Item:
    item = item_from_messages(custom_id, {**request, "model": model}, line=n)
    problems = [item.invalid] if item.invalid else []
    if request.get("anthropic_version") != ANTHROPIC_VERSION:
        problems.append(f"anthropic_version: must be {ANTHROPIC_VERSION}")
    if "model" in request:
        problems.append("model: not allowed in a batch request (the job names the model)")
    item.invalid = "; ".join(problems)
    return item


def _items(data: bytes, publisher: str, model: str) -> tuple[list[Item], str]:
    """The input's lines as Items, or why the whole job fails."""
    items: list[Item] = []
    seen: set[str] = set()
    for n, raw in enumerate(data.splitlines(), start=1):
        if not raw.strip():
            continue
        try:
            obj = orjson.loads(raw)
        except orjson.JSONDecodeError:
            return [], f"line {n} of the input is not valid JSON"
        if not isinstance(obj, dict) or not isinstance(obj.get("request"), dict):
            return [], f"line {n}: each line needs a request (a JSON object)"
        if publisher == "google":
            items.append(_gemini_item(n, obj["request"], model))
            continue
        custom_id = obj.get("custom_id")
        if not valid_custom_id(custom_id) or custom_id in seen:
            return [], f"line {n}: custom_id must match ^[a-zA-Z0-9_-]{{1,64}}$ and be unique"
        seen.add(custom_id)
        items.append(_claude_item(custom_id, n, obj["request"], model))
    return items, "" if items else "the input has no requests"


def _state(batch: Batch, now: float) -> str:
    meta = _meta(batch)
    if batch.validation_errors or meta.get("writeError"):
        return "JOB_STATE_FAILED" if batch.ended(now) else "JOB_STATE_PENDING"
    if not batch.ended(now):
        if batch.cancel_at is not None:
            return "JOB_STATE_CANCELLING"
        return "JOB_STATE_PENDING" if now - batch.created_at < batch.processing_seconds * 0.1 else "JOB_STATE_RUNNING"
    if batch.cancel_at is not None:
        return "JOB_STATE_CANCELLED"
    expired = any(batch.final_outcome(i) == "expired" for i in range(len(batch.items)))
    return "JOB_STATE_EXPIRED" if expired else "JOB_STATE_SUCCEEDED"


def _status(ans: Answer) -> str:
    """An errored line's status: the error as Vertex words it, google.rpc.Status after a reason phrase."""
    code = 500 if ans.outcome == "server_error" else 400
    reason = "Internal Server Error" if code == 500 else "Bad Request"
    status = gemini_api.STATUS[code]
    return f"{reason}: " + json.dumps({"error": {"code": code, "message": ans.message, "status": status}})


def _output(batch: Batch) -> tuple[bytes, dict[str, str]]:
    """predictions.jsonl of an ended job and its completion counts (the input read again, to echo each request)."""
    meta = _meta(batch)
    requests: dict[int, Any] = {}
    for n, raw in enumerate(gcs_read(meta["inputUri"]).splitlines(), start=1):
        if raw.strip():
            requests[n] = orjson.loads(raw).get("request")
    lines, ok, failed = [], 0, 0
    for index, (item, ans) in zip(batch.order, batch.answers(), strict=True):
        if ans.outcome in ("expired", "canceled"):
            continue
        answered = ans.outcome in ("succeeded", "refusal")
        ok, failed = (ok + 1, failed) if answered else (ok, failed + 1)
        line: dict[str, Any] = {}
        if meta["publisher"] == "google":
            done = batch.created_at + batch.finish_offsets[index] * batch.processing_seconds
            line["status"] = "" if answered else _status(ans)
            line["processed_time"] = datetime.fromtimestamp(done, UTC).isoformat(timespec="milliseconds")
            line["request"] = requests.get(item.line)
            if answered:
                line["response"] = gemini_response(item, ans, f"{batch.id}-{index}")
        else:
            line = {"custom_id": item.custom_id, "request": requests.get(item.line)}
            if answered:
                line["response"] = anthropic_api.message_json(item, ans, f"msg_vrtx_{batch.id}_{index}")
            line["status"] = "" if answered else _status(ans)
        data = orjson.dumps(line)
        lines.append(garble(data, index) if ans.garbled else data)
    counts = {"ok": str(ok), "failed": str(failed), "incomplete": str(len(batch.items) - ok - failed)}
    return b"".join(x + b"\n" for x in lines), counts


def _directory(batch: Batch) -> str:
    stamp = datetime.fromtimestamp(batch.created_at, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    return _meta(batch)["outputPrefix"].rstrip("/") + f"/prediction-model-{stamp}"


def _write_output(batch: Batch) -> dict[str, str]:
    """Write an ended job's predictions (blocking); what to record of it in the job's metadata. A job that
    finished no request (cancelled or expired first) writes nothing and has no outputInfo."""
    directory = _directory(batch)
    try:
        data, counts = _output(batch)
        if data:
            gcs_write(f"{directory}/predictions.jsonl", data)
    except OSError as exc:
        return {"writeError": f"Failed to write the predictions to {directory}: {exc}"}
    return counts | ({"outputDirectory": directory} if data else {})


async def _finish(batch: Batch, now: float) -> None:
    """Once ended, the predictions are in GCS (written once; the path is fixed, so a second writer rewrites the
    same bytes)."""
    meta = _meta(batch)
    if batch.ended(now) and not batch.validation_errors and "ok" not in meta and "writeError" not in meta:
        meta.update(await asyncio.to_thread(_write_output, batch))


def _job_json(batch: Batch, now: float) -> dict[str, Any]:
    meta = _meta(batch)
    out: dict[str, Any] = {
        "name": f"projects/{meta['project']}/locations/{meta['location']}/batchPredictionJobs/{batch.id}",
        "displayName": meta["displayName"],
        "model": meta["model"],
        "inputConfig": {"instancesFormat": "jsonl", "gcsSource": {"uris": [meta["inputUri"]]}},
        "outputConfig": {"predictionsFormat": "jsonl", "gcsDestination": {"outputUriPrefix": meta["outputPrefix"]}},
        "state": _state(batch, now),
        "createTime": _rfc3339(batch.created_at),
        "updateTime": _rfc3339(min(now, batch.end_at)),
    }
    started = batch.created_at + batch.processing_seconds * 0.1
    if now >= started and not batch.validation_errors:
        out["startTime"] = _rfc3339(min(started, batch.end_at))
    if batch.ended(now):
        out["endTime"] = _rfc3339(batch.end_at)
    if batch.validation_errors and batch.ended(now):
        out["error"] = {"code": 3, "message": str(batch.validation_errors[0]["message"])}
    if "writeError" in meta:
        out["error"] = {"code": 5, "message": meta["writeError"]}
    if "outputDirectory" in meta:
        out["outputInfo"] = {"gcsOutputDirectory": meta["outputDirectory"]}
    if "ok" in meta:
        out["completionStats"] = {
            "successfulCount": meta["ok"],
            "failedCount": meta["failed"],
            "incompleteCount": meta["incomplete"],
        }
    return out


def _scope(request: web.Request) -> tuple[str, str] | None:
    """(project, location) of a path under a known API version."""
    if request.match_info["version"] not in VERSIONS:
        return None
    return request.match_info["project"], request.match_info["location"]


def _find(request: web.Request, job_id: str) -> Batch | None:
    batch = _store(request).batches.get(job_id)
    if batch is None or batch.provider != VERTEX or batch.archived:
        return None
    meta = _meta(batch)
    return batch if (meta.get("project"), meta.get("location")) == _scope(request) else None


def _claude_cap() -> int:
    return int(os.environ.get(CLAUDE_JOBS_ENV, str(CLAUDE_JOBS)))


def _config(body: dict[str, Any]) -> tuple[str, str] | str:
    """(input URI, output prefix) of a create's inputConfig and outputConfig, or what is wrong with them."""
    source, dest = _object(body, "inputConfig"), _object(body, "outputConfig")
    if source.get("instancesFormat") != "jsonl":
        return "inputConfig: instancesFormat jsonl and a gcsSource are required (the emulator reads no BigQuery)"
    uris = _object(source, "gcsSource").get("uris")
    if not isinstance(uris, list) or len(uris) != 1 or not str(uris[0]).startswith("gs://"):
        return "inputConfig.gcsSource.uris: one gs:// URI (the emulator reads one input object)"
    if dest.get("predictionsFormat") != "jsonl":
        return "outputConfig: predictionsFormat jsonl and a gcsDestination are required"
    prefix = _object(dest, "gcsDestination").get("outputUriPrefix")
    if not isinstance(prefix, str) or not prefix.startswith("gs://") or len(prefix) <= 5:
        return "outputConfig.gcsDestination.outputUriPrefix: a gs:// URI is required"
    return str(uris[0]), prefix


def _object(parent: dict[str, Any], key: str) -> dict[str, Any]:
    value = parent.get(key)
    return value if isinstance(value, dict) else {}


async def create_job(request: web.Request) -> web.Response:
    store = _store(request)
    scope = _scope(request)
    if scope is None:
        return error(404, "unknown API version")
    if store.profile.billing_error:
        return error(403, BILLING, rpc_status="PERMISSION_DENIED")
    body = await _json(request)
    if body is None:
        return error(400, "Invalid JSON payload: a BatchPredictionJob is required")
    display_name, model = body.get("displayName"), body.get("model")
    if not isinstance(display_name, str) or not display_name or len(display_name) > MAX_DISPLAY_NAME:
        return error(400, f"displayName: required, at most {MAX_DISPLAY_NAME} characters")
    match = MODEL.fullmatch(model) if isinstance(model, str) else None
    if match is None:
        return error(400, f"model: publishers/google/models/... or publishers/anthropic/models/..., not {model!r}")
    publisher, model_id = match.groups()
    config = _config(body)
    if isinstance(config, str):
        return error(400, config)
    in_uri, out_prefix = config
    now = store.clock()
    if publisher == "anthropic":
        live = [
            b
            for b in store.batches.values()
            if b.provider == VERTEX
            and _meta(b).get("publisher") == "anthropic"
            and _meta(b).get("project") == scope[0]
            and not b.ended(now)
        ]
        if len(live) >= _claude_cap():
            return error(
                429,
                f"Quota exceeded for aiplatform.googleapis.com/concurrent_anthropic_batch_prediction_jobs: at most "
                f"{_claude_cap()} batch prediction jobs of Anthropic models may run at once in project {scope[0]}.",
            )
    items: list[Item]
    try:
        items, why = _items(await asyncio.to_thread(gcs_read, in_uri), publisher, model_id)
    except FileNotFoundError:
        items, why = [], f"The input {in_uri} does not exist or cannot be read"
    meta = {"project": scope[0], "location": scope[1], "displayName": display_name, "model": model}
    meta |= {"publisher": publisher, "inputUri": in_uri, "outputPrefix": out_prefix}
    validation = [{"code": "INVALID_ARGUMENT", "message": why}] if why else []
    batch = _new_job(store, items, metadata=meta, validation_errors=validation)
    if store.creates <= store.profile.batch.create_failures_after_accept:
        return error(500, "Internal error encountered.")
    return web.json_response(_job_json(batch, store.clock()))


async def get_job(request: web.Request) -> web.Response:
    store = _store(request)
    batch = _find(request, request.match_info["rest"])
    if batch is None:
        return error(404, f"BatchPredictionJob {request.match_info['rest']} not found")
    now = store.clock()
    await _finish(batch, now)
    return web.json_response(_job_json(batch, now))


async def list_jobs(request: web.Request) -> web.Response:
    store = _store(request)
    scope = _scope(request)
    if scope is None:
        return error(404, "unknown API version")
    if request.query.get("filter"):
        return error(400, "filter: the emulator does not filter the listing")
    try:
        size = int(request.query.get("pageSize", "100") or "100")
        start = int(request.query.get("pageToken", "0") or "0")
    except ValueError:
        return error(400, "pageSize and pageToken must be integers")
    jobs = [b for b in store.listing(VERTEX) if (_meta(b)["project"], _meta(b)["location"]) == scope]
    page = jobs[start : start + max(1, min(size, 1000))]
    now = store.clock()
    for batch in page:
        await _finish(batch, now)
    out: dict[str, Any] = {"batchPredictionJobs": [_job_json(b, now) for b in page]}
    if start + len(page) < len(jobs):
        out["nextPageToken"] = str(start + len(page))
    return web.json_response(out)


async def cancel_job(request: web.Request) -> web.Response:
    """`batchPredictionJobs/{id}:cancel`: asynchronous (CANCELLING, then CANCELLED), answered with Empty."""
    job_id, _, method = request.match_info["rest"].partition(":")
    if method != "cancel":
        return error(404, f"unknown method {method!r}")
    batch = _find(request, job_id)
    if batch is None:
        return error(404, f"BatchPredictionJob {job_id} not found")
    now = _store(request).clock()
    if batch.ended(now):
        message = f"BatchPredictionJob {job_id} is in state {_state(batch, now)} and cannot be cancelled."
        return error(400, message, rpc_status="FAILED_PRECONDITION")
    if batch.cancel_at is None:
        batch.cancel_at = now
    return web.json_response({})


async def delete_job(request: web.Request) -> web.Response:
    """An ended job is deleted at once: the long-running operation answered is already done."""
    store = _store(request)
    batch = _find(request, request.match_info["rest"])
    if batch is None:
        return error(404, f"BatchPredictionJob {request.match_info['rest']} not found")
    now = store.clock()
    if not batch.ended(now):
        message = f"BatchPredictionJob {batch.id} is in state {_state(batch, now)}; only an ended job can be deleted."
        return error(400, message, rpc_status="FAILED_PRECONDITION")
    fault = store.delete_fault()
    if fault is not None:
        return error(fault[0], fault[1])
    batch.archived = True
    project, location = _scope(request) or ("", "")
    times = {"createTime": _rfc3339(now), "updateTime": _rfc3339(now)}
    return web.json_response(
        {
            "name": f"projects/{project}/locations/{location}/operations/{batch.id}{store.deletes}",
            "metadata": {
                "@type": "type.googleapis.com/google.cloud.aiplatform.v1beta1.DeleteOperationMetadata",
                "genericMetadata": times,
            },
            "done": True,
            "response": {"@type": "type.googleapis.com/google.protobuf.Empty"},
        }
    )


# --- synchronous calls -----------------------------------------------------------------------------------------


async def predict(request: web.Request) -> web.Response:
    """`publishers/google/models/{m}:generateContent` and `publishers/anthropic/models/{m}:rawPredict`."""
    if _scope(request) is None:
        return error(404, "unknown API version")
    publisher = request.match_info["publisher"]
    model, _, method = request.match_info["rest"].partition(":")
    if _store(request).profile.billing_error:
        return error(403, BILLING, rpc_status="PERMISSION_DENIED")
    if (publisher, method) == ("google", "generateContent"):
        return await gemini_api.generate_content(request, model)  # the same answer, quota and faults
    if (publisher, method) == ("anthropic", "rawPredict"):
        return await raw_predict(request, model)
    return error(404, f"unknown method {method!r} on publishers/{publisher}/models/{model}")


async def raw_predict(request: web.Request, model: str) -> web.Response:
    """Claude's Messages body, the model in the URL. The model's own refusals (a bad body, overloaded) come back in
    Anthropic's error shape, Vertex's quota as google.rpc, as Vertex passes them on."""
    store = _store(request)
    body = await _json(request)
    if body is None:
        return anthropic_api.error(400, "Request body is not a JSON object")
    if body.get("anthropic_version") not in (ANTHROPIC_VERSION, SDK_ANTHROPIC_VERSION):
        return anthropic_api.error(400, f"anthropic_version: must be {ANTHROPIC_VERSION}")
    if "model" in body:
        return anthropic_api.error(400, "model: the model is named in the URL, not the body")
    if body.get("stream"):
        return anthropic_api.error(400, "stream: the emulator does not stream (streamRawPredict)")
    item = item_from_messages("sync", {**body, "model": model})
    if item.invalid:
        return anthropic_api.error(400, item.invalid)
    outcome = await sync_call(request.app, item)
    if isinstance(outcome, float):
        return gemini_api.rate_limited(outcome)
    if outcome == "server_error":
        return anthropic_api.error(529, "Overloaded")
    ans = answer(item, outcome, cache_hit=False)
    if ans.outcome == "invalid_request":
        return anthropic_api.error(400, ans.message)
    message = anthropic_api.message_json(item, ans, f"msg_vrtx_sync_{store.sync_requests}")
    return answer_response(message, ans, store.sync_requests)


def routes() -> list[web.RouteDef]:
    jobs = f"{PREFIX}/{{version}}/projects/{{project}}/locations/{{location}}/batchPredictionJobs"
    models = f"{PREFIX}/{{version}}/projects/{{project}}/locations/{{location}}/publishers/{{publisher}}/models"
    return [
        web.post(TOKEN_PATH, token),
        web.post(jobs, create_job),
        web.get(jobs, list_jobs),
        web.get(f"{jobs}/{{rest}}", get_job),
        web.post(f"{jobs}/{{rest}}", cancel_job),
        web.delete(f"{jobs}/{{rest}}", delete_job),
        web.post(f"{models}/{{rest}}", predict),
    ]
