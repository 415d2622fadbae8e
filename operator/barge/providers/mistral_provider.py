"""Mistral batch inference through the `mistralai` SDK (`/v1/files` + `/v1/batch/jobs`).

A shard is uploaded as one JSONL file of `{"custom_id", "body"}` lines (encoding.encode_mistral; the job names the
endpoint and the model, which is read from the shard's first line) and run as one batch job carrying Barge's
metadata, which is how an orphan job is recognised after a crash. Results come as an output and an error file,
lines shaped like OpenAI's (`{"custom_id", "response": {"status_code", "body"}, "error"}`). A job that timed out
(`TIMEOUT_EXCEEDED`) or was cancelled lists only what it processed: every other request of its input file is an
expired or canceled result here, read from the input file, never left to look like a missing one.
Retention: the input, output and error files are deleted, then the job itself (SDK 3.7.0 has `jobs.delete`).
Creates never retry (`retries=None`); reads and synchronous calls retry with the SDK's backoff.
"""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator, Iterable
from datetime import UTC, datetime
from typing import IO, Any, cast

import httpx2
import orjson
from mistralai.client import Mistral, errors, models
from mistralai.client.utils import BackoffStrategy, RetryConfig

from barge.providers import jsonl
from barge.providers.base import UNREADABLE_ANSWER, BatchInfo, Outcome, Parsed, Request, Result, counted, flatten
from barge.providers.encoding import encode_mistral, mistral_body
from barge.providers.errors import Invalid, ProviderError, Transient, classify, retry_after, sync_failure
from barge.providers.guard import Allowed, CappedTransport, guarded_transport
from barge.providers.openai_provider import parse_line as openai_parse_line
from barge.providers.upload import LineReader

ENDPOINT: models.APIEndpoint = "/v1/chat/completions"
RUNNING = frozenset({"QUEUED", "RUNNING", "CANCELLATION_REQUESTED"})  # anything else has ended (as the SDK's own)
UNPROCESSED = {"TIMEOUT_EXCEEDED": Outcome.EXPIRED, "CANCELLED": Outcome.CANCELED}
_NO_RETRY: Any = None  # `retries=None`: this one call is not retried, whatever the client's retry_config


def from_mistral(exc: BaseException) -> ProviderError:
    """The SDK's exceptions (an HTTP error with its body as text, or httpx's own) as a domain error."""
    if isinstance(exc, httpx2.TimeoutException):
        return Transient(f"timeout: {exc}", error_type="timeout")
    if isinstance(exc, httpx2.HTTPError | errors.NoResponseError):
        cause = f" ({exc.__cause__})" if exc.__cause__ else ""  # e.g. the endpoint policy's refusal
        return Transient(f"connection failed: {exc}{cause}", error_type="connection_error")
    if not isinstance(exc, errors.MistralError):
        return Transient(f"unexpected error: {exc!r}", error_type="unknown")
    kind, message = "", ""
    try:
        body = orjson.loads(exc.body)
    except orjson.JSONDecodeError:
        body = None
    if isinstance(body, dict):
        kind = str(body.get("type") or body.get("code") or "")
        message = str(body.get("message") or body.get("detail") or "")
    kind = kind or f"http_{exc.status_code}"
    message = message or exc.body[:200] or str(exc)
    cls = classify(exc.status_code, kind, message)
    return cls(f"{kind}: {message}", error_type=kind, retry_after=retry_after(exc.headers))


def parse_line(line: dict[str, Any]) -> Parsed:
    """One line of a result or error file. Mistral's error bodies are `{"message", "type", "code"}` at the top
    level; they are read as OpenAI's `{"error": {...}}` are."""
    response = line.get("response")
    if type(response) is dict and response.get("status_code") != 200:
        body = response.get("body")
        if type(body) is dict and "error" not in body:
            line = {**line, "response": {**response, "body": {"error": body}}}
    return openai_parse_line(line)


def _info(job: models.BatchJob) -> BatchInfo:
    metadata = job.metadata if isinstance(job.metadata, dict) else {}
    return BatchInfo(
        job.id,
        str(job.status),
        str(job.status) not in RUNNING,
        datetime.fromtimestamp(job.created_at, UTC),
        job.total_requests,
        {str(k): str(v) for k, v in metadata.items()},
        [{"message": e.message, "count": e.count} for e in job.errors],
    )


