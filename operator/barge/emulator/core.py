"""Provider-neutral heart of the emulator: requests, deterministic replies, outcomes, batches moving in time.

A batch's fate is drawn once, at creation, from a RNG seeded by (profile seed, batch id), so a run is
reproducible and a retried request (same custom_id, new batch) gets a fresh draw. Each request also draws
the moment inside the processing window at which it finishes, which decides what a cancel leaves behind.
Status is computed from the clock on every read: nothing runs in the background.
"""

from __future__ import annotations

import asyncio
import math
import os
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any, Literal, TypeGuard

import orjson
from aiohttp import web

from barge.emulator import structured
from barge.emulator.profile import Profile
from barge.emulator.structured import Tool

ProviderName = Literal["anthropic", "openai", "azure", "mistral", "gemini", "bedrock"]
REPLY_PREFIX = "Emulated reply: "
CUSTOM_ID_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-")
BATCH_EXPIRY_SECONDS = 24 * 3600


def estimate_tokens(text: str) -> int:
    """The emulator's token count: one token per four characters, at least one."""
    return max(1, math.ceil(len(text) / 4))


def reply_text(last_user: str, chars: int = 200, repeat: bool = False) -> str:
    """A completion any test can join back to its input: a fixed prefix and the prompt's first `chars` chars
    (`repeat`: of the prompt repeated, so that short prompts get long answers)."""
    if repeat and last_user:
        last_user *= chars // len(last_user) + 1
    return REPLY_PREFIX + last_user[:chars]


def valid_custom_id(custom_id: object) -> TypeGuard[str]:
    return isinstance(custom_id, str) and 1 <= len(custom_id) <= 64 and set(custom_id) <= CUSTOM_ID_CHARS


def _content_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(str(part.get("text", "")) for part in content if isinstance(part, dict))
    return ""


@dataclass(slots=True)
class Item:
    """One request as the emulator keeps it: what is needed to answer it, not the whole body."""

    custom_id: str
    model: str
    last_user: str
    input_tokens: int
    max_tokens: int
    cached_prefix_tokens: int = 0
    invalid: str = ""
    line: int = 0
    schema: dict[str, Any] | None = None
    """The schema a response_format / output_config.format asks the answer to follow (emulator/structured.py)."""
    tool: Tool | None = None
    """The tool a tool_choice forces: the answer is a call to it."""
    embedding: tuple[int, str] | None = None
    """An embeddings request's (dimensions, 0 for the model's own; encoding_format): answered with a vector."""
    labels: dict[str, str] | None = None
    """A Vertex Gemini line's request labels (Vertex knows a line by its position only; the state shows them)."""


def item_from_messages(custom_id: str, params: dict[str, Any], line: int = 0) -> Item:
    """Read an Anthropic Messages or OpenAI chat-completions body into an Item; problems become `invalid`."""
    messages = params.get("messages")
    problems = []
    if not isinstance(params.get("model"), str) or not params.get("model"):
        problems.append("model: field required")
    if not isinstance(messages, list) or not messages:
        problems.append("messages: field required")
        messages = []
    max_tokens = params.get("max_tokens", params.get("max_completion_tokens"))
    if max_tokens is None and "system" in params:  # Anthropic requires it; OpenAI does not
        problems.append("max_tokens: field required")
    if max_tokens is not None and (not isinstance(max_tokens, int) or max_tokens < 1):
        problems.append("max_tokens: must be a positive integer")
    schema, tool = structured.wanted(params)
    system = params.get("system", "")
    system_text = _content_text(system)
    cached = 0
    if isinstance(system, list) and any(isinstance(b, dict) and b.get("cache_control") for b in system):
        cached = estimate_tokens(system_text)
    texts = [system_text] + [_content_text(m.get("content")) for m in messages if isinstance(m, dict)]
    users = [m for m in messages if isinstance(m, dict) and m.get("role") == "user"]
    return Item(
        custom_id=custom_id,
        model=str(params.get("model") or ""),
        last_user=_content_text(users[-1].get("content")) if users else "",
        input_tokens=estimate_tokens("".join(texts)),
        max_tokens=int(max_tokens) if isinstance(max_tokens, int) else 4096,
        cached_prefix_tokens=cached,
        invalid="; ".join(problems),
        line=line,
        schema=schema,
        tool=tool,
    )


@dataclass(frozen=True, slots=True)
class Answer:
    """What happened to one request."""

    outcome: str  # succeeded | refusal | invalid_request | server_error | expired | canceled
    text: str = ""
    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    message: str = ""
    truncated: bool = False
    tool_call: tuple[str, Any] | None = None
    """A forced tool's (name, arguments): the answer is that call (its text is the arguments in JSON)."""
    garbled: bool = False
    """Answered (and billed) as succeeded, but its line of the results file is served unreadable (`garble`)."""


