"""Admission and sharding: input lines -> ledger items (valid or invalid), pending items -> shards.

Both stream: admission reads one line at a time and writes items in chunks; sharding walks pending items in
line order keeping only their ids and sizes, so a job of any size plans in flat memory.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from barge.api.batchjob import RequestSpec
from barge.batch.render import ItemError, Renderer
from barge.providers.base import Request

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
        )

    def estimate(self, user: str) -> int:
        return estimate_tokens(self.spec.system + user)


def admit(
    lines: Iterable[tuple[int, bytes]],
    renderer: Renderer,
    factory: RequestFactory,
    encode: Callable[[Request], bytes],
    max_request_bytes: int = MAX_REQUEST_BYTES,
) -> Iterator[dict[str, Any]]:
    """One ledger row per input line: `pending` with its payload, or `invalid` with the line and the reason."""
    seen: set[str] = set()
    for number, raw in lines:
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
                    f"duplicate id {item_id!r} (its custom_id {rendered.custom_id!r} is already used by "
                    "an earlier line)",
                    "duplicate_id",
                )
            size = len(encode(factory(rendered.custom_id, rendered.user)))
            if size > max_request_bytes:
                raise ItemError(
                    f"request is {size} bytes, over the {max_request_bytes}-byte per-request limit", "request_too_large"
                )
            seen.add(custom_id)
            yield {
                "custom_id": custom_id,
                "line": number,
                "item_id": item_id,
                "state": "pending",
                "payload": rendered.user,
                "est_tokens": factory.estimate(rendered.user),
            }
        except ItemError as exc:
            yield {
                "custom_id": custom_id,
                "line": number,
                "item_id": item_id,
                "state": "invalid",
                "error_type": exc.error_type,
                "reason": exc.reason,
            }


def shards(items: Iterable[tuple[str, int]], max_requests: int, max_bytes: int) -> Iterator[list[str]]:
    """Group (custom_id, encoded size) into shards under the provider's count and byte limits."""
    current: list[str] = []
    size = 0
    for custom_id, length in items:
        if current and (len(current) >= max_requests or size + length + 1 > max_bytes):
            yield current
            current, size = [], 0
        current.append(custom_id)
        size += length + 1
    if current:
        yield current
