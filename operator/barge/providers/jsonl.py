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


#: The longest results line read (a 128k-token answer escaped six times over is ~3 MB). A longer one is dropped as it
#: streams, never held: a broken or hostile endpoint sending one endless line would otherwise grow one buffer until
#: the operator, and every team's jobs with it, ran out of memory.
MAX_LINE = 16 << 20
#: What `pages` yields in place of a line longer than MAX_LINE (`parsed` reads it as unreadable).
OVERSIZE = b"\x00line over MAX_LINE, dropped"


async def pages(chunks: AsyncIterable[bytes], max_line: int = MAX_LINE) -> AsyncIterator[list[bytes]]:
    """The complete, non-empty lines of each read, as one list: ingestion's hot path awaits once per read, not per
    line. A CR before LF is dropped even when the two arrive in different chunks. A line spanning reads is gathered
    in pieces (one copy, not one per read); past `max_line` bytes it is dropped up to its end and `OVERSIZE` stands
    in its place."""
    buffer = b""
    pieces: list[bytes] = []  # the reads of a line longer than one read, joined once it ends
    held = 0
    dropping = False
    async for chunk in chunks:
        if b"\n" not in chunk:
            if not dropping:
                pieces.append(chunk)
                held += len(chunk)
                if held + len(buffer) > max_line:
                    buffer, pieces, held, dropping = b"", [], 0, True
            continue
        page = []
        if dropping:
            chunk, dropping = chunk[chunk.index(b"\n") + 1 :], False
            page.append(OVERSIZE)
        elif pieces:
            buffer += b"".join(pieces)
            pieces, held = [], 0
        *complete, buffer = (buffer + chunk).split(b"\n") if buffer else chunk.split(b"\n")
        page += [line.rstrip(b"\r") for line in complete if line and not line.isspace()]
        if page:
            yield page
    if dropping:
        yield [OVERSIZE]
        return
    tail = (buffer + b"".join(pieces)).rstrip(b"\r")
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
    if line is OVERSIZE:
        why = f"a line over {MAX_LINE >> 20} MiB, dropped unread"
        return ("", Outcome.TRANSIENT, "", 0, 0, 0, 0, UNREADABLE, why)
    try:
        return parse_line(orjson.loads(line))
    except Exception as exc:  # as in parsed()
        return ("", Outcome.TRANSIENT, "", 0, 0, 0, 0, UNREADABLE, unreadable_reason(exc))
