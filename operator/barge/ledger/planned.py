"""The plan's writes: planned items and their payload pages, inside the caller's transaction.

Why apart from `Ledger`: this is the plan's hot path, one statement per frame of rows, with its own dialect split.
On SQLite a frame (a JSON array of `PLANNED` lists, as the planner process wrote it) is parsed by SQLite inside one
INSERT: the rows are neither decoded nor bound one by one in Python, and the statement runs without the GIL (the
plan's writer thread bound 2,000 rows per call holding it, against the event loop's thread). The count triggers
are paused and the rows counted here by state (ledger/summary.py). PostgreSQL gets the rows by COPY into a
temporary table and one INSERT ... SELECT: one round trip, and one run of the count trigger, instead of one per row.
Rows already there are ignored: a re-plan after a crash writes the same lines again.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import orjson
from sqlalchemy import Connection

from barge.ledger import pages, summary
from barge.ledger.bulk import COPY_MIN

if TYPE_CHECKING:
    from barge.ledger import Ledger

#: A planned item as the planner hands it over (`Ledger.add_planned`; `add_frames`: JSON arrays of these), in order.
PLANNED = ("custom_id", "line", "item_id", "state", "error_type", "reason", "est_tokens", "size")
Planned = tuple[str, int, str | None, str, str, str, int, int]
INSERT_ITEM = (
    "INSERT INTO items (job, custom_id, line, item_id, state, attempts, error_type, reason, est_tokens, size, "
    "via, input_tokens, output_tokens, cache_read_tokens, cache_write_tokens) "
    "VALUES (?, ?, ?, ?, ?, 0, ?, ?, ?, ?, '', 0, 0, 0, 0) ON CONFLICT (job, custom_id) DO NOTHING"
)
#: SQLite: a frame of planned items inserted by one statement, parsed by SQLite.
_INSERT_FRAME = (
    "INSERT INTO items (job, custom_id, line, item_id, state, attempts, error_type, reason, est_tokens, size, "
    "via, input_tokens, output_tokens, cache_read_tokens, cache_write_tokens) "
    "SELECT ?, value ->> 0, value ->> 1, value ->> 2, value ->> 3, 0, value ->> 4, value ->> 5, value ->> 6, "
    "value ->> 7, '', 0, 0, 0, 0 FROM json_each(?) WHERE true ON CONFLICT (job, custom_id) DO NOTHING"
)
_FRAME_STATES = "SELECT value ->> 3, COUNT(*) FROM json_each(?) GROUP BY 1"
#: SQLite's JSON ends a string at an escaped NUL: a frame holding one is bound row by row instead.
_JSON_NUL = b"\\u0000"
_INSERT_PAGE = (
    "INSERT INTO payload_pages (job, first_line, last_line, n, lines, text) VALUES (?, ?, ?, ?, ?, ?) "
    "ON CONFLICT (job, first_line) DO NOTHING"
)
_PG_PLANNED = (
    "CREATE TEMPORARY TABLE IF NOT EXISTS barge_planned (custom_id text, line integer, item_id text, state text, "
    "error_type text, reason text, est_tokens integer, size integer) ON COMMIT DELETE ROWS"
)
_PG_INSERT_PLANNED = (
    "INSERT INTO items (job, custom_id, line, item_id, state, attempts, error_type, reason, est_tokens, size, "
    "via, input_tokens, output_tokens, cache_read_tokens, cache_write_tokens) "
    "SELECT %s, custom_id, line, item_id, state, 0, error_type, reason, est_tokens, size, '', 0, 0, 0, 0 "
    "FROM barge_planned ON CONFLICT (job, custom_id) DO NOTHING"
)


def _cursor(conn: Connection) -> Any:
    return conn.connection.dbapi_connection.cursor()  # type: ignore[union-attr]


def insert_pg(conn: Connection, job: str, rows: Sequence[Sequence[Any]], payload_pages: Sequence[pages.Page]) -> None:
    """PostgreSQL: items (`PLANNED` sequences) and their payload pages, COPY past `COPY_MIN` rows."""
    cursor = _cursor(conn)
    try:
        if len(rows) >= COPY_MIN:
            cursor.execute(_PG_PLANNED)
            with cursor.copy(f"COPY barge_planned ({', '.join(PLANNED)}) FROM STDIN") as copy:
                for row in rows:
                    copy.write_row(row)
            cursor.execute(_PG_INSERT_PLANNED, (job,))
        elif rows:
            cursor.executemany(INSERT_ITEM.replace("?", "%s"), [(job, *r) for r in rows])
        if payload_pages:
            cursor.executemany(_INSERT_PAGE.replace("?", "%s"), [(job, *p) for p in payload_pages])
    finally:
        cursor.close()


def insert_frames(
    conn: Connection, job: str, frames: Sequence[bytes], payload_pages: Sequence[pages.Page], *, count: bool
) -> int | None:
    """SQLite: the frames' rows and the pages; the number of rows offered. With `count`, the triggers are paused
    and the rows counted by state here: None when some row was not inserted (the caller must roll back: its counts
    are unknown)."""
    cursor = _cursor(conn)
    try:
        paused = count and summary.pause(cursor)
        states: Counter[str] = Counter()
        inserted = 0
        for frame in frames:
            if _JSON_NUL in frame:
                rows = orjson.loads(frame)
                cursor.executemany(INSERT_ITEM, [(job, *r) for r in rows])
                inserted += cursor.rowcount
                states.update(str(r[3]) for r in rows)
            else:
                text = frame.decode()
                cursor.execute(_INSERT_FRAME, (job, text))
                inserted += cursor.rowcount
                states.update({str(state): int(n) for state, n in cursor.execute(_FRAME_STATES, (text,))})
        if payload_pages:
            cursor.executemany(_INSERT_PAGE, [(job, *p) for p in payload_pages])
        if paused:
            summary.resume(cursor)
            if inserted != states.total():
                return None
            summary.add(cursor, False, {(job, state, ""): [n, 0, 0, 0, 0] for state, n in states.items()})
        return states.total()
    finally:
        cursor.close()


#: `discard` deletes this many item rows, or payload pages, per transaction: on SQLite each transaction goes through
#: the WAL (with `secure_delete`, freed pages are written again as zeros), which is truncated after each, so that
#: removing a plan that was stopped by the free-space floor needs only a few MiB of free space.
DISCARD_ITEMS = 20_000
DISCARD_PAGES = 4


def discard(ledger: Ledger, job: str) -> int:
    """A plan that was refused or stopped (batch/capacity.py): every row it wrote goes, so that no job is ever left
    half-planned in the ledger. Only for a job not yet planned: nothing of it was submitted. The delete trigger
    keeps `item_counts` exact. Returns the item rows removed."""
    removed = 0
    steps = (
        ("payload_pages", "first_line", DISCARD_PAGES),
        ("payloads", "line", DISCARD_ITEMS),
        ("items", "custom_id", DISCARD_ITEMS),
    )
    for table, key, batch in steps:
        sql = (
            f"DELETE FROM {table} WHERE job = ? AND {key} IN "  # noqa: S608  (constant names)
            f"(SELECT {key} FROM {table} WHERE job = ? LIMIT {batch})"
        )
        while True:
            with ledger.engine.begin() as conn:
                n = int(conn.exec_driver_sql(_sql(conn, sql), (job, job)).rowcount or 0)
            if not ledger.postgres:
                with ledger.engine.connect() as conn:
                    conn.exec_driver_sql("PRAGMA wal_checkpoint(TRUNCATE)")
            removed += n if table == "items" else 0
            if n < batch:
                break
    return removed


def _sql(conn: Connection, text: str) -> str:
    return text.replace("?", "%s") if conn.dialect.name == "postgresql" else text
