"""How full the ledger is: the free bytes of its volume, and the item rows each tenant holds.

Why: every tenant's jobs write to one ledger, and a full one fails every write of every tenant. Planning asks
these before it starts and at every write (batch/capacity.py), and /metrics exports the free bytes with an alert
(barge_ledger_free_bytes, BargeLedgerSpaceLow). SQLite: the file's volume, from statvfs (what `df` shows; the
chart's PVC). PostgreSQL: the server's disk is not visible from here, so there is no free-space figure and no
floor; the item limits still apply, and the database's own monitoring watches its disk.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from barge.ledger import Ledger


def database_path(ledger: Ledger) -> str | None:
    """The SQLite file, or None (PostgreSQL, or an in-memory database)."""
    if ledger.postgres:
        return None
    path = ledger.engine.url.database
    return path if path and path != ":memory:" else None


def free_bytes(ledger: Ledger) -> int | None:
    """Bytes the ledger may still write on its volume: what an unprivileged writer may use there, and the database's
    own free pages (deleted rows leave them; SQLite reuses them before it grows the file). None when unknown
    (PostgreSQL)."""
    path = database_path(ledger)
    if path is None:
        return None
    stat = os.statvfs(os.path.dirname(os.path.abspath(path)))
    with ledger.engine.connect() as conn:
        pages = int(conn.exec_driver_sql("PRAGMA freelist_count").scalar_one())
        size = int(conn.exec_driver_sql("PRAGMA page_size").scalar_one())
    return int(stat.f_bavail * stat.f_frsize) + pages * size


def size_bytes(ledger: Ledger) -> int | None:
    """Bytes of the SQLite file with its WAL and shared memory (what the ledger itself takes of its volume)."""
    path = database_path(ledger)
    if path is None:
        return None
    total = 0
    for suffix in ("", "-wal", "-shm"):
        try:
            total += os.path.getsize(path + suffix)
        except OSError:
            continue
    return total


def tenant_items(ledger: Ledger, tenant: str, *, but: str = "") -> int:
    """Item rows the ledger holds for the tenant's jobs (deleted ones included until purged), leaving out job `but`.
    From `item_counts` (ledger/summary.py): a few rows per job, never a scan of the items."""
    ledger.fold_counts()
    rows = ledger._rows(
        "SELECT COALESCE(SUM(c.n), 0) FROM item_counts c JOIN jobs j ON j.job = c.job "
        "WHERE j.tenant = ? AND c.job <> ?",
        (tenant, but),
    )
    return int(rows[0][0] or 0)
