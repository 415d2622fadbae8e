"""Rendered payloads stored by pages: one row per planner frame (a few hundred lines) instead of one row per line.

Why: a row per 2 KB payload cost a B-tree insert, a row header and, at upload, a join row per item; a page is
one blob of the payloads' UTF-8, one after another, and a small index (`lines`: per payload its line number and
where its text ends, little-endian int64 pairs). Pages are written as the planner answers, in line order, so
they are appended at the end of the table; a shard's upload reads a few hundred of them in order, and a drop
deletes a few hundred rows. The planner process builds a page's index and text itself and sends them as stored
(`packed`), so the parent never decodes the payload text it only stores.

Ledgers written before pages keep their rows in `payloads` (one per line): `PayloadReader` looks there for any
line no page holds, so a job planned before an upgrade is submitted, resubmitted and dropped the same way.
"""

from __future__ import annotations

import sys
from array import array
from collections.abc import Callable, Iterable
from typing import Any

#: (first line, last line, payload count, lines index, UTF-8 text): a page as stored.
Page = tuple[int, int, int, bytes, bytes]
#: Runs a query (? placeholders) on a connection of its own, as `Ledger._rows` does.
Rows = Callable[[str, tuple[Any, ...]], list[tuple[Any, ...]]]


def build(payloads: Iterable[tuple[int, str]]) -> Page | None:
    """A page of (line, payload) pairs given in line order; None when there are none."""
    index: list[int] = []
    texts: list[bytes] = []
    end = 0
    for line, payload in payloads:
        text = payload.encode()
        end += len(text)
        index += (line, end)
        texts.append(text)
    return of(index, b"".join(texts))


def of(index: list[int], text: bytes) -> Page | None:
    """The page of `text` (payloads one after another) whose index is line, end, line, end, ...; None when it
    holds no payload."""
    if not index:
        return None
    packed = array("q", index)
    if sys.byteorder != "little":
        packed.byteswap()
    return index[0], index[-2], len(index) // 2, packed.tobytes(), text


def packed(lines: bytes, text: bytes) -> Page | None:
    """The page of `text` whose index comes packed as stored (the planner process sends it so); None when it
    holds no payload. Its bounds and count are read from the index, not taken from the sender."""
    if not lines:
        return None
    index = _unpacked(lines)
    return index[0], index[-2], len(index) // 2, lines, text


def _unpacked(lines: bytes) -> array[int]:
    """A page's index as stored (little-endian int64) read into this machine's order."""
    index = array("q")
    index.frombytes(lines)
    if sys.byteorder != "little":
        index.byteswap()
    return index


def spans(lines: bytes) -> dict[int, tuple[int, int]]:
    """A page's index as line -> (start, end) of its payload in the page's text."""
    index = _unpacked(lines)
    ends = index[1::2]
    return dict(zip(index[0::2], zip([0, *ends[:-1]], ends, strict=True), strict=True))


class PayloadReader:
    """Payloads of one job looked up by line, for lines asked in increasing order (keyset reads): the pages in
    use are kept until the lines move past them, so each page is read once per pass."""

    def __init__(self, rows: Rows, job: str) -> None:
        self._rows = rows
        self._job = job
        self._pages: list[tuple[int, int, dict[int, tuple[int, int]], bytes]] = []  # (first, last, spans, text)
        self._fetched = -1  # the highest first_line fetched so far
        self._legacy = bool(rows("SELECT 1 FROM payloads WHERE job = ? LIMIT 1", (job,)))

    def lookup(self, lines: list[int]) -> dict[int, str]:
        """line -> payload for those of `lines` (ascending) that have one."""
        if not lines:
            return {}
        low, high = lines[0], lines[-1]
        self._pages = [p for p in self._pages if p[1] >= low]
        fetched = self._rows(
            "SELECT first_line, last_line, lines, text FROM payload_pages WHERE job = ? AND first_line > ? "
            "AND first_line <= ? AND last_line >= ? ORDER BY first_line",
            (self._job, self._fetched, high, low),
        )
        for first, last, index, text in fetched:
            self._pages.append((int(first), int(last), spans(bytes(index)), bytes(text)))
            self._fetched = max(self._fetched, int(first))
        found: dict[int, str] = {}
        missing = False
        for line in lines:
            for _, _, where, text in self._pages:
                span = where.get(line)
                if span is not None:
                    found[line] = text[span[0] : span[1]].decode()
                    break
            else:
                missing = True
        if self._legacy and missing:
            legacy = self._rows(
                "SELECT line, payload FROM payloads WHERE job = ? AND line BETWEEN ? AND ?", (self._job, low, high)
            )
            for line, payload in legacy:
                found.setdefault(int(line), payload)
        return found