def answer(item: Item, outcome: str, cache_hit: bool, reply_chars: int = 200, repeat: bool = False) -> Answer:
    if item.invalid:
        return Answer("invalid_request", message=item.invalid)
    if outcome == "garbled":
        return replace(answer(item, "succeeded", cache_hit, reply_chars, repeat), garbled=True)
    if outcome == "invalid_request":
        return Answer("invalid_request", message="emulated invalid request")
    if outcome in ("server_error", "expired", "canceled"):
        return Answer(outcome, message=f"emulated {outcome.replace('_', ' ')}")
    full = "" if outcome == "refusal" else reply_text(item.last_user, reply_chars, repeat)
    call: tuple[str, Any] | None = None
    if outcome != "refusal" and item.tool is not None:
        call = (item.tool.name, structured.minimal(item.tool.input_schema))
        full = orjson.dumps(call[1]).decode()
    elif outcome != "refusal" and item.schema is not None:  # structured outputs follow the schema whole
        full = structured.answer_text(item.schema, outcome == "schema_violation", full)
    text = full if item.schema is not None or call is not None else full[: item.max_tokens * 4]
    cached = item.cached_prefix_tokens
    return Answer(
        "succeeded" if outcome == "schema_violation" else outcome,  # answered and billed: only its text is wrong
        text=text,
        input_tokens=item.input_tokens - cached,
        output_tokens=estimate_tokens(text) if text else 1,
        cache_read_tokens=cached if cache_hit else 0,
        cache_write_tokens=0 if cache_hit else cached,
        truncated=len(text) < len(full),
        tool_call=call,
    )


def garble(line: bytes, index: int) -> bytes:
    """A results line or answer body as a broken proxy or a corrupted file could serve it, one of four ways by
    `index`: cut in the middle, a byte that is not UTF-8, a lone surrogate escape at the start of its first string
    value (valid to Python's json, not to strict parsers), or an array around the object (JSON of another shape)."""
    kind, middle = index % 4, len(line) // 2
    if kind == 0:
        return line[:middle]
    if kind == 1:
        return line[:middle] + b"\xff" + line[middle:]
    at = line.find(b'":"')
    if kind == 2 and at >= 0:
        return line[: at + 3] + b"\\ud800" + line[at + 3 :]
    return b"[" + line + b"]"


def answer_response(payload: dict[str, Any], ans: Answer, n: int) -> web.Response:
    """A synchronous answer (status 200); a garbled one's body is served unreadable (`garble`, by `n`)."""
    body = orjson.dumps(payload)
    return web.Response(body=garble(body, n) if ans.garbled else body, content_type="application/json")


def draw(rng: random.Random, probabilities: dict[str, float]) -> str:
    roll = rng.random()
    for outcome, p in probabilities.items():
        if roll < p:
            return outcome
        roll -= p
    return "succeeded"


