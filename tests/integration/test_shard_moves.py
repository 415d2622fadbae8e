"""A shard's items move to `submitting` (intent) and `submitted` (record) window by window of lines
(ledger/chunked.py): every item of the shard moves, whatever lies between or around its lines; and on SQLite a
move holds no more than a window's worth of statement journal when the items' custom_ids are scattered over the
table (it is clustered on custom_id, not on the line), which is how real ids (hashes, UUIDs) lie."""

from __future__ import annotations

import ctypes
import random
import sqlite3
from pathlib import Path

import pytest
from sqlalchemy import event

from barge.ledger import Ledger, chunked

JOB = "ns/moves/1"


def planned(lines: range, rng: random.Random, id_bytes: int = 0) -> list[tuple[object, ...]]:
    """Pending items with random custom_ids (every 5th line invalid), `id_bytes` of item_id each."""
    return [
        (f"#line-{n}", n, None, "invalid", "malformed_json", "bad", 0, 0)
        if n % 5 == 0
        else (f"{rng.getrandbits(64):016x}", n, "x" * id_bytes, "pending", "", "", 3, 40)
        for n in lines
    ]


def states(ledger: Ledger) -> dict[str, int]:
    return {
        str(s): int(n)
        for s, n in ledger._rows("SELECT state, COUNT(*) FROM items WHERE job = ? GROUP BY state", (JOB,))
    }


def test_every_item_of_a_shard_moves_across_windows(ledger_url: str) -> None:
    ledger = Ledger(ledger_url)
    ledger.ensure_job(JOB, "h")
    last = 5 * chunked.WINDOW + 37  # windows, and a partial one
    rows = planned(range(1, last + 1), random.Random(1))
    ledger.add_planned(JOB, rows, [])
    pending = sum(1 for n in range(1, last + 1) if n % 5)
    first_shard = sum(1 for n in range(1, 3 * chunked.WINDOW + 11) if n % 5)
    ledger.open_intent(JOB, "s00000", 1, 1, 3 * chunked.WINDOW + 10, first_shard)
    assert states(ledger) == {"invalid": last - pending, "pending": pending - first_shard, "submitting": first_shard}
    ledger.record_batch(JOB, "s00000", "b0", "anthropic", 1, first_shard, "in_progress", 0.0)
    assert states(ledger)["submitted"] == first_shard
    assert ledger.members_of(JOB, "b0") == {
        r[0] for r in rows if r[3] == "pending" and int(r[1]) <= 3 * chunked.WINDOW + 10
    }
    rest = pending - first_shard
    with pytest.raises(RuntimeError, match="expected"):  # a count that does not match: nothing of it is kept
        ledger.open_intent(JOB, "s00001", 1, 3 * chunked.WINDOW + 11, last, rest + 1)
    assert states(ledger)["pending"] == rest
    ledger.open_intent(JOB, "s00002", 1, 3 * chunked.WINDOW + 11, last, rest)
    ledger.record_batch(JOB, "s00002", "b2", "anthropic", 1, rest, "in_progress", 0.0)
    assert states(ledger) == {"invalid": last - pending, "submitted": pending}
    ledger.close()


class SqliteHeap:
    """SQLite's own heap counters (sqlite3_memory_used / _highwater) of the library the sqlite3 module uses."""

    def __init__(self) -> None:
        try:
            self.lib = ctypes.CDLL("libsqlite3.so.0")
        except OSError:
            pytest.skip("no shared libsqlite3 to read the heap counters from")
        self.lib.sqlite3_libversion.restype = ctypes.c_char_p
        if self.lib.sqlite3_libversion().decode() != sqlite3.sqlite_version:
            pytest.skip("the sqlite3 module does not use the shared libsqlite3")
        self.lib.sqlite3_memory_used.restype = ctypes.c_int64
        self.lib.sqlite3_memory_highwater.restype = ctypes.c_int64

    def reset(self) -> None:
        self.lib.sqlite3_memory_highwater(1)

    def above_used(self) -> int:
        """Bytes the heap held at its highest since `reset`, over what it holds now (page caches stay)."""
        return int(self.lib.sqlite3_memory_highwater(0) - self.lib.sqlite3_memory_used())


def test_a_shard_move_holds_a_window_of_journal_not_a_shard(tmp_path: Path) -> None:
    """Items of ~1 KB with random custom_ids: the lines of a window lie on pages of their own, so a statement
    journals about a page per line. With 4 KiB pages (four items to a page, ~5,000 pages) windows of 8,192 lines
    held 19 MB over what SQLite kept (its page cache), windows of 512 lines 2-3 MB; with 16 KiB pages (~16 to a
    page) windows of 512 lines failed this bound, which is why they are 128 (ledger/chunked.py)."""
    heap = SqliteHeap()
    ledger = Ledger(str(tmp_path / "ledger.db"))
    ledger.ensure_job(JOB, "h")
    rows = planned(range(1, 20_001), random.Random(2), id_bytes=900)
    for start in range(0, len(rows), 5000):
        ledger.add_planned(JOB, rows[start : start + 5000], [])
    count = states(ledger)["pending"]
    heap.reset()
    ledger.open_intent(JOB, "s00000", 1, 1, 20_000, count)
    intent = heap.above_used()
    heap.reset()
    ledger.record_batch(JOB, "s00000", "b0", "anthropic", 1, count, "in_progress", 0.0)
    record = heap.above_used()
    assert states(ledger)["submitted"] == count
    assert intent < 8 << 20, f"the intent's move held {intent / 2**20:.1f} MB over what it kept"
    assert record < 8 << 20, f"the record's move held {record / 2**20:.1f} MB over what it kept"
    ledger.close()


def test_sqlite_moves_walk_the_table_in_key_order(tmp_path: Path) -> None:
    """On SQLite the moves go by windows of WINDOW items in custom_id order, the table's own, not by windows of
    lines: with ids that do not sort by line a window of lines was a page per item (the record's move of 100k
    random ids: 3.4 s, 0.8 s now). Seen in the statements: each move's windows start at every WINDOW-th of the
    range's custom_ids, sorted, and they run OR FAIL (no statement journal)."""
    ledger = Ledger(str(tmp_path / "ledger.db"))
    ledger.ensure_job(JOB, "h")
    last = 3 * chunked.WINDOW + 50
    rows = planned(range(1, last + 1), random.Random(3))
    ledger.add_planned(JOB, rows, [])
    seen: list[tuple[str, tuple[object, ...]]] = []

    @event.listens_for(ledger.engine, "before_cursor_execute")
    def trace(_conn: object, _cursor: object, statement: str, parameters: object, *_: object) -> None:
        if statement.startswith("UPDATE") and isinstance(parameters, tuple):
            seen.append((statement, parameters))

    count = states(ledger)["pending"]
    ledger.open_intent(JOB, "s00000", 1, 1, last, count)
    ledger.record_batch(JOB, "s00000", "b0", "anthropic", 1, count, "in_progress", 0.0)
    assert states(ledger)["submitted"] == count
    ids = sorted(str(r[0]) for r in rows)
    for move in ("UPDATE OR FAIL items SET state = 'submitting'", "UPDATE OR FAIL items SET state = 'submitted'"):
        windows = [(s, p) for s, p in seen if s.startswith(move)]
        starts = [p[-4] if "custom_id < ?" in s else p[-3] for s, p in windows]
        assert starts == ids[:: chunked.WINDOW], move
        assert all(p[-2:] == (1, last) for _, p in windows)
    ledger.close()
