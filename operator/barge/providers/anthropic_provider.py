"""Anthropic Message Batches and Messages through the `anthropic` SDK.

The create body is streamed from already-encoded request bytes through the SDK's client (retries off), so
memory stays flat instead of holding the several copies of a shard that a list of dicts costs.
Anthropic batches carry no metadata: orphan adoption matches them by time window, size and result ids.
"""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator, Iterable
from datetime import datetime
from typing import Any

import anthropic
import httpx2
from anthropic.types.messages import MessageBatch

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
from barge.providers.content import MARK, ORDINARY_STOPS, anthropic_output
from barge.providers.encoding import anthropic_params as params
from barge.providers.encoding import encode_anthropic
from barge.providers.errors import Fatal, Invalid, Transient, classify, from_sdk, sync_failure

_SUCCEEDED, _REFUSED = Outcome.SUCCEEDED, Outcome.REFUSED
#: A one-text-block answer that stopped so is read on the fast path (a refusal says so in its outcome).
ORDINARY_STOPS_OR_REFUSAL = (*ORDINARY_STOPS, "refusal")


def _usage(raw: dict[str, Any] | None) -> Usage:
    if not raw:
        return NO_USAGE
    return counted(
        int(raw.get("input_tokens") or 0),
        int(raw.get("output_tokens") or 0),
        int(raw.get("cache_read_input_tokens") or 0),
        int(raw.get("cache_creation_input_tokens") or 0),
    )


def _message_result(custom_id: str, message: dict[str, Any]) -> Result:
    # Positional arguments: this runs once per result of a batch (ingestion's hot path). Every block is kept
    # (content.anthropic_output): a tool_use block's input is the answer of a tool-forcing request.
    content = message.get("content")
    stop = message.get("stop_reason")  # a refusal says so in its outcome, its text is kept as it is
    text = anthropic_output(content if isinstance(content, list) else [], None if stop == "refusal" else stop)
    usage = _usage(message.get("usage"))
    if message.get("stop_reason") == "refusal":
        return Result(custom_id, Outcome.REFUSED, text, usage, "refusal")
    return Result(custom_id, Outcome.SUCCEEDED, text, usage)


def result_from_line(line: dict[str, Any]) -> Result:
    """One line of a results file -> a domain Result."""
    custom_id = str(line.get("custom_id", ""))
    result = line.get("result") or {}
    kind = result.get("type")
    if kind == "succeeded":
        return _message_result(custom_id, result.get("message") or {})
    if kind == "canceled":
        return Result(custom_id, Outcome.CANCELED, error_type="canceled")
    if kind == "expired":
        return Result(custom_id, Outcome.EXPIRED, error_type="expired")
    inner = ((result.get("error") or {}).get("error")) or {}
    error_type, message = str(inner.get("type", "unknown")), str(inner.get("message", ""))
    outcome = {Fatal: Outcome.FATAL, Transient: Outcome.TRANSIENT, Invalid: Outcome.INVALID}[
        classify(None, error_type, message)
    ]
    return Result(custom_id, outcome, error_type=error_type, message=message)