@dataclass
class Batch:
    """A batch on the emulator's clock."""

    id: str
    provider: ProviderName
    items: list[Item]
    created_at: float
    processing_seconds: float
    cancel_seconds: float
    outcomes: list[str]
    finish_offsets: list[float]
    order: list[int]
    cancel_at: float | None = None
    archived: bool = False
    # OpenAI / Azure only
    input_file_id: str = ""
    endpoint: str = "/v1/chat/completions"
    completion_window: str = "24h"
    metadata: dict[str, str] | None = None
    validation_errors: list[dict[str, Any]] = field(default_factory=list)
    output_expires_after: dict[str, Any] | None = None
    reply_chars: int = 200  # the profile's batch.replyChars
    reply_repeat: bool = False  # the profile's batch.replyRepeat
    betas: str = ""  # Anthropic: the create call's anthropic-beta header (structured outputs put theirs there)
    _answers: list[tuple[Item, Answer]] | None = field(default=None, repr=False)
    _rendered: dict[str, bytes] = field(default_factory=dict, repr=False)

    def rendered(self, key: str, render: Callable[[int, Item, Answer], bytes | None]) -> bytes:
        """A results file, serialised once (the batch has ended, so it cannot change) and served from memory."""
        if key not in self._rendered:
            lines = []
            for index, (item, ans) in enumerate(self.answers()):
                line = render(index, item, ans)
                if line is not None:
                    lines.append(garble(line, index) if ans.garbled else line)
            self._rendered[key] = b"".join(p + b"\n" for p in lines)
        return self._rendered[key]

    @property
    def end_at(self) -> float:
        if self.validation_errors:
            return self.created_at + self.processing_seconds * 0.1
        if self.cancel_at is not None:
            return min(self.cancel_at + self.cancel_seconds, self.created_at + self.processing_seconds)
        return self.created_at + self.processing_seconds

    def ended(self, now: float) -> bool:
        return now >= self.end_at

    def canceled(self, index: int) -> bool:
        """True when a cancel came before this request finished."""
        return self.cancel_at is not None and (
            self.created_at + self.finish_offsets[index] * self.processing_seconds > self.cancel_at
        )

    def final_outcome(self, index: int) -> str:
        if self.canceled(index):
            return "canceled"
        return self.outcomes[index]

    def answers(self) -> list[tuple[Item, Answer]]:
        """Every request's answer, in the shuffled order the results file uses (asked only once ended,
        when nothing can change any more, so it is computed once)."""
        if self._answers is not None:
            return self._answers
        seen_prefixes: set[tuple[str, int]] = set()
        out = []
        for index in self.order:
            item = self.items[index]
            key = (item.model, item.cached_prefix_tokens)
            hit = key in seen_prefixes
            seen_prefixes.add(key)
            out.append((item, answer(item, self.final_outcome(index), hit, self.reply_chars, self.reply_repeat)))
        self._answers = out
        return out

    def counts(self, now: float) -> dict[str, int]:
        """Anthropic-style request counts: all but processing stay 0 until the batch ends."""
        counts = {"processing": 0, "succeeded": 0, "errored": 0, "canceled": 0, "expired": 0}
        if not self.ended(now):
            counts["processing"] = len(self.items)
            return counts
        for index, item in enumerate(self.items):
            outcome = "invalid_request" if item.invalid else self.final_outcome(index)
            key = {
                "succeeded": "succeeded",
                "garbled": "succeeded",
                "schema_violation": "succeeded",
                "refusal": "succeeded",
                "canceled": "canceled",
                "expired": "expired",
            }.get(outcome, "errored")
            counts[key] += 1
        return counts


class Store:
    """Everything the emulator holds: batches, files, counters. Survives any client restarting."""

    def __init__(self, profile: Profile, clock: Any = time.time) -> None:
        self.profile = profile
        self.clock = clock
        self.reset()

    def reset(self) -> None:
        """Forget everything (tests between scenarios)."""
        profile = self.profile
        self.instance = os.urandom(4).hex()
        self.batches: dict[str, Batch] = {}
        self.files: dict[str, dict[str, Any]] = {}
        self.deleted_files: set[str] = set()  # a deleted output file stays deleted when its batch is read again
        self.creates = 0
        self.deletes = 0
        self.sync_requests = 0
        self.rate_limited = 0
        self.requests: dict[str, int] = {}
        """"METHOD /route/{param}" -> requests served (the benchmarks count a client's calls with it)."""
        self._sync_rng = random.Random(f"{profile.seed}:sync")

    def new_batch(self, provider: ProviderName, items: list[Item], **extra: Any) -> Batch:
        self.creates += 1
        prefixes = {"anthropic": "msgbatch_", "openai": "batch_", "azure": "batch_", "mistral": "mbatch_"}
        prefixes["gemini"] = "batches/"  # a Gemini batch's id is its resource name
        prefixes["bedrock"] = "bj"  # a Bedrock job's id is the last part of its ARN
        prefix = prefixes[provider]
        # Unique across emulator instances, as real ids are; the outcomes stay a function of (seed, n-th create).
        batch_id = f"{prefix}{self.instance}{self.creates:06d}"
        rng = random.Random(f"{self.profile.seed}:{self.creates}")
        outcomes = [draw(rng, self.profile.batch.outcomes) for _ in items]
        offsets = [rng.random() for _ in items]
        order = list(range(len(items)))
        rng.shuffle(order)
        batch = Batch(
            batch_id,
            provider,
            items,
            self.clock(),
            self.profile.batch.processing_seconds,
            self.profile.batch.cancel_seconds,
            outcomes,
            offsets,
            order,
            reply_chars=self.profile.batch.reply_chars,
            reply_repeat=self.profile.batch.reply_repeat,
            **extra,
        )
        self.batches[batch_id] = batch
        return batch

    def delete_fault(self) -> tuple[int, str] | None:
        """(status, message) when the profile makes this delete fail (counted either way), else None."""
        self.deletes += 1
        if self.profile.batch.delete_forbidden:
            return 403, "This API key may not delete this resource."
        if self.deletes <= self.profile.batch.delete_failures:
            return 500, "The server had an error while processing your request."
        return None

    def sync_outcome(self) -> str:
        self.sync_requests += 1
        return draw(self._sync_rng, self.profile.sync.outcomes)

    def listing(self, provider: ProviderName) -> list[Batch]:
        """Newest first, as both providers list."""
        mine = [b for b in self.batches.values() if b.provider == provider and not b.archived]
        return sorted(mine, key=lambda b: (b.created_at, b.id), reverse=True)

    def state(self) -> dict[str, Any]:
        now = self.clock()
        return {
            "batches": [
                {
                    "id": b.id,
                    "provider": b.provider,
                    "status": status_word(b, now),
                    "created_at": b.created_at,
                    "archived": b.archived,
                    "custom_ids": [i.custom_id for i in b.items],
                    "input_tokens": sum(i.input_tokens for i in b.items),
                    "errors": [str(e.get("code")) for e in b.validation_errors],
                    "output_expires_after": b.output_expires_after,
                    **({"labels": [i.labels or {} for i in b.items]} if any(i.labels for i in b.items) else {}),
                }
                for b in self.batches.values()
            ],
            "files": [{"id": k, "kind": v["kind"], "batch": v.get("batch", "")} for k, v in self.files.items()],
            "sync_requests": self.sync_requests,
            "rate_limited": self.rate_limited,
            "creates": self.creates,
            "requests": dict(self.requests),
        }


