"""OpenAI Batch and Azure OpenAI Global Batch through the `openai` SDK (AsyncOpenAI / AsyncAzureOpenAI).

The input file streams from the encoded lines straight into the upload (upload.LineReader: no spool file, no
copy in memory), results are streamed from the output and error files: memory stays flat whatever the job's
size. Batches carry Barge's metadata, which
is how orphan batches are recognised after a crash.

`compatible` (type openai-compatible: Groq, Together, a vLLM batch API, a company proxy at `baseURL`): the same
calls, with what such services do differently handled here. Statuses are read case-blind (Together answers
`COMPLETED`, `IN_PROGRESS`); `output_expires_after` is OpenAI's own and is not sent; the completion window is
`24h`, the one value every one of them accepts (Groq takes 24h to 7d, Together only 24h); listed batches are not
trusted to echo metadata (`keeps_metadata` False: adoption also goes by window, size and result ids), nor to
carry request counts; a shard is at most 50,000 requests and 100 MB (Groq's and Together's input limits).
"""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator, Iterable
from dataclasses import replace
from datetime import UTC, datetime
from typing import IO, Any, cast

import httpx2
import openai
from openai.types import Batch

from barge.providers import jsonl
from barge.providers.base import (
    MAX_USAGE,
    NO_USAGE,
    BatchInfo,
    Outcome,
    Parsed,
    Request,
    Result,
    Usage,
    aiohttp_copy,
    as_parsed,
    counted,
    flatten,
    read_answer,
)
from barge.providers.content import MARK, ORDINARY_STOPS, embedding_output, openai_output
from barge.providers.encoding import (
    AZURE_EMBEDDINGS_URL,
    AZURE_URL,
    OPENAI_EMBEDDINGS_URL,
    OPENAI_URL,
    RESPONSES_URL,
    openai_encoder,
)
from barge.providers.encoding import openai_body as body
from barge.providers.errors import Fatal, Invalid, Transient, classify, from_sdk, sync_failure
from barge.providers.responses import response_result
from barge.providers.upload import LineReader

ENDED = frozenset({"completed", "failed", "expired", "cancelled"})
_OUTCOME = {Fatal: Outcome.FATAL, Transient: Outcome.TRANSIENT, Invalid: Outcome.INVALID}
_SUCCEEDED, _REFUSED = Outcome.SUCCEEDED, Outcome.REFUSED
#: A text answer that stopped so is read on the fast path (a filtered one says so in its outcome).
ORDINARY_STOPS_OR_FILTER = (*ORDINARY_STOPS, "content_filter")


def _usage(raw: dict[str, Any] | None) -> Usage:
    if not raw:
        return NO_USAGE
    details = raw.get("prompt_tokens_details")
    cached = int(details.get("cached_tokens") or 0) if details else 0
    return counted(int(raw.get("prompt_tokens") or 0) - cached, int(raw.get("completion_tokens") or 0), cached, 0)


def _embedding_result(custom_id: str, answer: dict[str, Any]) -> Result:
    """An embeddings answer: its one vector (a list of numbers, or base64 float32 text) kept as `embedding`."""
    data = answer.get("data")
    first = data[0] if isinstance(data, list) and data and isinstance(data[0], dict) else {}
    vector = first.get("embedding")
    if isinstance(vector, list) and vector and all(type(v) in (float, int) for v in vector):
        return Result(custom_id, Outcome.SUCCEEDED, embedding_output(vector), _usage(answer.get("usage")))
    if isinstance(vector, str) and vector:  # encodingFormat base64
        return Result(custom_id, Outcome.SUCCEEDED, embedding_output(vector), _usage(answer.get("usage")))
    return Result(custom_id, Outcome.TRANSIENT, error_type="no_embedding", message="the answer holds no vector")


