"""The Gemini API's Batch Mode through the `google-genai` SDK (Files API upload + `batches.create`).

A shard is written to a temporary file of `{"key", "request"}` lines (gemini_encoding), uploaded through the Files
API's resumable upload, and run as one batch of the model its first line names. The Gemini API has no idempotency
key on `batches.create` and no metadata on a batch: Barge's metadata (job tag and shard, the ledger intent's
identity) and the input file's name travel in the batch's `displayName` (`barge?barge_job=..&barge_shard=..&input=
files/..`), read back by `list_recent`, so an orphan left by a crash between create and record is adopted by it
(batch/adoption.py), as Mistral's and OpenAI's are by their metadata. Creates never retry.

States (the SDK turns the API's BATCH_STATE_* into JOB_STATE_*): PENDING, RUNNING, then SUCCEEDED, FAILED,
CANCELLED or EXPIRED (pending or running past 48 h: Barge's own deadline falls well before). Results are the
responses file's `{"key", "response" | "error"}` lines; a per-request error is a google.rpc.Status:
`CANCELLED` -> canceled, `DEADLINE_EXCEEDED` -> expired, the rest by status as every provider's errors are. A
finish reason SAFETY (or a blocked prompt) is a refusal. An expired, cancelled or failed batch with no responses
file yields nothing: the engine routes the shard's requests as missing results and retries them. Tokens from
`usageMetadata`: prompt less cached is input, cached is cache read, candidates plus thoughts is output.
Retention deletes the input file, the responses file and the batch (the Files API would drop the files after 48 h).
"""

from __future__ import annotations

import itertools
import tempfile
from collections.abc import AsyncIterator, Iterable
from datetime import UTC, datetime
from typing import IO, Any, cast
from urllib.parse import parse_qsl, urlencode

import httpx2
import orjson
import pydantic
from google import genai
from google.genai import errors, types

from barge.providers import jsonl
from barge.providers.base import (
    UNREADABLE_ANSWER,
    BatchInfo,
    Outcome,
    Parsed,
    Request,
    Result,
    as_result,
    counted,
    flatten,
)
from barge.providers.errors import Fatal, Invalid, ProviderError, Transient, classify, rpc_details, rpc_retry_delay
from barge.providers.gemini_encoding import encode_gemini, gemini_request
from barge.providers.guard import Allowed, CappedTransport, guarded_transport

ENDED = frozenset({"JOB_STATE_SUCCEEDED", "JOB_STATE_FAILED", "JOB_STATE_CANCELLED", "JOB_STATE_EXPIRED"})
ENDED |= {"JOB_STATE_PARTIALLY_SUCCEEDED"}
DISPLAY_PREFIX = "barge?"
INPUT_KEY = "input"
REFUSALS = frozenset({"SAFETY", "PROHIBITED_CONTENT", "BLOCKLIST", "SPII", "RECITATION", "IMAGE_SAFETY"})
#: A per-request google.rpc.Status that is not an error of the request itself.
LINE_OUTCOMES = {"CANCELLED": Outcome.CANCELED, "DEADLINE_EXCEEDED": Outcome.EXPIRED}
RPC_HTTP = {"INVALID_ARGUMENT": 400, "FAILED_PRECONDITION": 400, "OUT_OF_RANGE": 400, "NOT_FOUND": 404}
RPC_HTTP |= {"UNAUTHENTICATED": 401, "PERMISSION_DENIED": 403, "RESOURCE_EXHAUSTED": 429, "ABORTED": 409}
RPC_HTTP |= {"INTERNAL": 500, "UNAVAILABLE": 503, "UNKNOWN": 500, "DATA_LOSS": 500}
RPC_INVALID = {3: "INVALID_ARGUMENT", 5: "NOT_FOUND", 9: "FAILED_PRECONDITION", 11: "OUT_OF_RANGE"}
RETRIED_STATUSES = [408, 429, 500, 502, 503, 504]
#: The most batches `list_recent` reads to sort them newest first (100 pages; Barge's own are deleted by retention).
MAX_LISTED = 10_000
_ONCE = types.HttpOptions(retry_options=types.HttpRetryOptions(attempts=1))  # this one call is not retried