def status_word(batch: Batch, now: float) -> str:
    """The provider's own status word for the batch right now."""
    if batch.provider == "anthropic":
        if batch.ended(now):
            return "ended"
        return "canceling" if batch.cancel_at is not None else "in_progress"
    if batch.validation_errors:
        return "failed" if batch.ended(now) else "validating"
    if batch.cancel_at is not None:
        return "cancelled" if batch.ended(now) else "cancelling"
    elapsed = (now - batch.created_at) / max(batch.processing_seconds, 1e-9)
    if elapsed < 0.1:
        return "validating"
    if elapsed < 0.9:
        return "in_progress"
    if elapsed < 1.0:
        return "finalizing"
    return "expired" if "expired" in batch.outcomes else "completed"


class RateWindow:
    """Sliding one-minute window of requests and tokens, for the synchronous quota."""

    def __init__(self, tokens_per_minute: int, requests_per_minute: int, clock: Any = time.monotonic) -> None:
        self.tpm = tokens_per_minute
        self.rpm = requests_per_minute
        self.clock = clock
        self.events: list[tuple[float, int]] = []

    def admit(self, tokens: int) -> float:
        """0 when admitted (and recorded); otherwise the seconds to wait (Retry-After)."""
        if not self.tpm and not self.rpm:
            return 0.0
        now = self.clock()
        self.events = [(t, n) for t, n in self.events if now - t < 60.0]
        used_tokens = sum(n for _, n in self.events)
        over_rpm = self.rpm and len(self.events) + 1 > self.rpm
        over_tpm = self.tpm and used_tokens + tokens > self.tpm
        if not over_rpm and not over_tpm:
            self.events.append((now, tokens))
            return 0.0
        # Wait until enough of the window has slid past.
        wait = 60.0
        freed, count = 0, len(self.events)
        for t, n in self.events:
            freed += n
            count -= 1
            ok_rpm = not self.rpm or count + 1 <= self.rpm
            ok_tpm = not self.tpm or used_tokens - freed + tokens <= self.tpm
            if ok_rpm and ok_tpm:
                wait = 60.0 - (now - t)
                break
        return max(wait, 0.001)


STORE: web.AppKey[Store] = web.AppKey("store", Store)
SYNC_WINDOW: web.AppKey[RateWindow] = web.AppKey("sync_window", RateWindow)


async def stream_bytes(request: web.Request, body: bytes, content_type: str) -> web.StreamResponse:
    """Send a large body in 1 MiB writes, so a slow client never makes the emulator copy it."""
    response = web.StreamResponse(headers={"Content-Type": content_type})
    response.content_length = len(body)
    await response.prepare(request)
    view = memoryview(body)
    for start in range(0, len(body), 1 << 20):
        await response.write(view[start : start + (1 << 20)])
    await response.write_eof()
    return response


async def sync_call(app: web.Application, item: Item) -> str | float:
    """Quota, latency and the drawn outcome of one synchronous call, the same for every provider's endpoint.

    Returns the outcome, or the seconds to wait (for Retry-After) when the call is over the quota."""
    store = app[STORE]
    wait = app[SYNC_WINDOW].admit(item.input_tokens + item.max_tokens)
    if wait:
        store.rate_limited += 1
        return wait
    await asyncio.sleep(store.profile.sync.latency_ms / 1000)
    return store.sync_outcome()
