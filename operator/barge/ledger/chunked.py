"""A shard's items changed window by window of lines, inside the caller's transaction.

Why: one UPDATE of a whole shard (100,000 item rows) made SQLite hold, for that one statement, the set of rows to
change and its statement journal (kept in memory, `temp_store`, which the item-count triggers need): +25 MB of RSS
per 100k items, growing with the shard. The same rows changed in windows of lines, in the same transaction (so
exactly as atomic and durable), take the same time and a few MB whatever the shard's size.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import Connection

WINDOW = 8192  # lines per statement


def update_lines(conn: Connection, sql: str, params: tuple[Any, ...], first: int, last: int) -> int:
    """Run `sql` (driver SQL ending in `line BETWEEN <first> AND <last>` placeholders, `params` before them) over
    first..last in windows; the number of rows changed."""
    changed = 0
    for start in range(first, last + 1, WINDOW):
        changed += conn.exec_driver_sql(sql, (*params, start, min(last, start + WINDOW - 1))).rowcount
    return changed