def _completion_result(custom_id: str, completion: dict[str, Any]) -> Result:
    # Positional arguments: this runs once per result of a batch (ingestion's hot path).
    if "choices" not in completion and completion.get("object") == "list":  # an embeddings answer
        return _embedding_result(custom_id, completion)
    if "choices" not in completion and completion.get("object") == "response":  # a Responses API answer
        return response_result(custom_id, completion)
    choice = (completion.get("choices") or [{}])[0]
    message = choice.get("message") or {}
    refusal = message.get("refusal")
    usage = _usage(completion.get("usage"))
    if choice.get("finish_reason") == "content_filter" or refusal:
        return Result(custom_id, Outcome.REFUSED, str(message.get("content") or refusal or ""), usage, "content_filter")
    # tool calls and an unusual finish reason (length, tool_calls ...) are kept beside the text (content.py)
    text = openai_output(message if isinstance(message, dict) else {}, choice.get("finish_reason"))
    return Result(custom_id, Outcome.SUCCEEDED, text, usage)


def _sync_result(custom_id: str, completion: dict[str, Any]) -> Result:
    """A synchronous answer, with the tier it reports it was served at (priced by it: batch/fallback.py)."""
    result = _completion_result(custom_id, completion)
    tier = completion.get("service_tier")
    return replace(result, service_tier=tier) if isinstance(tier, str) and tier else result


def result_from_line(line: dict[str, Any]) -> Result:
    """One line of an output or error file -> a domain Result."""
    custom_id = str(line.get("custom_id", ""))
    error = line.get("error")
    if error:
        code, message = str(error.get("code") or ""), str(error.get("message") or "")
        if code == "batch_expired":
            return Result(custom_id, Outcome.EXPIRED, error_type=code, message=message)
        if code == "batch_cancelled":
            return Result(custom_id, Outcome.CANCELED, error_type=code, message=message)
        return Result(custom_id, _OUTCOME[classify(None, code, message)], error_type=code, message=message)
    response = line.get("response") or {}
    status = int(response.get("status_code") or 0)
    payload = response.get("body") or {}
    if status == 200:
        return _completion_result(custom_id, payload)
    inner = payload.get("error") or {}
    kind = str(inner.get("code") or inner.get("type") or f"http_{status}")
    message = str(inner.get("message") or "")
    return Result(custom_id, _OUTCOME[classify(status, kind, message)], error_type=kind, message=message)


def parse_line(line: dict[str, Any]) -> Parsed:
    """`result_from_line` as a `Parsed` tuple. The usual line, a 200 with one choice whose message has text, no
    refusal and no tool call, that stopped normally, with integer usage, is read here without a Result; any other
    shape goes through `result_from_line`."""
    response, custom_id = line.get("response"), line.get("custom_id")
    if type(response) is dict and type(custom_id) is str and not line.get("error"):
        status, body = response.get("status_code"), response.get("body")
        if type(status) is int and status == 200 and type(body) is dict:
            choices, usage = body.get("choices"), body.get("usage")
            choice: Any = choices[0] if type(choices) is list and choices else None
            message = choice.get("message") if type(choice) is dict else None
            if type(message) is dict and type(usage) is dict and message.get("refusal") is None:
                text, details = message.get("content"), usage.get("prompt_tokens_details") or {}
                prompt, completion = usage.get("prompt_tokens") or 0, usage.get("completion_tokens") or 0
                cached = (details.get("cached_tokens") or 0) if type(details) is dict else None
                if (
                    type(text) is str
                    and text
                    and not text.startswith(MARK)
                    and not message.get("tool_calls")
                    and choice.get("finish_reason") in ORDINARY_STOPS_OR_FILTER
                    and type(prompt) is int
                    and type(completion) is int
                    and type(cached) is int
                    and 0 <= cached <= prompt <= MAX_USAGE
                    and 0 <= completion <= MAX_USAGE
                ):
                    if choice.get("finish_reason") == "content_filter":
                        return (custom_id, _REFUSED, text, prompt - cached, completion, cached, 0, "content_filter", "")
                    return (custom_id, _SUCCEEDED, text, prompt - cached, completion, cached, 0, "", "")
    return as_parsed(result_from_line(line))