def parse_line(line: dict[str, Any]) -> Parsed:
    """`result_from_line` as a `Parsed` tuple. The usual line, a succeeded message with one text block that ended
    normally (content.ORDINARY_STOPS) and integer usage, is read here without a Result; any other shape goes
    through `result_from_line` (same answer)."""
    result = line.get("result")
    if type(result) is dict and result.get("type") == "succeeded":
        message, custom_id = result.get("message"), line.get("custom_id")
        if type(message) is dict and type(custom_id) is str:
            content, usage = message.get("content"), message.get("usage")
            if type(content) is list and len(content) == 1 and type(usage) is dict:
                block = content[0]
                text = block.get("text") if type(block) is dict and block.get("type") == "text" else None
                tin, tout = usage.get("input_tokens") or 0, usage.get("output_tokens") or 0
                tcr, tcw = usage.get("cache_read_input_tokens") or 0, usage.get("cache_creation_input_tokens") or 0
                if (
                    type(text) is str
                    and message.get("stop_reason") in ORDINARY_STOPS_OR_REFUSAL
                    and not text.startswith(MARK)
                    and type(tin) is int
                    and type(tout) is int
                    and type(tcr) is int
                    and type(tcw) is int
                    and 0 <= tin <= MAX_USAGE
                    and 0 <= tout <= MAX_USAGE
                    and 0 <= tcr <= MAX_USAGE
                    and 0 <= tcw <= MAX_USAGE
                ):
                    if message.get("stop_reason") == "refusal":
                        return (custom_id, _REFUSED, text, tin, tout, tcr, tcw, "refusal", "")
                    return (custom_id, _SUCCEEDED, text, tin, tout, tcr, tcw, "", "")
    return as_parsed(result_from_line(line))


def _info(batch: MessageBatch) -> BatchInfo:
    counts = batch.request_counts
    total = counts.processing + counts.succeeded + counts.errored + counts.canceled + counts.expired
    created = (
        batch.created_at if isinstance(batch.created_at, datetime) else datetime.fromisoformat(str(batch.created_at))
    )
    return BatchInfo(batch.id, batch.processing_status, batch.processing_status == "ended", created, total)


#: The beta flag of structured outputs (anthropic SDK 2.14's AnthropicBetaParam), sent on the batch create call
#: whose requests carry output_config.format, and on such synchronous calls; never inside a request.
STRUCTURED_OUTPUTS_BETA = "structured-outputs-2025-11-13"
RESULTS_URLS = 4096  # results URLs remembered (one per ended batch until its results are read)


