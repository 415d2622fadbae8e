"""Streaming JSONL decoding that never holds more than one network read: CRLF-safe across chunk boundaries."""

from __future__ import annotations

from collections.abc import AsyncIterable, AsyncIterator


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