def _info(batch: Batch) -> BatchInfo:
    errors = [e.model_dump() for e in (batch.errors.data or [])] if batch.errors else []
    total = batch.request_counts.total if batch.request_counts else None
    status = str(batch.status).lower()  # Together spells them upper-case
    return BatchInfo(
        batch.id,
        status,
        status in ENDED,
        datetime.fromtimestamp(batch.created_at, UTC),
        total,
        dict(batch.metadata or {}),
        errors,
    )


class OpenAIProvider:
    """BatchProvider over `openai.AsyncOpenAI` or `openai.AsyncAzureOpenAI` (injected)."""

    def __init__(
        self, client: openai.AsyncOpenAI, *, azure: bool = False, compatible: bool = False, aiohttp_sync: bool = False
    ) -> None:
        """`aiohttp_sync`: synchronous calls go through a copy of the client on the SDK's aiohttp transport;
        `compatible`: another service's OpenAI-compatible batch API (the module's docstring)."""
        self.client = client
        self._aiohttp_sync = aiohttp_sync
        self._sync: openai.AsyncOpenAI | None = None
        self.azure = azure
        self.compatible = compatible
        self.name = "azure-openai" if azure else "openai-compatible" if compatible else "openai"
        self.keeps_metadata = not compatible
        self.flex_tier = not azure and not compatible
        """OpenAI's `service_tier: flex` (batch rates, slower, 429 when busy): spec.fallback.serviceTier asks it."""
        self.max_requests = 100_000 if azure else 50_000
        self.max_bytes = 100 * 1024 * 1024 if compatible else 200 * 1024 * 1024
        self.url = AZURE_URL if azure else OPENAI_URL
        self._encode = openai_encoder(self.url)
        self._create_client = client.with_options(max_retries=0)

    def encode(self, request: Request) -> bytes:
        return self._encode(request)

    async def create_batch(
        self, lines: Iterable[bytes], metadata: dict[str, str], *, output_expires_after: int = 0
    ) -> BatchInfo:
        keep = output_expires_after and not self.compatible  # OpenAI's and Azure's parameter only
        expiry: Any = {"anchor": "created_at", "seconds": output_expires_after} if keep else openai.omit
        lines, endpoint = self._endpoint_of(lines)
        reader = LineReader(lines)
        # The SDK's retries re-read the file: only a source that can be iterated again may be retried.
        client = self.client if reader.restartable else self._create_client
        try:
            uploaded = await client.files.create(file=("batch.jsonl", cast("IO[bytes]", reader)), purpose="batch")
        except openai.APIError as exc:
            raise from_sdk(exc, openai) from exc
        try:
            batch = await self._create_client.batches.create(
                input_file_id=uploaded.id,
                endpoint=endpoint,  # type: ignore[arg-type]
                completion_window="24h",
                metadata=metadata or None,
                output_expires_after=expiry,
            )
        except openai.APIError as exc:
            error = from_sdk(exc, openai)
            if isinstance(error, Invalid):  # refused for sure: no batch will read the file, so it goes now
                await self._delete_file(uploaded.id)
            raise error from exc
        return _info(batch)

    def _endpoint_of(self, lines: Iterable[bytes]) -> tuple[Iterable[bytes], str]:
        """The batch's endpoint: its lines' URL (they all share it, spec.request.endpoint being the job's), read
        from the first line; a one-shot iterator gets that line back in front."""
        it = iter(lines)
        first = next(it, None)
        if it is lines:
            lines = itertools.chain(() if first is None else (first,), it)
        elif hasattr(it, "close"):
            it.close()  # a fresh iterator of a Replay: its ledger read ends here
        embeddings = AZURE_EMBEDDINGS_URL if self.azure else OPENAI_EMBEDDINGS_URL
        for url in (embeddings, RESPONSES_URL):
            if first is not None and b'"url":"' + url.encode() + b'"' in first:
                return lines, url
        return lines, self.url

    async def _delete_file(self, file_id: str) -> int:
        """1 if deleted now, 0 if it was already gone (a 404 means exactly that)."""
        try:
            await self.client.files.delete(file_id)
        except openai.NotFoundError:
            return 0
        except openai.APIError as exc:
            raise from_sdk(exc, openai) from exc
        return 1

    async def delete_objects(self, batch_id: str) -> int:
        try:
            batch = await self.client.batches.retrieve(batch_id)
        except openai.NotFoundError:
            return 0
        except openai.APIError as exc:
            raise from_sdk(exc, openai) from exc
        files = (batch.input_file_id, batch.output_file_id, batch.error_file_id)
        return sum([await self._delete_file(f) for f in files if f])  # None or Azure's "": no file

    async def retrieve(self, batch_id: str) -> BatchInfo:
        try:
            return _info(await self.client.batches.retrieve(batch_id))
        except openai.APIError as exc:
            raise from_sdk(exc, openai) from exc

    async def list_recent(self, limit: int = 100) -> list[BatchInfo]:
        out: list[BatchInfo] = []
        try:
            async for batch in self.client.batches.list(limit=min(limit, 100)):
                out.append(_info(batch))
                if len(out) >= limit:
                    break
        except openai.APIError as exc:
            raise from_sdk(exc, openai) from exc
        return out

    async def cancel(self, batch_id: str) -> BatchInfo:
        try:
            return _info(await self.client.batches.cancel(batch_id))
        except openai.APIError as exc:
            current = await self.retrieve(batch_id)
            if current.ended:  # cancelling an ended batch is not an error for Barge
                return current
            raise from_sdk(exc, openai) from exc

    def results(self, batch_id: str) -> AsyncIterator[Result]:
        return flatten(self.parsed_pages(batch_id))

    async def parsed_pages(self, batch_id: str) -> AsyncIterator[list[Parsed]]:
        # The SDK's raw streamed response, parsed here with orjson: no SDK model is built per line.
        try:
            batch = await self.client.batches.retrieve(batch_id)
            for file_id in (batch.output_file_id, batch.error_file_id):
                if not file_id:  # None, or Azure's ""
                    continue
                async with self.client.files.with_streaming_response.content(file_id) as response:
                    async for page in jsonl.pages(response.iter_bytes()):
                        yield jsonl.parsed(page, parse_line)
        except openai.APIError as exc:
            raise from_sdk(exc, openai) from exc

    @property
    def _sync_client(self) -> openai.AsyncOpenAI:
        """The client of synchronous calls, made at the first one (most jobs never make any)."""
        if self._sync is None:
            self._sync = aiohttp_copy(self.client, openai) if self._aiohttp_sync else self.client
        return self._sync

    async def complete(self, request: Request) -> Result:
        # The SDK's documented low-level call: its auth, retries, Azure deployment routing and error types, but no
        # params transform and no response model (two thirds of the CPU the SDK spent per call, bench_sync.py).
        try:
            if request.endpoint == "responses":  # the Responses API, its raw answer read as a batch line's body
                raw = await self._sync_client.responses.with_raw_response.create(**body(request))
                return read_answer(request.custom_id, raw.content, _sync_result)
            path = "/embeddings" if request.endpoint == "embeddings" else "/chat/completions"
            response = await self._sync_client.post(path, body=body(request), cast_to=httpx2.Response)
        except openai.APIError as exc:
            return sync_failure(request.custom_id, from_sdk(exc, openai), exc)
        return read_answer(request.custom_id, response.content, _sync_result)

    async def close(self) -> None:
        if self._sync is not None and self._sync is not self.client:
            await self._sync.close()
        await self.client.close()
