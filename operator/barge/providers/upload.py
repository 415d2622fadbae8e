"""A file object over encoded request lines, for the SDKs' file uploads: the batch file streams from the ledger.

Why: the OpenAI and Azure batch file used to be spooled to a temporary file first (a second copy of every byte
on disk, written and read back); the SDK hands any `io.IOBase` to httpx, which reads it in chunks, so lines can
go straight from the ledger to the socket. The length is not known up front, so the upload is chunked (as the
Anthropic create body already is). Rewinding is refused once reading began unless the source can be iterated
again (a retried upload then sends every line again, never a truncated file).
"""

from __future__ import annotations

import io
from collections.abc import Callable, Iterable, Iterator


class LineReader(io.RawIOBase):
    """`lines`, each followed by a newline, as a read-only binary file."""

    def __init__(self, lines: Iterable[bytes]) -> None:
        super().__init__()
        self._source = lines
        self._restartable = iter(lines) is not lines  # a list or a re-iterable view, not a one-shot iterator
        self._lines: Iterator[bytes] = iter(lines)
        self._buffer = bytearray()
        self._started = False
        self.bytes_read = 0

    @property
    def restartable(self) -> bool:
        return self._restartable

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return False

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        """Only a rewind to the start (httpx rewinds before it sends, and again on a retry)."""
        if offset != 0 or whence != io.SEEK_SET:
            raise io.UnsupportedOperation("a stream of lines can only be rewound to its start")
        if self._started:
            if not self._restartable:
                raise io.UnsupportedOperation("the lines cannot be read a second time")
            self._lines, self._started = iter(self._source), False
            self._buffer.clear()
            self.bytes_read = 0
        return 0

    def tell(self) -> int:
        raise io.UnsupportedOperation("the length of a stream of lines is not known up front")

    def read(self, size: int = -1) -> bytes:
        self._started = True
        want = size if size is not None and size >= 0 else 1 << 62
        buffer = self._buffer
        while len(buffer) < want:
            line = next(self._lines, None)
            if line is None:
                break
            buffer += line
            buffer += b"\n"
        out = bytes(buffer[:want])
        del buffer[:want]
        self.bytes_read += len(out)
        return out

    def readinto(self, target: bytearray | memoryview) -> int:  # type: ignore[override]
        data = self.read(len(target))
        target[: len(data)] = data
        return len(data)


class Replay:
    """An iterable that makes a fresh iterator each time (`LineReader` can then rewind it for a retry)."""

    def __init__(self, make: Callable[[], Iterator[bytes]]) -> None:
        self._make = make

    def __iter__(self) -> Iterator[bytes]:
        return self._make()
