"""Admission and sharding: input lines -> ledger items (valid or invalid), pending items -> shards.

Both stream: admission reads one line at a time and writes items in chunks; sharding (`spans`, for submission
and for `barge plan` alike) walks pending items in line order keeping only each shard's bounds and sums, so a job
of any size plans in flat memory.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from barge.api.batchjob import RequestSpec
from barge.batch.render import ItemError, Renderer
from barge.providers.base import Request, ResponseFormat
from barge.providers.chat_convert import Unconvertible
from barge.providers.encoding import line_encoder

#: One request over this many encoded bytes is refused: it is far beyond any model's context window.
MAX_REQUEST_BYTES = 1024 * 1024


def estimate_tokens(text: str) -> int:
    """A deliberately simple estimate (4 characters a token) used for budgets and quota accounting."""
    return max(1, math.ceil(len(text) / 4))


@dataclass(frozen=True)
class RequestFactory:
    """Builds provider-neutral requests from stored payloads (the user message)."""

    model: str
    spec: RequestSpec

    def __call__(self, custom_id: str, user: str) -> Request:
        return Request(
            custom_id=custom_id,
            model=self.model,
            user=user,
            max_tokens=self.spec.max_tokens,
            system=self.spec.system,
            cache_system=self.spec.cache_prefix,
            params=dict(self.spec.params),
            response_format=self._response_format,
            passthrough=self.spec.mode == "passthrough",
            endpoint=self.spec.endpoint,
            dimensions=self.spec.dimensions,
            encoding_format=self.spec.encoding_format,
        )

    @property
    def _response_format(self) -> ResponseFormat | None:
        fmt = self.spec.response_format
        return None if fmt is None else ResponseFormat(fmt.name, fmt.json_schema)

    def estimate(self, user: str) -> int:
        if self.spec.endpoint == "embeddings":  # the input alone: no system prompt is sent
            return estimate_tokens(user)
        return estimate_tokens(self.spec.system + user)

    def line_encoder(self, encode: Callable[[Request], bytes]) -> Callable[[str, str], bytes]:
        """`(custom_id, user) -> encode(self(custom_id, user))`, compiled once (see encoding.line_encoder)."""
        return line_encoder(encode, self("", ""))


def admit_line(
    number: int,
    raw: bytes,
    renderer: Renderer,
    factory: RequestFactory,
    encode: Callable[[Request], bytes],
    seen: set[str],
    max_request_bytes: int = MAX_REQUEST_BYTES,
    encode_line: Callable[[str, str], bytes] | None = None,
) -> dict[str, Any]:
    """One ledger row for one input line: `pending` with its payload, or `invalid` with the line and the reason.
    `encode_line`: the same encoding as `encode(factory(...))`, compiled (factory.line_encoder)."""
    custom_id = f"#line-{number}"  # invalid lines get a key that can never be a real custom_id
    item_id: str | None = None
    try:
        fields = renderer.parse(raw)
        item_id = renderer.item_id(fields)
        rendered = renderer.render(number, fields)
        custom_id = rendered.custom_id
        if custom_id in seen:
            custom_id = f"#line-{number}"
            raise ItemError(
                f"duplicate id {item_id!r} (its custom_id {rendered.custom_id!r} is already used by an earlier line)",
                "duplicate_id",
            )
        try:
            if encode_line is not None:
                size = len(encode_line(rendered.custom_id, rendered.user))
            else:
                size = len(encode(factory(rendered.custom_id, rendered.user)))
        except Unconvertible as exc:  # a passthrough body the provider has no equal for (providers/chat_convert.py)
            raise ItemError(str(exc), "unconvertible") from exc
        if size > max_request_bytes:
            raise ItemError(
                f"request is {size} bytes, over the {max_request_bytes}-byte per-request limit", "request_too_large"
            )
        seen.add(custom_id)
        return {
            "custom_id": custom_id,
            "line": number,
            "item_id": item_id,
            "state": "pending",
            "payload": rendered.user,
            "est_tokens": factory.estimate(rendered.user),
            "size": size,  # encoded bytes: shards are cut by it as well as by count
        }
    except ItemError as exc:
        return invalid_row(number, exc.error_type, exc.reason, custom_id, item_id)


def invalid_row(
    number: int, error_type: str, reason: str, custom_id: str = "", item_id: str | None = None
) -> dict[str, Any]:
    return {
        "custom_id": custom_id or f"#line-{number}",
        "line": number,
        "item_id": item_id,
        "state": "invalid",
        "error_type": error_type,
        "reason": reason,
    }


def admit(
    lines: Iterable[tuple[int, bytes]],
    renderer: Renderer,
    factory: RequestFactory,
    encode: Callable[[Request], bytes],
    max_request_bytes: int = MAX_REQUEST_BYTES,
) -> Iterator[dict[str, Any]]:
    """One ledger row per input line, in this process (`barge plan`; the engine plans in planner.py)."""
    seen: set[str] = set()
    for number, raw in lines:
        yield admit_line(number, raw, renderer, factory, encode, seen, max_request_bytes)


@dataclass(frozen=True, slots=True)
class Span:
    """A shard of consecutive pending items, as submission needs it: lines first..last, and sums over them."""

    first: int
    last: int
    count: int
    tries: int  # the most attempts any of its items made so far
    tokens: int  # estimated input tokens
    size: int  # encoded bytes of its requests (without the separator after each)


def spans(
    rows: Iterable[tuple[int, int, int, int]], max_requests: int, max_bytes: int, max_tokens: int = 0
) -> Iterator[Span]:
    """The shards of `rows` (line, encoded size, attempts, estimated tokens; in line order) under the provider's
    count and byte limits (each request is followed by one separator byte; a request alone over `max_bytes` still
    gets a shard of its own: admission already refused anything over MAX_REQUEST_BYTES, far below every provider's
    limit), each then cut into consecutive parts of at most `max_tokens` estimated tokens (0: no such cut; an item
    alone over it is a part of its own), so that every part of a job over a deployment's batch quota fits it; in
    one pass that holds no row. Why: a shard held as a list of its rows cost ~25 MB of Python objects per 100,000
    items, and left the heap that much larger for the rest of the run (bench/README.md, third round)."""
    first = last = count = tries = tokens = part = 0  # the part being built (count 0: none), `part` its bytes
    held = size = 0  # items and bytes of the shard being built (parts of it already yielded included)
    for line, length, attempts, estimate in rows:
        if held and (held >= max_requests or size + length + 1 > max_bytes):
            yield Span(first, last, count, tries, tokens, part)
            count = held = size = 0
        elif count and max_tokens and tokens + estimate > max_tokens:
            yield Span(first, last, count, tries, tokens, part)
            count = 0
        if not count:
            first, tries, tokens, part = line, attempts, 0, 0
        last, count, tries, tokens, part = line, count + 1, max(tries, attempts), tokens + estimate, part + length
        held, size = held + 1, size + length + 1
    if count:
        yield Span(first, last, count, tries, tokens, part)