def _file(value: object) -> str:
    return str(value) if isinstance(value, str) and value else ""


def _model_of(lines: Iterable[bytes]) -> str:
    """The model a shard's requests name (every request of a job has the same)."""
    for line in lines:
        return str(orjson.loads(line)["body"]["model"])
    raise Invalid("a batch needs at least one request", error_type="empty_batch")


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # content chunks: the text ones
        return "".join(str(getattr(c, "text", "") or "") for c in content)
    return ""


class MistralProvider:
    """BatchProvider over `mistralai.Mistral` (injected: server URL, key, HTTP client and retries are the caller's)."""

    name = "mistral"
    max_requests = 1_000_000  # "large batches of up to 1M requests"
    max_bytes = 512 * 1024 * 1024 - 1  # the Files API's 512 MB
    keeps_metadata = True

    def __init__(self, client: Mistral, http_client: httpx2.AsyncClient | None = None) -> None:
        self.client = client
        self._http = http_client

    def encode(self, request: Request) -> bytes:
        return encode_mistral(request)

    async def create_batch(
        self, lines: Iterable[bytes], metadata: dict[str, str], *, output_expires_after: int = 0
    ) -> BatchInfo:
        """`output_expires_after` is OpenAI's: Mistral's files stay until deleted (retention deletes them)."""
        first, lines = itertools.tee(lines) if iter(lines) is lines else (lines, lines)
        model = _model_of(first)
        reader = LineReader(lines)
        try:
            uploaded = await self.client.files.upload_async(
                file=models.File(file_name="batch.jsonl", content=cast("IO[bytes]", reader)),
                purpose="batch",
                retries=_NO_RETRY,
            )
        except (errors.MistralError, httpx2.HTTPError, errors.NoResponseError) as exc:
            raise from_mistral(exc) from exc
        try:
            job = await self.client.batch.jobs.create_async(
                input_files=[uploaded.id],
                endpoint=ENDPOINT,
                model=model,
                metadata=metadata or None,
                timeout_hours=24,
                retries=_NO_RETRY,
            )
        except (errors.MistralError, httpx2.HTTPError, errors.NoResponseError) as exc:
            error = from_mistral(exc)
            if isinstance(error, Invalid):  # refused for sure: no job will read the file, so it goes now
                await self._delete_file(uploaded.id)
            raise error from exc
        return _info(job)

    async def _job(self, batch_id: str) -> models.BatchJob:
        try:
            return await self.client.batch.jobs.get_async(job_id=batch_id)
        except (errors.MistralError, httpx2.HTTPError, errors.NoResponseError) as exc:
            raise from_mistral(exc) from exc

    async def retrieve(self, batch_id: str) -> BatchInfo:
        return _info(await self._job(batch_id))

    async def list_recent(self, limit: int = 100) -> list[BatchInfo]:
        out: list[BatchInfo] = []
        page = 0
        try:
            while len(out) < limit:
                listed = await self.client.batch.jobs.list_async(page=page, page_size=min(limit, 100))
                data = listed.data or []
                out += [_info(j) for j in data]
                if len(data) < min(limit, 100):
                    break
                page += 1
        except (errors.MistralError, httpx2.HTTPError, errors.NoResponseError) as exc:
            raise from_mistral(exc) from exc
        return out[:limit]

    async def cancel(self, batch_id: str) -> BatchInfo:
        try:
            return _info(await self.client.batch.jobs.cancel_async(job_id=batch_id))
        except (errors.MistralError, httpx2.HTTPError, errors.NoResponseError) as exc:
            current = await self.retrieve(batch_id)
            if current.ended:  # cancelling an ended job is not an error for Barge
                return current
            raise from_mistral(exc) from exc

    def results(self, batch_id: str) -> AsyncIterator[Result]:
        return flatten(self.parsed_pages(batch_id))

    async def _lines(self, file_id: str) -> AsyncIterator[list[bytes]]:
        try:
            response = await self.client.files.download_async(file_id=file_id)
        except (errors.MistralError, httpx2.HTTPError, errors.NoResponseError) as exc:
            raise from_mistral(exc) from exc
        try:
            async for page in jsonl.pages(response.aiter_bytes()):
                yield page
        finally:
            await response.aclose()

    async def parsed_pages(self, batch_id: str) -> AsyncIterator[list[Parsed]]:
        job = await self._job(batch_id)
        unprocessed = UNPROCESSED.get(str(job.status))
        seen: set[str] = set()
        if isinstance(job.outputs, list) and job.outputs:  # an inline job's results
            page = jsonl.parsed([orjson.dumps(o) for o in job.outputs], parse_line)
            seen.update(p[0] for p in page)
            yield page
        for file_id in (_file(job.output_file), _file(job.error_file)):
            if not file_id:
                continue
            async for lines in self._lines(file_id):
                page = jsonl.parsed(lines, parse_line)
                if unprocessed is not None:
                    seen.update(p[0] for p in page)
                yield page
        if unprocessed is None:
            return
        word = "timeout_exceeded" if unprocessed is Outcome.EXPIRED else "cancelled"
        for file_id in job.input_files:  # what the job never processed: expired or canceled, by custom_id
            async for lines in self._lines(str(file_id)):
                ids = [str(orjson.loads(x).get("custom_id") or "") for x in lines]
                yield [
                    (cid, unprocessed, "", 0, 0, 0, 0, word, f"job {job.status}")
                    for cid in ids
                    if cid and cid not in seen
                ]

    async def _delete_file(self, file_id: str) -> int:
        """1 if deleted now, 0 if it was already gone (a 404 means exactly that)."""
        try:
            await self.client.files.delete_async(file_id=file_id)
        except errors.MistralError as exc:
            if exc.status_code == 404:
                return 0
            raise from_mistral(exc) from exc
        except (httpx2.HTTPError, errors.NoResponseError) as exc:
            raise from_mistral(exc) from exc
        return 1

    async def delete_objects(self, batch_id: str) -> int:
        try:
            job = await self.client.batch.jobs.get_async(job_id=batch_id)
        except errors.MistralError as exc:
            if exc.status_code == 404:
                return 0
            raise from_mistral(exc) from exc
        except (httpx2.HTTPError, errors.NoResponseError) as exc:
            raise from_mistral(exc) from exc
        files = [str(f) for f in job.input_files] + [_file(job.output_file), _file(job.error_file)]
        deleted = sum([await self._delete_file(f) for f in files if f])
        try:
            await self.client.batch.jobs.delete_async(job_id=batch_id)
        except errors.MistralError as exc:
            if exc.status_code != 404:
                raise from_mistral(exc) from exc
            return deleted
        except (httpx2.HTTPError, errors.NoResponseError) as exc:
            raise from_mistral(exc) from exc
        return deleted + 1

    async def complete(self, request: Request) -> Result:
        body = mistral_body(request)
        try:
            answer = await self.client.chat.complete_async(**body)
        except (errors.MistralError, httpx2.HTTPError, errors.NoResponseError) as exc:
            return sync_failure(request.custom_id, from_mistral(exc), exc)
        except (TypeError, ValueError) as exc:  # a parameter the SDK does not know, or of the wrong shape
            return Result(request.custom_id, Outcome.INVALID, error_type="invalid_request", message=str(exc)[:200])
        choice = answer.choices[0] if answer.choices else None
        text = _text(choice.message.content) if choice is not None and choice.message is not None else ""
        try:
            usage = counted(answer.usage.prompt_tokens or 0, answer.usage.completion_tokens or 0, 0, 0)
        except ValueError as exc:  # not a token count: the answer is unreadable, retried as a server error is
            return Result(request.custom_id, Outcome.TRANSIENT, error_type=UNREADABLE_ANSWER, message=str(exc))
        return Result(request.custom_id, Outcome.SUCCEEDED, text, usage)

    async def close(self) -> None:
        if self._http is not None:
            await self._http.aclose()


def make_mistral(
    api_key: str, *, base_url: str = "", timeout: float = 600.0, sync_retries: int = 2, guard: Allowed | None = None
) -> MistralProvider:
    """The adapter with its own HTTP client: behind the endpoint policy (`guard`), capped, no redirects."""
    transport = CappedTransport(guarded_transport(guard)) if guard is not None else None
    http = httpx2.AsyncClient(transport=transport, follow_redirects=False, timeout=timeout)
    retries: Any = (
        RetryConfig("backoff", BackoffStrategy(500, 8000, 1.5, int(timeout * 1000)), True) if sync_retries else None
    )
    client = Mistral(
        api_key=api_key,
        server_url=base_url or None,
        async_client=http,
        retry_config=retries,
        timeout_ms=int(timeout * 1000),
    )
    return MistralProvider(client, http)
