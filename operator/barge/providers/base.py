"""The provider-neutral interface the batch engine and the workers program against."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from types import ModuleType
from typing import Any, Protocol, TypeVar

import orjson

Client = TypeVar("Client")


class Outcome(StrEnum):
    """What happened to one request, in the domain's words (DESIGN.md section 4)."""

    SUCCEEDED = "succeeded"
    REFUSED = "refused"  # refusal or content filter: a result, not a failure
    INVALID = "invalid"  # never retried
    TRANSIENT = "transient"  # server error, overload, rate limit, timeout: retried
    EXPIRED = "expired"  # resubmitted, or sent to the sync fallback near the deadline
    CANCELED = "canceled"  # same as expired
    FATAL = "fatal"  # authentication, permission, billing: stops the whole job
    INVALID_OUTPUT = "invalid_output"  # an answer that is not JSON or breaks spec.request.responseFormat: retried


@dataclass(frozen=True, slots=True)
class ResponseFormat:
    """A JSON Schema the answers must follow (already checked as a schema at admission)."""

    name: str
    schema: dict[str, Any]


@dataclass(frozen=True, slots=True)
class Request:
    """One rendered request, before it takes a provider's shape."""

    custom_id: str
    model: str
    user: str
    max_tokens: int
    system: str = ""
    cache_system: bool = False
    params: dict[str, Any] = field(default_factory=dict)
    response_format: ResponseFormat | None = None
    """spec.request.responseFormat: the encoders ask each provider for output that follows the schema."""
    passthrough: bool = False
    """`user` is a whole chat body in JSON (spec.request.mode passthrough): the encoders send it, with Barge's
    model and max tokens, instead of building messages from `system` and `user`."""
    endpoint: str = "chat"
    """spec.request.endpoint: `embeddings` asks for the vector of `user` (with `dimensions`, `encoding_format`)."""
    dimensions: int | None = None
    encoding_format: str | None = None


@dataclass(frozen=True, slots=True)
class Usage:
    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            self.input_tokens + other.input_tokens,
            self.output_tokens + other.output_tokens,
            self.cache_read_tokens + other.cache_read_tokens,
            self.cache_write_tokens + other.cache_write_tokens,
        )


#: No usage: one shared (frozen) instance, for the many results that carry none.
NO_USAGE = Usage()
#: The most tokens one request counts in one usage field (the largest context windows hold ~2M). A negative or
#: larger count is not a count: an answer holding one is unreadable (`counted`). It would overflow the ledger's
#: columns (every later step failed on it) or, negative, lower a job's spend against its budget.
MAX_USAGE = 10_000_000


def counted(input_tokens: int, output_tokens: int, cache_read: int, cache_write: int) -> Usage:
    """The provider's four counts as a Usage; ValueError when one is not a token count (see MAX_USAGE)."""
    for n in (input_tokens, output_tokens, cache_read, cache_write):
        if not 0 <= n <= MAX_USAGE:
            raise ValueError(f"usage {n} is not a token count")
    return Usage(input_tokens, output_tokens, cache_read, cache_write)


@dataclass(frozen=True, slots=True)
class Result:
    """One request's outcome, joined by custom_id (never by order)."""

    custom_id: str
    outcome: Outcome
    text: str = ""
    usage: Usage = field(default_factory=Usage)
    error_type: str = ""
    message: str = ""
    retry_after: float | None = None
    service_tier: str = ""
    """The tier a synchronous answer reports it was served at (OpenAI `service_tier`: `flex`, `default` ...)."""


#: A batch result as ingestion's hot path takes it, a plain tuple in this order: (custom_id, outcome, text,
#: input_tokens, output_tokens, cache_read_tokens, cache_write_tokens, error_type, message). A `Result` and its
#: `Usage` cost 1.3 us to build per line (frozen dataclasses set each field through object.__setattr__), more than
#: the rest of the line's parsing after orjson; tuples took 0.2 s CPU off 100,000 results (bench/README.md).
#: Batch results carry no retry_after (only synchronous calls do), so nothing of a batch's Result is lost.
Parsed = tuple[str, Outcome, str, int, int, int, int, str, str]


def as_result(parsed: Parsed) -> Result:
    cid, outcome, text, tin, tout, tcr, tcw, error_type, message = parsed
    usage = Usage(tin, tout, tcr, tcw) if tin or tout or tcr or tcw else NO_USAGE
    return Result(cid, outcome, text, usage, error_type, message)