class AnthropicProvider:
    """BatchProvider over `anthropic.AsyncAnthropic` (injected: base_url, key and http client are the caller's)."""

    name = "anthropic"
    max_requests = 100_000
    keeps_metadata = False  # Message Batches carry no metadata
    max_bytes = 256 * 1024 * 1024 - 1024  # room for the {"requests":[...]} wrapper

    def __init__(self, client: anthropic.AsyncAnthropic, *, aiohttp_sync: bool = False) -> None:
        """`aiohttp_sync`: synchronous calls go through a copy of the client on the SDK's aiohttp transport."""
        self.client = client
        self._aiohttp_sync = aiohttp_sync
        self._sync: anthropic.AsyncAnthropic | None = None
        self._create_client = client.with_options(max_retries=0)
        self._results_urls: dict[str, str] = {}
        """Batch id -> the results_url its last retrieve answered: reading the results then costs one GET, not the
        two of the SDK's `results()` (which retrieves the batch again for that URL). Bounded, oldest out."""

    def encode(self, request: Request) -> bytes:
        return encode_anthropic(request)

    async def create_batch(
        self, lines: Iterable[bytes], metadata: dict[str, str], *, output_expires_after: int = 0
    ) -> BatchInfo:
        # output_expires_after: Anthropic has no such setting (results are kept 29 days); delete_objects is the cure
        source = iter(lines)
        first = next(source, None)
        headers = {"Content-Type": "application/json"}
        if first is not None and b'"output_config"' in first:  # one job's shard: its first request tells
            headers["anthropic-beta"] = STRUCTURED_OUTPUTS_BETA

        async def body() -> AsyncIterator[bytes]:
            # Streamed (chunked) straight from the ledger: memory stays flat whatever the shard's size.
            yield b'{"requests":['
            chunk = bytearray()
            for n, line in enumerate(itertools.chain(() if first is None else (first,), source)):
                if n:
                    chunk += b","
                chunk += line
                if len(chunk) >= 1 << 20:
                    yield bytes(chunk)
                    chunk.clear()
            yield bytes(chunk) + b"]}"

        try:
            batch = await self._create_client.post(
                "/v1/messages/batches",
                cast_to=MessageBatch,
                content=body(),
                options={"headers": headers},
            )
        except anthropic.APIError as exc:
            raise from_sdk(exc, anthropic) from exc
        return _info(batch)

    async def retrieve(self, batch_id: str) -> BatchInfo:
        try:
            batch = await self.client.messages.batches.retrieve(batch_id)
        except anthropic.APIError as exc:
            raise from_sdk(exc, anthropic) from exc
        if batch.results_url:
            self._results_urls.pop(batch_id, None)
            self._results_urls[batch_id] = batch.results_url
            if len(self._results_urls) > RESULTS_URLS:
                del self._results_urls[next(iter(self._results_urls))]
        return _info(batch)

    async def list_recent(self, limit: int = 100) -> list[BatchInfo]:
        out: list[BatchInfo] = []
        try:
            async for batch in self.client.messages.batches.list(limit=min(limit, 1000)):
                out.append(_info(batch))
                if len(out) >= limit:
                    break
        except anthropic.APIError as exc:
            raise from_sdk(exc, anthropic) from exc
        return out

    async def cancel(self, batch_id: str) -> BatchInfo:
        try:
            return _info(await self.client.messages.batches.cancel(batch_id))
        except anthropic.APIError as exc:
            raise from_sdk(exc, anthropic) from exc

    def results(self, batch_id: str) -> AsyncIterator[Result]:
        return flatten(self.parsed_pages(batch_id))

    async def parsed_pages(self, batch_id: str) -> AsyncIterator[list[Parsed]]:
        # The SDK's raw streamed response, parsed here with orjson: no SDK model is built per line.
        try:
            async for page in jsonl.pages(self._result_bytes(batch_id)):
                yield jsonl.parsed(page, parse_line)
        except anthropic.APIError as exc:
            raise from_sdk(exc, anthropic) from exc

    async def _result_bytes(self, batch_id: str) -> AsyncIterator[bytes]:
        """The results file, from the results_url of the last retrieve when there was one (what the SDK's
        `results()` requests after retrieving the batch itself), else through `results()`."""
        url = self._results_urls.pop(batch_id, None)
        if url is None:
            async with self.client.messages.batches.with_streaming_response.results(batch_id) as streamed:
                async for chunk in streamed.iter_bytes():
                    yield chunk
            return
        response = await self.client.get(
            url, cast_to=httpx2.Response, options={"headers": {"Accept": "application/binary"}}, stream=True
        )
        try:
            async for chunk in response.aiter_bytes():
                yield chunk
        finally:
            await response.aclose()

    async def delete_objects(self, batch_id: str) -> int:
        try:
            await self.client.messages.batches.delete(batch_id)
        except anthropic.NotFoundError:
            return 0
        except anthropic.APIError as exc:
            raise from_sdk(exc, anthropic) from exc
        return 1

    @property
    def _sync_client(self) -> anthropic.AsyncAnthropic:
        """The client of synchronous calls, made at the first one (most jobs never make any)."""
        if self._sync is None:
            self._sync = aiohttp_copy(self.client, anthropic) if self._aiohttp_sync else self.client
        return self._sync

    async def complete(self, request: Request) -> Result:
        # As OpenAIProvider.complete: the SDK's low-level post, without its params transform and response model.
        try:
            options: Any = {"headers": {"anthropic-beta": STRUCTURED_OUTPUTS_BETA}} if request.response_format else {}
            response = await self._sync_client.post(
                "/v1/messages", body=params(request), cast_to=httpx2.Response, options=options
            )
        except anthropic.APIError as exc:
            return sync_failure(request.custom_id, from_sdk(exc, anthropic), exc)
        return read_answer(request.custom_id, response.content, _message_result)

    async def close(self) -> None:
        if self._sync is not None and self._sync is not self.client:
            await self._sync.close()
        await self.client.close()
