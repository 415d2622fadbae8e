"""Streaming JSONL decoding that never holds more than one network read: CRLF-safe across chunk boundaries; and
a page of result lines parsed, where a line that cannot be read becomes a marker instead of an exception.

Why the marker: ingestion reads the provider's results file itself (orjson, no SDK model per line). A line cut
short, not UTF-8, holding a lone surrogate escape (which orjson refuses) or JSON of another shape used to raise out
of the whole ingestion, and every later step read the file again and failed on the same line: the job held its
items until its deadline. A marker lets ingestion go on; its items are then missing and retried (batch/ingest.py).
"""

from __future__ import annotations

from collections.abc import AsyncIterable, AsyncIterator, Callable
from typing import Any

import orjson

from barge.providers.base import Outcome, Parsed, unreadable_reason

#: The error type of a `Parsed` that stands for an unreadable line (its custom_id is "": no item has that id).
UNREADABLE = "unreadable_result"


async def pages(chunks: AsyncIterable[bytes]) -> AsyncIterator[list[bytes]]:
    """The complete, non-empty lines of each read, as one list: ingestion's hot path awaits once per read, not per
    line. A CR before LF is dropped even when the two arrive in different chunks."""
    buffer = b""
    async for chunk in chunks:
        *complete, buffer = (buffer + chunk).split(b"\n") if buffer else chunk.split(b"\n")
        page = [line.rstrip(b"\r") for line in complete if line and not line.isspace()]
        if page:
            yield page
    tail = buffer.rstrip(b"\r")
    if tail and not tail.isspace():
        yield [tail]


async def lines(chunks: AsyncIterable[bytes]) -> AsyncIterator[bytes]:
    """Yield complete, non-empty lines, one at a time."""
    async for page in pages(chunks):
        for line in page:
            yield line


def parsed(page: list[bytes], parse_line: Callable[[Any], Parsed]) -> list[Parsed]:
    """Each line of `page` decoded by orjson and read by the provider's `parse_line`. One pass; a page with a line
    that fails is read again line by line, and each such line is an `UNREADABLE` marker whose message says why."""
    try:
        return [parse_line(orjson.loads(line)) for line in page]
    except Exception:  # whatever a line makes the parser raise, that line is unreadable
        return [_one(line, parse_line) for line in page]


def _one(line: bytes, parse_line: Callable[[Any], Parsed]) -> Parsed:
    try:
        return parse_line(orjson.loads(line))
    except Exception as exc:  # as in parsed()
        return ("", Outcome.TRANSIENT, "", 0, 0, 0, 0, UNREADABLE, unreadable_reason(exc))