def from_gemini(exc: BaseException) -> ProviderError:
    """The SDK's exceptions as a domain error. A bad key is 400 INVALID_ARGUMENT with reason API_KEY_INVALID
    (fatal); a 429 with a RetryInfo is a rate limit (transient) even when its message speaks of quota, one without
    and with billing words is a project out of money (fatal)."""
    if isinstance(exc, httpx2.TimeoutException):
        return Transient(f"timeout: {exc}", error_type="timeout")
    if isinstance(exc, httpx2.HTTPError):
        cause = f" ({exc.__cause__})" if exc.__cause__ else ""  # e.g. the endpoint policy's refusal
        return Transient(f"connection failed: {exc}{cause}", error_type="connection_error")
    if not isinstance(exc, errors.APIError):
        return Transient(f"unexpected error: {exc!r}", error_type="unknown")
    details = rpc_details(exc.details)
    kind = str(exc.status or f"http_{exc.code}")
    message = str(exc.message or exc)[:300]
    delay = rpc_retry_delay(details)
    if any(d.get("reason") in ("API_KEY_INVALID", "API_KEY_SERVICE_BLOCKED") for d in details):
        return Fatal(f"{kind}: {message}", error_type="invalid_api_key")
    if exc.code == 429 and delay is not None:
        return Transient(f"{kind}: {message}", error_type="rate_limit_exceeded", retry_after=delay)
    cls = classify(exc.code, kind, message)
    return cls(f"{kind}: {message}", error_type=kind, retry_after=delay)


def _display_name(metadata: dict[str, str], input_file: str) -> str:
    return DISPLAY_PREFIX + urlencode({**metadata, INPUT_KEY: input_file})


def display_metadata(display_name: str | None) -> dict[str, str]:
    """Barge's metadata from a batch's display name ({} for a batch Barge did not name)."""
    if not display_name or not display_name.startswith(DISPLAY_PREFIX):
        return {}
    return dict(parse_qsl(display_name[len(DISPLAY_PREFIX) :]))


def job_state(job: types.BatchJob) -> str:
    state = job.state
    return str(state.value if isinstance(state, types.JobState) else state or "JOB_STATE_UNSPECIFIED")


def _info(job: types.BatchJob) -> BatchInfo:
    status = job_state(job)
    code = job.error.code if job.error else None
    # Only a batch refused for its input is failed as invalid (ingest.py); one failed for any other reason (or
    # for none the SDK says: its Developer-API BatchJob drops the operation's error) has its requests retried.
    error = [{"message": job.error.message, "code": RPC_INVALID[code]}] if job.error and code in RPC_INVALID else []
    created = job.create_time or datetime.now(UTC)
    return BatchInfo(str(job.name), status, status in ENDED, created, None, display_metadata(job.display_name), error)


def _model_of(lines: Iterable[bytes]) -> str:
    for line in lines:
        return str(orjson.loads(line)["request"]["model"])
    raise Invalid("a batch needs at least one request", error_type="empty_batch")


def _rpc_error(key: str, error: Any) -> Parsed:
    status = str(error.get("status") or "") if isinstance(error, dict) else ""
    message = str(error.get("message") or "")[:300] if isinstance(error, dict) else "unreadable error"
    if status in LINE_OUTCOMES:
        return (key, LINE_OUTCOMES[status], "", 0, 0, 0, 0, status.lower(), message)
    code = RPC_HTTP.get(status, 500 if not status else 400)
    cls = classify(code, status, message)
    outcome = {Fatal: Outcome.FATAL, Transient: Outcome.TRANSIENT}.get(cls, Outcome.INVALID)
    return (key, outcome, "", 0, 0, 0, 0, status or "unknown", message)


def response_parsed(key: str, response: dict[str, Any]) -> Parsed:
    """A GenerateContentResponse (API JSON) as a result; ValueError or KeyError when it is unreadable."""
    usage = response.get("usageMetadata") or {}
    prompt = int(usage.get("promptTokenCount") or 0)
    cached = int(usage.get("cachedContentTokenCount") or 0)
    output = int(usage.get("candidatesTokenCount") or 0) + int(usage.get("thoughtsTokenCount") or 0)
    u = counted(prompt - cached, output, cached, 0)
    blocked = (response.get("promptFeedback") or {}).get("blockReason")
    candidates = response.get("candidates") or []
    candidate = candidates[0] if candidates else {}
    finish = str(candidate.get("finishReason") or "")
    if blocked or finish in REFUSALS or not candidates:
        why = str(blocked or finish or "no candidate")
        return (key, Outcome.REFUSED, "", u.input_tokens, u.output_tokens, u.cache_read_tokens, 0, "safety", why)
    parts = (candidate.get("content") or {}).get("parts") or []
    text = "".join(str(p.get("text") or "") for p in parts if not p.get("thought"))
    return (key, Outcome.SUCCEEDED, text, u.input_tokens, u.output_tokens, u.cache_read_tokens, 0, "", "")


