"""`barge gateway`: the OpenAI Files and Batches API over aiohttp, each call authenticated and authorized first.

Every refusal is an OpenAI-shaped error ({"error": {message, type, param, code}}) with the status the SDK maps to
its exception: 401 AuthenticationError (no or unknown token), 403 PermissionDeniedError (RBAC), 404 NotFoundError
(also another namespace's ids: a batch or file is looked up only in the caller's namespace and storage folder, so
its existence elsewhere is never told), 400 BadRequestError (a bad file, with its line numbers), 413 (over a limit).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import orjson
from aiohttp import BodyPartReader, web
from kubernetes_asyncio.client.exceptions import ApiException

from barge.batch import failpoints
from barge.gateway import batches, files, metrics
from barge.gateway.auth import Authority, Caller, Forbidden, Unauthorized, token_of
from barge.gateway.jobs import Jobs
from barge.netguard import AddressCheck
from barge.operator.kube import Kube
from barge.policy import Policy
from barge.storage import StorageError, StoragePolicy, join, read_lines

log = logging.getLogger("barge.gateway")
#: Failpoints (BARGE_FAILPOINT, batch/failpoints.py): after the batch's job is created, before the answer; and after
#: the first chunk of an upload is stored.
AFTER_CREATE, MID_UPLOAD = "gateway-after-create", "gateway-mid-upload"
CHUNK = 1 << 16


@dataclass(frozen=True)
class GatewaySettings:
    """What the admin sets (CLI flags or the chart's gateway.* values)."""

    audience: str = "barge"
    """TokenReview audience a caller's ServiceAccount token must carry (`kubectl create token --audience`)."""
    max_upload_bytes: int = 200 * 1024 * 1024
    """Largest input file, in bytes (OpenAI's 200 MB by default; Barge shards larger files, so raise it freely)."""
    max_lines: int = 50_000
    """Most requests per file (OpenAI's 50,000 by default)."""
    default_max_tokens: int = 1024
    """spec.request.maxTokens of a batch whose lines set no max_tokens (the job is priced by it)."""
    metrics_port: int = 0
    """Port of the /metrics server (gateway/metrics.py), apart from the callers' port; 0: no metrics server."""


ErrorShape = Callable[[int, str, "str | None", "str | None"], web.Response]


class HttpError(Exception):
    def __init__(self, status: int, message: str, code: str | None = None, param: str | None = None) -> None:
        super().__init__(message)
        self.status, self.message, self.code, self.param = status, message, code, param


def _error(status: int, message: str, code: str | None = None, param: str | None = None) -> web.Response:
    kind = {401: "authentication_error", 403: "permission_error", 404: "not_found_error", 413: "request_too_large"}
    body = {
        "error": {"message": message, "type": kind.get(status, "invalid_request_error"), "param": param, "code": code}
    }
    return web.Response(status=status, body=orjson.dumps(body), content_type="application/json")


def _json(data: Any, status: int = 200) -> web.Response:
    return web.Response(status=status, body=orjson.dumps(data), content_type="application/json")


def _page(items: list[dict[str, Any]], after: str | None, limit: int) -> dict[str, Any]:
    if after:
        ids = [i["id"] for i in items]
        items = items[ids.index(after) + 1 :] if after in ids else []
    page = items[:limit]
    return {
        "object": "list",
        "data": page,
        "first_id": page[0]["id"] if page else None,
        "last_id": page[-1]["id"] if page else None,
        "has_more": len(items) > limit,
    }


def _limit(request: web.Request) -> int:
    try:
        return max(1, min(100, int(request.query.get("limit", "20"))))
    except ValueError:
        raise HttpError(400, "limit must be an integer", param="limit") from None


class Gateway:
    def __init__(self, kube: Kube, policy: Policy, settings: GatewaySettings) -> None:
        self.kube = kube
        self.policy = policy
        self.settings = settings
        self.authority = Authority(kube, policy, settings.audience)
        self.jobs = Jobs(kube)

    # --- plumbing ----------------------------------------------------------------------------------------------
    async def _caller(self, request: web.Request, verb: str) -> Caller:
        caller = await self.authority.caller(token_of(request.headers))
        request[metrics.TENANT] = caller.tenant  # the metrics' tenant label, also for a 403 that follows
        await self.authority.allow(caller, verb)
        return caller

    def place(self, caller: Caller) -> files.Place:
        prefixes = self.policy.prefixes_for(caller.namespace, caller.tenant)
        if not prefixes:
            raise HttpError(403, f"the admin's policy gives tenant {caller.tenant!r} no storage prefix for files")
        chosen = self.policy.gateway.prefix_for(caller.tenant, caller.namespace)  # under prefixes (checked at load)
        root = join(chosen or join(prefixes[0], "gateway"), caller.namespace)
        return files.Place(root, StoragePolicy(prefixes=prefixes, addresses=AddressCheck(self.policy)))

    async def pool_for(self, caller: Caller, model: str) -> str:
        """The InferencePool of the caller's namespace that runs `model`: a pool of that name, else the admin's alias
        (policy gateway.aliases, barge/gateway_policy.py); always in the caller's namespace. 400 when none exists."""
        tried = self.policy.gateway.candidates(caller.tenant, model)
        for pool in tried:
            if await self.jobs.pool_exists(caller.namespace, pool):
                return pool
        shown = " or ".join(repr(p) for p in tried) or "none (not a pool name, no alias of the admin)"
        raise HttpError(
            400,
            f"model {model!r} is not an InferencePool of namespace {caller.namespace} nor an alias of the admin's "
            f"to one (looked up: {shown})",
            "model_not_found",
            "model",
        )

    @staticmethod
    async def _off_loop(call: Callable[..., Any], *args: Any) -> Any:
        return await asyncio.get_running_loop().run_in_executor(None, call, *args)

    def routes(self) -> list[web.RouteDef]:
        return [
            web.post("/v1/files", self.wrap(self.upload)),
            web.get("/v1/files", self.wrap(self.list_files)),
            web.get("/v1/files/{id}", self.wrap(self.get_file)),
            web.get("/v1/files/{id}/content", self.wrap(self.file_content)),
            web.delete("/v1/files/{id}", self.wrap(self.delete_file)),
            web.post("/v1/batches", self.wrap(self.create_batch)),
            web.get("/v1/batches", self.wrap(self.list_batches)),
            web.get("/v1/batches/{id}", self.wrap(self.get_batch)),
            web.post("/v1/batches/{id}/cancel", self.wrap(self.cancel_batch)),
        ]

    @staticmethod
    def wrap(handler: Callable[[web.Request], Awaitable[web.StreamResponse]], error: ErrorShape | None = None) -> Any:
        """The handler with every refusal turned into its HTTP error, in the API's error shape."""
        shape = error or _error

        async def run(request: web.Request) -> web.StreamResponse:
            try:
                return await handler(request)
            except HttpError as exc:
                return shape(exc.status, exc.message, exc.code, exc.param)
            except Unauthorized as exc:
                return shape(401, str(exc), "invalid_api_key", None)
            except Forbidden as exc:
                return shape(403, str(exc), None, None)
            except files.TooLarge as exc:
                return shape(413, str(exc), "file_too_large", None)
            except StorageError as exc:
                log.warning("storage: %s", exc)
                return shape(500, "the gateway's storage failed; try again", "storage_error", None)
            except ApiException as exc:
                log.warning("API server: %s %s", exc.status, exc.reason)
                return shape(502, "the Kubernetes API server refused the gateway's call", "upstream_error", None)

        return run

    # --- files -------------------------------------------------------------------------------------------------
    async def upload(self, request: web.Request) -> web.Response:
        caller = await self._caller(request, "create")
        place = self.place(caller)
        if request.content_length is not None and request.content_length > self.settings.max_upload_bytes + CHUNK:
            raise files.TooLarge(f"the file is over the gateway's limit of {self.settings.max_upload_bytes} bytes")
        try:
            reader = await request.multipart()
        except (AssertionError, ValueError):
            raise HttpError(400, "expected a multipart/form-data upload with purpose and file") from None
        purpose, obj, check = "", None, None
        while (part := await reader.next()) is not None:
            if not isinstance(part, BodyPartReader):
                continue
            name = part.name
            if name == "purpose":
                purpose = (await part.read_chunk(256)).decode(errors="replace")
            elif name == "file" and obj is None:

                async def chunks(p: BodyPartReader = part) -> AsyncIterator[bytes]:
                    first = True
                    while chunk := await p.read_chunk(CHUNK):
                        yield chunk
                        if not first:
                            failpoints.hit(MID_UPLOAD)  # the first chunk is on its way to storage
                        first = False

                file_id = files.new_file_id()
                obj, check = await files.store_upload(
                    place,
                    file_id,
                    chunks(),
                    filename=str(part.filename or "input.jsonl")[:256],
                    purpose="batch",
                    max_bytes=self.settings.max_upload_bytes,
                    max_lines=self.settings.max_lines,
                    created_at=int(time.time()),
                )
        if check is None:
            raise HttpError(400, "no file part in the upload", param="file")
        if check.errors:
            shown = "; ".join(f"line {n}: {m}" for n, m in check.errors[:20])
            more = f" (and {len(check.errors) - 20} more)" if len(check.errors) > 20 else ""
            raise HttpError(400, f"the file was refused: {shown}{more}", "invalid_file", "file")
        assert obj is not None
        if purpose != "batch":
            await self._off_loop(files.delete, place, obj["id"])
            raise HttpError(400, f"purpose must be 'batch' (got {purpose!r})", param="purpose")
        request[metrics.UPLOADED] = int(obj.get("bytes") or 0)
        return _json(obj)

    async def list_files(self, request: web.Request) -> web.Response:
        caller = await self._caller(request, "list")
        records = await self._off_loop(files.list_records, self.place(caller))
        return _json(_page([files.public(r) for r in records], request.query.get("after"), _limit(request)))

    async def _output_job(self, caller: Caller, file_id: str) -> tuple[str, str, dict[str, Any]] | None:
        for suffix, kind in ((batches.OUTPUT_SUFFIX, "output"), (batches.ERROR_SUFFIX, "errors")):
            batch_id = file_id.removesuffix(suffix)
            if batch_id != file_id and (name := batches.job_name(batch_id)) is not None:
                job = await self.jobs.get(caller.namespace, name)
                obj = batches.batch_object(job) if job and batches.kind_of(job) == "openai" else {}
                if obj.get("output_file_id" if kind == "output" else "error_file_id") == file_id:
                    return batch_id, kind, obj
        return None

    async def get_file(self, request: web.Request) -> web.Response:
        caller = await self._caller(request, "get")
        file_id = request.match_info["id"]
        found = await self._output_job(caller, file_id)
        if found is not None:
            batch_id, kind, obj = found
            return _json(
                {
                    "id": file_id,
                    "object": "file",
                    "bytes": 0,
                    "created_at": obj.get("completed_at") or obj["created_at"],
                    "filename": f"{batch_id}_{kind}.jsonl",
                    "purpose": "batch_output",
                    "status": "processed",
                    "expires_at": None,
                    "status_details": None,
                }
            )
        record = await self._off_loop(files.read_record, self.place(caller), file_id)
        if record is None:
            raise HttpError(404, f"No such File object: {file_id}", param="id")
        return _json(files.public(record))

    async def file_content(self, request: web.Request) -> web.StreamResponse:
        caller = await self._caller(request, "get")
        file_id = request.match_info["id"]
        place = self.place(caller)
        found = await self._output_job(caller, file_id)
        if found is not None:
            batch_id, kind, obj = found
            lines = self._output_lines(place, batch_id, kind, str(obj.get("model") or ""))
        elif await self._off_loop(files.read_record, place, file_id) is not None:
            lines = files.content(place, file_id)
        else:
            raise HttpError(404, f"No such File object: {file_id}", param="id")
        response = web.StreamResponse(headers={"Content-Type": "application/octet-stream"})
        await response.prepare(request)
        iterator = iter(lines)
        while True:
            chunk = await self._off_loop(_take, iterator)
            if not chunk:
                break
            await response.write(chunk)
        await response.write_eof()
        return response

    def _output_lines(self, place: files.Place, batch_id: str, kind: str, model: str) -> Iterator[bytes]:
        out = place.outputs(batch_id)
        name = "results.jsonl" if kind == "output" else "failures.jsonl"
        for _, raw in read_lines(join(out, name), place.storage):
            if not raw.strip():
                continue
            item = orjson.loads(raw)
            line = (
                batches.output_line(item, batch_id, model) if kind == "output" else batches.error_line(item, batch_id)
            )
            yield orjson.dumps(line) + b"\n"

    async def delete_file(self, request: web.Request) -> web.Response:
        caller = await self._caller(request, "delete")
        file_id = request.match_info["id"]
        if not await self._off_loop(files.delete, self.place(caller), file_id):
            raise HttpError(404, f"No such File object: {file_id}", param="id")
        return _json({"id": file_id, "object": "file", "deleted": True})

    # --- batches -----------------------------------------------------------------------------------------------
    async def create_batch(self, request: web.Request) -> web.Response:
        caller = await self._caller(request, "create")
        try:
            body = await request.json(loads=orjson.loads)
        except ValueError:
            raise HttpError(400, "the request body must be JSON") from None
        if not isinstance(body, dict):
            raise HttpError(400, "the request body must be a JSON object")
        file_id = str(body.get("input_file_id") or "")
        if body.get("completion_window") != "24h":
            raise HttpError(400, "completion_window must be '24h'", param="completion_window")
        metadata = body.get("metadata")
        if metadata is not None and (
            not isinstance(metadata, dict)
            or len(metadata) > 16
            or any(not isinstance(v, str) or len(k) > 64 or len(v) > 512 for k, v in metadata.items())
        ):
            raise HttpError(400, "metadata: at most 16 string pairs (keys 64, values 512 characters)", param="metadata")
        place = self.place(caller)
        record = await self._off_loop(files.read_record, place, file_id)
        if record is None:
            raise HttpError(404, f"No such File object: {file_id}", param="input_file_id")
        checked = record.get("barge") or {}
        if body.get("endpoint") != checked.get("url"):
            raise HttpError(
                400, f"endpoint must be the file's url {checked.get('url')!r}", "invalid_endpoint", "endpoint"
            )
        model = str(checked.get("model"))
        pool = await self.pool_for(caller, model)
        key = request.headers.get("Idempotency-Key")
        batch_id = batches.idempotent_id(caller.namespace, key) if key else batches.new_batch_id()
        job = batches.build_job(
            batch_id,
            caller.namespace,
            pool=pool,
            model=model,
            input_url=place.data(file_id),
            output_url=place.outputs(batch_id),
            max_tokens=int(checked.get("max_tokens") or 0) or self.settings.default_max_tokens,
            endpoint=str(checked.get("url")),
            input_file_id=file_id,
            metadata=metadata,
            now=datetime.now(UTC),
        )
        made: dict[str, Any] | None
        try:
            made = await self.jobs.create(job)
            failpoints.hit(AFTER_CREATE)  # crash tests: the job exists, the caller never heard of it
        except ApiException as exc:
            if exc.status == 409 and key:
                made = await self.jobs.get(caller.namespace, str(job["metadata"]["name"]))
                if made is None:
                    raise HttpError(409, "Idempotency-Key names an object that is not a batch") from None
            elif exc.status in (400, 422):
                raise HttpError(400, f"the batch was refused by the API server: {exc.reason}") from None
            else:
                raise
        return _json(batches.batch_object(made))

    async def _job(self, caller: Caller, batch_id: str) -> dict[str, Any]:
        name = batches.job_name(batch_id)
        job = await self.jobs.get(caller.namespace, name) if name else None
        if job is None or batches.kind_of(job) != "openai":
            raise HttpError(404, f"No such Batch object: {batch_id}", param="batch_id")
        return job

    async def get_batch(self, request: web.Request) -> web.Response:
        caller = await self._caller(request, "get")
        return _json(batches.batch_object(await self._job(caller, request.match_info["id"])))

    async def cancel_batch(self, request: web.Request) -> web.Response:
        caller = await self._caller(request, "patch")
        job = await self._job(caller, request.match_info["id"])
        if batches.status_of(job) in ("completed", "failed", "expired", "cancelled"):
            raise HttpError(409, f"the batch is {batches.status_of(job)}: it cannot be cancelled", "invalid_state")
        record = batches.record_of(job)
        if record.get("cancelled_at") is None:
            record["cancelled_at"] = int(time.time())
        patch = {
            "metadata": {"annotations": {batches.ANNOTATION: orjson.dumps(record).decode()}},
            "spec": {"suspend": True},  # the operator cancels the job's live provider batches and holds it
        }
        made = await self.jobs.patch(caller.namespace, job["metadata"]["name"], patch)
        return _json(batches.batch_object(made))

    async def list_batches(self, request: web.Request) -> web.Response:
        caller = await self._caller(request, "list")
        jobs = await self.jobs.list(caller.namespace)
        objs = [batches.batch_object(j) for j in jobs if batches.kind_of(j) == "openai"]
        objs.sort(key=lambda b: (-int(b["created_at"]), b["id"]))
        return _json(_page(objs, request.query.get("after"), _limit(request)))


def _take(iterator: Iterator[bytes], size: int = 1 << 18) -> bytes:
    """The next lines of `iterator`, up to about `size` bytes (read off the event loop)."""
    out = bytearray()
    for line in iterator:
        out += line
        if len(out) >= size:
            break
    return bytes(out)
