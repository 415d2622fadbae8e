"""Submission's two state moves, inside the caller's (durable) transaction: a shard's items from `pending` to
`submitting` with its intent, then to `submitted` with its batch.

Why apart from `Ledger`: these two statements are the exactly-once contract's price, paid for every item before
its batch is paid for, so they are tuned per dialect. Both go by windows (ledger/chunked.py: a few MB of statement
journal whatever the shard's size). On SQLite the items with no usage and `via` '' (every item, unless one kept a
failed attempt's) move first, with the count triggers paused and the update trigger dropped meanwhile
(summary.update_trigger_dropped), by windows of custom_ids (`_BY_KEY`, chunked.update_keys), and are counted here
by their state alone; then any other item of the lines moves with the triggers on.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import Connection

from barge.ledger import summary
from barge.ledger.chunked import update_keys, update_lines
from barge.ledger.schema import NO_RESULT

#: The two moves; each statement ends with `_LINES` (ledger/chunked.py fills in the window).
TO_SUBMITTING = "UPDATE items SET state = 'submitting', shard = ? WHERE job = ? AND state = 'pending'"
TO_SUBMITTED = "UPDATE items SET state = 'submitted', batch_id = ? WHERE job = ? AND state = 'submitting' AND shard = ?"
_LINES = " AND line BETWEEN ? AND ?"
#: The same moves on SQLite, by windows of custom_ids (chunked.update_keys): no index but the key may serve them
#: (`+state`, `+shard`), and OR FAIL: no statement journal. Nothing in them can fail a constraint; on any other
#: error the caller's transaction is rolled back whole, so a statement's own rollback bought nothing, and it cost
#: a copy of every page each window changed: ix_items_state's pages, which key order leaves in line order all over
#: the index (random custom_ids, 100k items: intent 1.21 -> 0.58 s, record 1.47 -> 0.83 s).
_BY_KEY = {
    TO_SUBMITTING: "UPDATE OR FAIL items SET state = 'submitting', shard = ? WHERE job = ? AND +state = 'pending'",
    TO_SUBMITTED: (
        "UPDATE OR FAIL items SET state = 'submitted', batch_id = ? "
        "WHERE job = ? AND +state = 'submitting' AND +shard = ?"
    ),
}
#: The shard's line range among its items in `submitting` (`line > 0`, true of every item, makes SQLite read the
#: state's range of ix_items_state instead of every item of the job).
SHARD_LINES = "SELECT MIN(line), MAX(line) FROM items WHERE job = ? AND state = 'submitting' AND line > 0 AND shard = ?"


def move(
    conn: Connection,
    postgres: bool,
    job: str,
    sql: str,
    params: tuple[Any, ...],
    lines: tuple[int, int],
    states: tuple[str, str],
) -> int:
    """A shard's items moved from one state to another by `sql` (`TO_SUBMITTING` or `TO_SUBMITTED`, + `_LINES`),
    window by window of lines; the number moved."""
    moved = 0
    if not postgres:
        cursor: Any = conn.connection.dbapi_connection.cursor()  # type: ignore[union-attr]
        try:
            if summary.pause(cursor):
                with summary.update_trigger_dropped(cursor):
                    moved = update_keys(conn, _BY_KEY[sql] + " AND " + NO_RESULT, params, job, *lines)
                summary.resume(cursor)
                before, after = states
                summary.add(
                    cursor, False, {(job, before, ""): [-moved, 0, 0, 0, 0], (job, after, ""): [moved, 0, 0, 0, 0]}
                )
        finally:
            cursor.close()
    full = sql + _LINES
    return moved + update_lines(conn, full.replace("?", "%s") if postgres else full, params, *lines)


def shard_lines(conn: Connection, postgres: bool, job: str, shard: str) -> tuple[int, int] | None:
    """(first, last) line of the shard's items still `submitting`; None when it has none."""
    sql = SHARD_LINES.replace("?", "%s") if postgres else SHARD_LINES
    first, last = conn.exec_driver_sql(sql, (job, shard)).one()
    return None if first is None else (int(first), int(last))