def parse_line(line: dict[str, Any]) -> Parsed:
    """One line of a responses file: `{"key", "response"}` or `{"key", "error"}`."""
    key = line["key"]
    if not isinstance(key, str):
        raise ValueError("a line without its key")
    if line.get("error") is not None:
        return _rpc_error(key, line["error"])
    return response_parsed(key, line["response"])


async def _chunks(file: IO[bytes]) -> AsyncIterator[bytes]:
    file.seek(0)
    while chunk := file.read(1 << 20):
        yield chunk


class GeminiProvider:
    """BatchProvider over `genai.Client` (injected: base URL, key, HTTP client and retries are the caller's)."""

    name = "gemini"
    max_requests = 100_000  # [I] no documented line count; Barge's cap keeps a file far below the 2 GB limit
    max_bytes = 2 * 1024 * 1024 * 1024 - 1  # the Files API's 2 GB per file
    keeps_metadata = True  # in the display name, which every listed batch carries

    def __init__(
        self, client: genai.Client, http_client: httpx2.AsyncClient | None = None, *, bare_model: bool = False
    ) -> None:
        """`bare_model`: synchronous calls name the model as the job does (Vertex), not as `models/<name>`."""
        self.bare_model = bare_model
        self.client = client
        self.aio = client.aio
        self._http = http_client

    def encode(self, request: Request) -> bytes:
        return encode_gemini(request)

    async def create_batch(
        self, lines: Iterable[bytes], metadata: dict[str, str], *, output_expires_after: int = 0
    ) -> BatchInfo:
        """`output_expires_after` is OpenAI's: Gemini's files last 48 h, and retention deletes them sooner."""
        first, lines = itertools.tee(lines) if iter(lines) is lines else (lines, lines)
        model = _model_of(first)
        with tempfile.TemporaryFile() as spool:  # the SDK uploads a seekable file (its size goes first)
            for line in lines:
                spool.write(line)
                spool.write(b"\n")
            spool.seek(0)
            try:
                uploaded = await self.aio.files.upload(
                    file=spool, config=types.UploadFileConfig(mime_type="application/jsonl", display_name="barge")
                )
            except (errors.APIError, httpx2.HTTPError, ValueError, KeyError) as exc:
                raise from_gemini(exc) from exc
        name = str(uploaded.name)
        config = types.CreateBatchJobConfig(display_name=_display_name(metadata, name), http_options=_ONCE)
        try:
            job = await self.aio.batches.create(model=model, src=name, config=config)
        except (errors.APIError, httpx2.HTTPError) as exc:
            error = from_gemini(exc)
            if isinstance(error, Invalid | Fatal):  # refused for sure: no batch will read the file
                await self._delete_file(name)
            raise error from exc
        return _info(job)

    async def _job(self, batch_id: str) -> types.BatchJob:
        try:
            return await self.aio.batches.get(name=batch_id)
        except (errors.APIError, httpx2.HTTPError) as exc:
            raise from_gemini(exc) from exc

    async def retrieve(self, batch_id: str) -> BatchInfo:
        return _info(await self._job(batch_id))

    async def list_recent(self, limit: int = 100) -> list[BatchInfo]:
        """Newest first. The API documents no order for batches.list (AIP-132 leaves it to the service), so every
        page is read, up to MAX_LISTED batches, and sorted here: an orphan is found whatever order the API uses."""
        out: list[BatchInfo] = []
        try:
            pager = await self.aio.batches.list(config=types.ListBatchJobsConfig(page_size=100))
            async for job in pager:
                out.append(_info(job))
                if len(out) >= max(limit, MAX_LISTED):
                    break
        except (errors.APIError, httpx2.HTTPError) as exc:
            raise from_gemini(exc) from exc
        out.sort(key=lambda b: b.created_at, reverse=True)
        return out[:limit]

    async def cancel(self, batch_id: str) -> BatchInfo:
        try:
            await self.aio.batches.cancel(name=batch_id)
        except (errors.APIError, httpx2.HTTPError) as exc:
            current = await self.retrieve(batch_id)
            if current.ended:  # cancelling an ended batch is not an error for Barge
                return current
            raise from_gemini(exc) from exc
        return await self.retrieve(batch_id)

    def results(self, batch_id: str) -> AsyncIterator[Result]:
        return flatten(self.parsed_pages(batch_id))

    async def parsed_pages(self, batch_id: str) -> AsyncIterator[list[Parsed]]:
        job = await self._job(batch_id)
        dest = job.dest
        if dest is not None and dest.inlined_responses:  # an inline batch's results (Barge sends files)
            page = []
            for n, inlined in enumerate(dest.inlined_responses):
                key = (inlined.metadata or {}).get("key", str(n))
                if inlined.error is not None:
                    page.append(_rpc_error(key, inlined.error.model_dump(mode="json", exclude_none=True)))
                elif inlined.response is not None:
                    body = inlined.response.model_dump(mode="json", by_alias=True, exclude_none=True)
                    page.append(response_parsed(key, body))
            yield page
        if dest is None or not dest.file_name:
            return  # an expired, cancelled or failed batch without results: the engine retries its requests
        with tempfile.TemporaryFile() as spool:
            try:
                await self.aio.files.download(file=dest.file_name, destination=cast("Any", spool))
            except (errors.APIError, httpx2.HTTPError) as exc:
                raise from_gemini(exc) from exc
            async for lines in jsonl.pages(_chunks(spool)):
                yield jsonl.parsed(lines, parse_line)

    async def _delete_file(self, name: str) -> int:
        """1 if deleted now, 0 if it was already gone (a 404 means exactly that)."""
        try:
            await self.aio.files.delete(name=name)
        except errors.APIError as exc:
            if exc.code == 404:
                return 0
            raise from_gemini(exc) from exc
        except httpx2.HTTPError as exc:
            raise from_gemini(exc) from exc
        return 1

    async def delete_objects(self, batch_id: str) -> int:
        try:
            job = await self.aio.batches.get(name=batch_id)
        except errors.APIError as exc:
            if exc.code == 404:
                return 0
            raise from_gemini(exc) from exc
        except httpx2.HTTPError as exc:
            raise from_gemini(exc) from exc
        files = [display_metadata(job.display_name).get(INPUT_KEY, ""), job.dest.file_name if job.dest else ""]
        deleted = sum([await self._delete_file(str(f)) for f in files if f])
        try:
            await self.aio.batches.delete(name=batch_id)
        except errors.APIError as exc:
            if exc.code != 404:
                raise from_gemini(exc) from exc
            return deleted
        except httpx2.HTTPError as exc:
            raise from_gemini(exc) from exc
        return deleted + 1

    async def complete(self, request: Request) -> Result:
        try:
            body = gemini_request(request)
            config = {**body["generationConfig"]}
            if "systemInstruction" in body:
                config["systemInstruction"] = body["systemInstruction"]
            answer = await self.aio.models.generate_content(
                model=request.model if self.bare_model else body["model"],
                contents=body["contents"],
                config=types.GenerateContentConfig(**config),
            )
        except (errors.APIError, httpx2.HTTPError) as exc:
            error = from_gemini(exc)
            if isinstance(error, Fatal):
                raise error from exc
            outcome = Outcome.TRANSIENT if isinstance(error, Transient) else Outcome.INVALID
            return Result(
                request.custom_id,
                outcome,
                error_type=error.error_type,
                message=error.message,
                retry_after=error.retry_after,
            )
        except (TypeError, ValueError, pydantic.ValidationError) as exc:  # a parameter the SDK does not know
            return Result(request.custom_id, Outcome.INVALID, error_type="invalid_request", message=str(exc)[:200])
        try:
            parsed = response_parsed(
                request.custom_id, answer.model_dump(mode="json", by_alias=True, exclude_none=True)
            )
        except (ValueError, KeyError, TypeError, AttributeError) as exc:  # unreadable: retried as a server error
            return Result(request.custom_id, Outcome.TRANSIENT, error_type=UNREADABLE_ANSWER, message=str(exc)[:200])
        return as_result(parsed)

    async def close(self) -> None:
        await self.aio.aclose()
        if self._http is not None:
            await self._http.aclose()


def make_gemini(
    api_key: str, *, base_url: str = "", timeout: float = 600.0, sync_retries: int = 2, guard: Allowed | None = None
) -> GeminiProvider:
    """The adapter with its own httpx2 client: behind the endpoint policy (`guard`), capped, no redirects. Reads and
    synchronous calls retry `sync_retries` times on 408/429/5xx with the SDK's backoff; creates never."""
    transport = CappedTransport(guarded_transport(guard)) if guard is not None else None
    http = httpx2.AsyncClient(transport=transport, follow_redirects=False, timeout=timeout)
    retries = (
        types.HttpRetryOptions(attempts=sync_retries + 1, http_status_codes=RETRIED_STATUSES) if sync_retries else None
    )
    options = types.HttpOptions(
        base_url=base_url or None, timeout=int(timeout * 1000), retry_options=retries, httpx_async_client=http
    )
    return GeminiProvider(genai.Client(api_key=api_key, http_options=options), http)
