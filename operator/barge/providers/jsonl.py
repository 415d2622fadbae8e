"""Streaming JSONL decoding that never holds more than one line: CRLF-safe across chunk boundaries."""

from __future__ import annotations

from collections.abc import AsyncIterable, AsyncIterator


async def lines(chunks: AsyncIterable[bytes]) -> AsyncIterator[bytes]:
    """Yield complete, non-empty lines; a CR before LF is dropped even when the two arrive in different chunks."""
    buffer = b""
    async for chunk in chunks:
        buffer += chunk
        *complete, buffer = buffer.split(b"\n")
        for line in complete:
            line = line.rstrip(b"\r")
            if line.strip():
                yield line
    tail = buffer.rstrip(b"\r")
    if tail.strip():
        yield tail
