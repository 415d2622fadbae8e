"""A shard's items changed window by window, of lines or (SQLite, `update_keys`) of custom_ids, inside the
caller's transaction.

Why: one UPDATE of a whole shard (100,000 item rows) made SQLite hold, for that one statement, the set of rows to
change and its statement journal (kept in memory, `temp_store`, which the item-count triggers need): +25 MB of RSS
per 100k items, growing with the shard. The same rows changed in windows of lines, in the same transaction (so
exactly as atomic and durable), take the same time and a few MB whatever the shard's size.

Why windows this small: the statement journal holds a copy of every page the statement changes, and the items
table is clustered on (job, custom_id), not on the line. Consecutive lines are then scattered over the table
whenever custom_ids do not sort in line order (hashes, UUIDs, or `i1, i10, i100` sorting apart from `i2`), one
page per item: with 4 KiB pages a window of 8,192 lines held ~32 MB of journal once the table had that many pages
(a ledger of ~300,000 items and up), SQLite's heap doubled for the statement, and the freed journal chunks left
the parent's malloc heap that much larger for the rest of the run (+50 MB of peak RSS at 1M items,
bench/README.md, third round). 512 lines of 4 KiB pages: at most ~2 MB of journal, the same time per item. Ledgers
are now made with 16 KiB pages (ledger/__init__.py), so 128 lines: the same ~2 MB.
"""

from __future__ import annotations

from itertools import pairwise
from typing import Any

from sqlalchemy import Connection

WINDOW = 128  # lines per statement (each may be a page of journal: see above)

#: The custom_id that starts each window of WINDOW items, in custom_id order, among the items of a line range.
_KEY_STARTS = (
    "SELECT custom_id FROM (SELECT custom_id, ROW_NUMBER() OVER (ORDER BY custom_id) AS n FROM items "
    "WHERE job = ? AND line BETWEEN ? AND ?) WHERE n % ? = 1 ORDER BY custom_id"
)


def update_lines(conn: Connection, sql: str, params: tuple[Any, ...], first: int, last: int) -> int:
    """Run `sql` (driver SQL ending in `line BETWEEN <first> AND <last>` placeholders, `params` before them) over
    first..last in windows; the number of rows changed."""
    changed = 0
    for start in range(first, last + 1, WINDOW):
        changed += conn.exec_driver_sql(sql, (*params, start, min(last, start + WINDOW - 1))).rowcount
    return changed


def update_keys(conn: Connection, sql: str, params: tuple[Any, ...], job: str, first: int, last: int) -> int:
    """SQLite: `update_lines` in windows of WINDOW items in custom_id order, the table's own order, instead of
    line order. Lines whose custom_ids do not sort with them (hashes, UUIDs, ids of no fixed width) lie all over
    the table, so a window of lines was a page per item, and the whole shard's pages were written again and again:
    the record's move of 100,000 items with random ids took 3.4 s against 0.65 s with ids in line order
    (bench/README.md, Submission, sixth round). `sql` must steer SQLite to the primary key: no index may serve its
    other terms (write them `+state`, `+shard`); the window's key bounds and the line range (as `+line`) are added
    here. The window starts come from one sort of the range's custom_ids (ix_items_line holds them: the table is
    not read), at most a shard's worth."""
    starts = [row[0] for row in conn.exec_driver_sql(_KEY_STARTS, (job, first, last, WINDOW))]
    window = sql + " AND custom_id >= ? AND custom_id < ? AND +line BETWEEN ? AND ?"
    tail = sql + " AND custom_id >= ? AND +line BETWEEN ? AND ?"  # the last window: no upper key
    changed = 0
    for start, end in pairwise(starts):
        changed += conn.exec_driver_sql(window, (*params, start, end, first, last)).rowcount
    if starts:
        changed += conn.exec_driver_sql(tail, (*params, starts[-1], first, last)).rowcount
    return changed