def as_parsed(result: Result) -> Parsed:
    u = result.usage
    return (
        result.custom_id,
        result.outcome,
        result.text,
        u.input_tokens,
        u.output_tokens,
        u.cache_read_tokens,
        u.cache_write_tokens,
        result.error_type,
        result.message,
    )


@dataclass(frozen=True, slots=True)
class BatchInfo:
    """A provider batch as the engine needs to see it."""

    id: str
    status: str  # the provider's own word
    ended: bool
    created_at: datetime
    request_count: int | None = None
    metadata: dict[str, str] = field(default_factory=dict)
    errors: list[dict[str, Any]] = field(default_factory=list)  # batch-level validation errors (OpenAI/Azure)


class BatchProvider(Protocol):
    """What every adapter offers. Creating a batch never retries inside the SDK (max_retries=0)."""

    name: str
    max_requests: int
    max_bytes: int
    keeps_metadata: bool
    """Every batch the provider lists carries the metadata it was created with (Barge's job tag and shard), so an
    orphan is recognised by it alone; False: adoption also goes by creation window, size and result ids
    (batch/adoption.py)."""

    def encode(self, request: Request) -> bytes:
        """The request as it travels in a batch (one JSONL line, or one element of a JSON list)."""
        ...

    async def create_batch(
        self, lines: Iterable[bytes], metadata: dict[str, str], *, output_expires_after: int = 0
    ) -> BatchInfo:
        """Create one batch from encoded requests (sharding is the engine's job). `output_expires_after`: seconds
        the provider keeps the output and error files (OpenAI, Azure; 0 = the provider's default)."""
        ...

    async def retrieve(self, batch_id: str) -> BatchInfo: ...

    async def list_recent(self, limit: int = 100) -> list[BatchInfo]:
        """Newest first."""
        ...

    async def cancel(self, batch_id: str) -> BatchInfo: ...

    def results(self, batch_id: str) -> AsyncIterator[Result]:
        """Stream an ended batch's results in constant memory."""
        ...

    def parsed_pages(self, batch_id: str) -> AsyncIterator[list[Parsed]]:
        """The same results as `Parsed` tuples, one list per read from the wire (ingestion's hot path: no await
        and no object per result)."""
        ...

    async def complete(self, request: Request) -> Result:
        """The synchronous path (deadline fallback, workers, engine pools). Raises Fatal for job-wide errors."""
        ...

    async def delete_objects(self, batch_id: str) -> int:
        """Delete what the provider still holds of an ended, ingested batch: the input, output and error files
        (OpenAI, Azure: their batches cannot be deleted) or the batch with its results (Anthropic). What is already
        gone counts as deleted, so a retry after a crash is safe. Returns how many objects were deleted now."""
        ...

    async def close(self) -> None: ...


async def flatten(pages: AsyncIterator[list[Parsed]]) -> AsyncIterator[Result]:
    """`results` from `parsed_pages`: one Result at a time."""
    async for page in pages:
        for parsed in page:
            yield as_result(parsed)


def aiohttp_copy(client: Client, sdk: ModuleType) -> Client:
    """A copy of an SDK client (anthropic or openai: same API) on the SDK's aiohttp transport, for synchronous
    calls: at 64 in flight it costs half the CPU per call of the default httpx one (bench/bench_sync.py)."""
    copy: Client = client.with_options(http_client=sdk.DefaultAioHttpClient())  # type: ignore[attr-defined]
    return copy


#: The error type of a synchronous answer whose body could not be read (`read_answer`).
UNREADABLE_ANSWER = "unreadable_response"


def unreadable_reason(exc: BaseException) -> str:
    """Why a provider's JSON could not be read, short, and serialisable (no lone surrogate)."""
    return f"{type(exc).__name__}: {exc}"[:200].encode("utf-8", "backslashreplace").decode()


def read_answer(custom_id: str, body: bytes, read: Callable[[str, dict[str, Any]], Result]) -> Result:
    """A synchronous answer's body, decoded and read by the provider's `read`. A body that cannot be read (not JSON,
    not UTF-8, a lone surrogate, another shape) is a transient `UNREADABLE_ANSWER`: retried as a server error is,
    never an exception, which took down the whole synchronous pass and had every later step pay for the same
    request again."""
    try:
        return read(custom_id, orjson.loads(body))
    except Exception as exc:  # whatever the body makes the reader raise, the answer is unreadable
        return Result(custom_id, Outcome.TRANSIENT, error_type=UNREADABLE_ANSWER, message=unreadable_reason(exc))
