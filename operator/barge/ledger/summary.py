"""Item counts kept as the ledger changes, so /metrics reads a few rows per job instead of every item.

`item_counts` holds, per (job, state, via), how many items are there and their usage summed. Triggers on `items`
keep it, in the same transaction as every change, whatever code path makes the change (plan, submit, ingest,
the synchronous path, release, retention, a crash replay): a rolled-back transaction rolls the counts back too,
and an idempotent re-apply moves nothing. SQL, not Python at each write site, so that a rewritten write path
(a bulk insert, a COPY) cannot forget it.

The two dialects keep it differently, because of what a hot row costs each:
- SQLite: a row trigger upserts the job's count row. SQLite updates a row in place, so the per-row cost is two
  B-tree steps on a small table (a few microseconds). That was still 40% of ingestion's ledger write, and 30-40%
  of the plan's item inserts and of submission's two state moves, so those bulk writers pause the insert and
  update triggers for their own statements, in their own transaction, and add the counts themselves (`add`):
  ingestion (ledger/bulk.py) changes only rows that match what a submitted item holds (state, via, usage), and if
  any row did not match it rolls the whole transaction back and applies the chunk again with the trigger on; the
  plan counts the rows it inserted by state, and if any was there already (a re-plan) it rolls back and inserts
  again with the trigger on; the intent's and the record's moves change only items with no usage and `via` ''
  while paused, and move any other item of the shard afterwards with the trigger on. So every changed row is
  known before and after. The pause is a row in `item_counts_paused`, inserted and deleted inside that
  transaction: no other writer (SQLite has one at a time) and no committed state ever sees it. For their bulk
  UPDATEs the update trigger is also dropped and created again in that transaction (`update_trigger_dropped`):
  paused, SQLite still ran its program for every row.
- PostgreSQL: every UPDATE of a row writes a new version, and versions written by a transaction that is still
  open cannot be pruned: one count row updated once per item in a 5,000-item transaction made ingestion five
  times slower. So a statement trigger appends, per statement, the net change it made (from its transition
  tables) to `item_count_deltas`, which has no index and is never updated; each scrape and the purge
  timer fold the deltas into `item_counts` (`fold`), which is exact under concurrent writers and concurrent
  folds (each delta row is deleted, and so counted, once).

A ledger written before this existed gets the table filled from a GROUP BY once, when it is first opened
(`install`, under a lock, so that no write can fall between the count and the triggers). What /metrics reads of
it, and of the few batch rows per job, is `METRIC_QUERIES`.
"""

# ruff: noqa: S608  (every statement here is built from the constant column names below, never from input)
from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from sqlalchemy import Connection, Engine

from barge.ledger.schema import USAGE

#: What is counted, beside the key (job, state, via).
COUNTED = ("n", *USAGE)
#: Bump when the triggers change: `install` then replaces them and recounts.
VERSION = "v3"
PREFIX = f"items_counts_{VERSION}_"
KEY = "job, state, via"
_ALL = f"{KEY}, {', '.join(COUNTED)}"
_ADD = ", ".join(f"{c} = item_counts.{c} + excluded.{c}" for c in COUNTED)
_CHANGED = " OR ".join(f"OLD.{c} IS NOT NEW.{c}" for c in ("job", "state", "via", *USAGE))
#: SQLite: while this table has a row, the insert and update triggers count nothing (the writer counts, see `add`).
PAUSED = "item_counts_paused"
UNPAUSED = f"NOT EXISTS (SELECT 1 FROM {PAUSED})"
PAUSE_CLAUSE = f" AND {UNPAUSED}"
_WANTED = frozenset(f"{PREFIX}{op}" for op in ("insert", "update", "delete"))


def _sqlite_triggers() -> list[str]:
    def row(sign: str, side: str) -> str:
        return f"({side}.job, {side}.state, {side}.via, {sign}1, " + ", ".join(f"{sign}{side}.{c}" for c in USAGE) + ")"

    upsert = f"INSERT INTO item_counts ({_ALL}) VALUES {{rows}} ON CONFLICT ({KEY}) DO UPDATE SET {_ADD};"
    columns = ", ".join(("job", "state", "via", *USAGE))
    plus, minus, both = (
        upsert.format(rows=r) for r in (row("", "NEW"), row("-", "OLD"), f"{row('-', 'OLD')}, {row('', 'NEW')}")
    )
    return [
        f"CREATE TABLE IF NOT EXISTS {PAUSED} (paused INTEGER NOT NULL)",
        f"CREATE TRIGGER {PREFIX}insert AFTER INSERT ON items WHEN {UNPAUSED} BEGIN {plus} END",
        f"CREATE TRIGGER {PREFIX}delete AFTER DELETE ON items BEGIN {minus} END",
        f"CREATE TRIGGER {PREFIX}update AFTER UPDATE OF {columns} ON items "
        f"WHEN ({_CHANGED}){PAUSE_CLAUSE} BEGIN {both} END",
    ]


def _pg_net(sign: str, table: str) -> str:
    sums = ", ".join(f"{sign}{c} AS {c}" for c in USAGE)
    return f"SELECT {KEY}, {sign}1 AS n, {sums} FROM {table}"


def _pg_triggers() -> list[str]:
    out = [
        "CREATE TABLE IF NOT EXISTS item_count_deltas (job VARCHAR(400) NOT NULL, state VARCHAR(16) NOT NULL, "
        "via VARCHAR(8) NOT NULL, " + ", ".join(f"{c} BIGINT NOT NULL" for c in COUNTED) + ")"
    ]
    sums = ", ".join(f"SUM({c})" for c in COUNTED)
    nonzero = " OR ".join(f"SUM({c}) <> 0" for c in COUNTED)
    sources = {
        "insert": ("REFERENCING NEW TABLE AS new_rows", _pg_net("", "new_rows")),
        "delete": ("REFERENCING OLD TABLE AS old_rows", _pg_net("-", "old_rows")),
        "update": (
            "REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows",
            f"{_pg_net('-', 'old_rows')} UNION ALL {_pg_net('', 'new_rows')}",
        ),
    }
    for op, (referencing, rows) in sources.items():
        name = f"{PREFIX}{op}"
        out.append(
            f"CREATE OR REPLACE FUNCTION {name}() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
            f"INSERT INTO item_count_deltas ({_ALL}) SELECT {KEY}, {sums} FROM ({rows}) AS x "
            f"GROUP BY {KEY} HAVING {nonzero}; RETURN NULL; END $$"
        )
        out.append(
            f"CREATE TRIGGER {name} AFTER {op.upper()} ON items {referencing} FOR EACH STATEMENT "
            f"EXECUTE FUNCTION {name}()"
        )
    return out


def _installed(conn: Connection, postgres: bool) -> set[str]:
    if postgres:
        sql = "SELECT tgname FROM pg_trigger WHERE tgrelid = 'items'::regclass"
    else:
        sql = "SELECT name FROM sqlite_master WHERE type = 'trigger' AND tbl_name = 'items'"
    return {str(r[0]) for r in conn.exec_driver_sql(sql) if str(r[0]).startswith("items_counts_")}


def install(engine: Engine, postgres: bool) -> None:
    """Triggers in place and `item_counts` exact, counted from the items once if the triggers were missing."""
    wanted = _WANTED
    with engine.connect() as conn:
        if _installed(conn, postgres) == wanted:
            return
    with engine.connect() as conn, conn.begin() as transaction:
        # Take the write lock before looking again: another process may be installing right now, and no item
        # may change between the recount and the triggers.
        if postgres:
            conn.exec_driver_sql("LOCK TABLE items IN SHARE ROW EXCLUSIVE MODE")
        conn.exec_driver_sql("DELETE FROM item_counts")
        found = _installed(conn, postgres)
        if found == wanted:
            transaction.rollback()
            return
        for name in found:
            conn.exec_driver_sql(f"DROP TRIGGER {name} ON items" if postgres else f"DROP TRIGGER {name}")
        if postgres:
            conn.exec_driver_sql("DROP TABLE IF EXISTS item_count_deltas")
        conn.exec_driver_sql(recount_sql("item_counts"))
        for ddl in _pg_triggers() if postgres else _sqlite_triggers():
            conn.exec_driver_sql(ddl)


def recount_sql(table: str) -> str:
    """Fill `table` with the counts computed from the items: the full GROUP BY the triggers spare the readers."""
    sums = ", ".join(f"SUM({c})" for c in USAGE)
    return f"INSERT INTO {table} ({_ALL}) SELECT {KEY}, COUNT(*), {sums} FROM items GROUP BY {KEY}"


def pause(cursor: Any) -> bool:
    """SQLite, in the caller's write transaction (this takes its lock): pause the insert and update triggers, if the
    installed triggers are this version's (an older Barge may have put back its own, which know no pause). `resume`
    before the transaction ends. Deletes are always counted by their trigger."""
    cursor.execute(f"INSERT INTO {PAUSED} (paused) VALUES (1)")
    cursor.execute("SELECT name FROM sqlite_master WHERE type = 'trigger' AND tbl_name = 'items'")
    if {str(r[0]) for r in cursor.fetchall() if str(r[0]).startswith("items_counts_")} == _WANTED:
        return True
    resume(cursor)
    return False


def resume(cursor: Any) -> None:
    cursor.execute(f"DELETE FROM {PAUSED}")


@contextmanager
def update_trigger_dropped(cursor: Any) -> Iterator[None]:
    """SQLite, paused (`pause`, which began the caller's write transaction and checked the triggers' version): the
    item-count update trigger dropped for the statements run inside, and created again from its own SQL before
    the transaction ends. Paused, it still cost a third of a bulk UPDATE (0.25 s CPU per 100,000 rows in
    ingestion, 0.13-0.15 s in each of submission's two moves): SQLite enters the trigger's program for every row,
    with the row's old and new values loaded for it, and evaluates the WHEN there (EXPLAIN: 240 opcodes for
    ingestion's statement with it, 97 without). DDL is transactional in SQLite: a rollback or a crash before the
    commit puts the trigger back. Not created again when an error already rolled the transaction back (SQLITE_FULL
    does; the drop went with it), so that the statement's own error is the one raised."""
    if not cursor.connection.in_transaction:  # DDL outside a transaction would commit the drop at once
        raise RuntimeError("the item-count trigger may only be dropped inside a write transaction")
    name = f"{PREFIX}update"
    cursor.execute("SELECT sql FROM sqlite_master WHERE type = 'trigger' AND name = ?", (name,))
    (sql,) = cursor.fetchone()
    cursor.execute(f"DROP TRIGGER {name}")
    try:
        yield
    finally:
        if cursor.connection.in_transaction:
            cursor.execute(str(sql))


def add(cursor: Any, postgres: bool, deltas: dict[tuple[str, str, str], list[int]]) -> None:
    """Add counted changes, (job, state, via) -> [n, usage...] as in COUNTED, to `item_counts` with the caller's DBAPI
    cursor, in its transaction (what the triggers would have added for the same rows)."""
    sql = f"INSERT INTO item_counts ({_ALL}) VALUES ({', '.join('?' for _ in (1, 2, 3, *COUNTED))}) "
    sql += f"ON CONFLICT ({KEY}) DO UPDATE SET {_ADD}"
    rows = [(*key, *change) for key, change in deltas.items() if any(change)]
    if rows:
        cursor.executemany(sql.replace("?", "%s") if postgres else sql, rows)


def fold(conn: Connection, postgres: bool) -> None:
    """PostgreSQL: move the pending deltas into `item_counts` (in the caller's transaction). SQLite: nothing."""
    if postgres:
        sums = ", ".join(f"SUM({c})" for c in COUNTED)
        conn.exec_driver_sql(
            f"WITH moved AS (DELETE FROM item_count_deltas RETURNING {_ALL}) "
            f"INSERT INTO item_counts ({_ALL}) SELECT {KEY}, {sums} FROM moved GROUP BY {KEY} "
            f"ON CONFLICT ({KEY}) DO UPDATE SET {_ADD}"
        )


_SUM_USAGE = ", ".join(f"COALESCE(SUM(x.{c}), 0)" for c in USAGE)
_COUNTED_USAGE = ", ".join(f"CAST(SUM(x.{c}) AS BIGINT)" for c in USAGE)  # PostgreSQL's SUM(bigint) is numeric
#: What /metrics reads (`Ledger.metric_rows`): name -> (SQL, parameters). Item counts and sync usage from
#: `item_counts`, never from a scan of the items; batches are few per job.
METRIC_QUERIES: dict[str, tuple[str, tuple[Any, ...]]] = {
    "items": (
        "SELECT j.tenant, j.model, c.state, CAST(SUM(c.n) AS BIGINT) FROM item_counts c "
        "JOIN jobs j ON j.job = c.job GROUP BY j.tenant, j.model, c.state HAVING SUM(c.n) > 0",
        (),
    ),
    "batch": (
        f"SELECT j.tenant, j.model, {_SUM_USAGE} FROM batches x JOIN jobs j ON j.job = x.job "
        "GROUP BY j.tenant, j.model",
        (),
    ),
    "sync": (
        f"SELECT j.tenant, j.model, {_COUNTED_USAGE} FROM item_counts x JOIN jobs j ON j.job = x.job "
        "WHERE x.via = 'sync' GROUP BY j.tenant, j.model HAVING SUM(x.n) > 0",
        (),
    ),
    "flex": (  # sync answers at OpenAI's flex tier (spec.fallback.serviceTier), billed at the batch rate
        f"SELECT j.tenant, j.model, {_COUNTED_USAGE} FROM item_counts x JOIN jobs j ON j.job = x.job "
        "WHERE x.via = 'flex' GROUP BY j.tenant, j.model HAVING SUM(x.n) > 0",
        (),
    ),
    "live": ("SELECT provider, MIN(submitted_at) FROM batches WHERE ingested = ? GROUP BY provider", (False,)),
    # per job (its key is namespace/name/uid in the operator): the tenant it is metered by
    "jobs": ("SELECT job, tenant FROM jobs", ()),
    # per job and provider: batches in which requests expired, and how many requests expired
    "expired": (
        "SELECT job, provider, SUM(CASE WHEN expired > 0 OR status = 'expired' THEN 1 ELSE 0 END), "
        "SUM(expired) FROM batches GROUP BY job, provider",
        (),
    ),
    # per tenant and provider: ingested batches by what was deleted at the provider (batch/retention.py)
    "cleanup": (
        "SELECT j.tenant, x.provider, x.cleanup, COUNT(*) FROM batches x JOIN jobs j ON j.job = x.job "
        "WHERE x.ingested = ? AND x.status NOT IN ('foreign', 'not_found') "
        "GROUP BY j.tenant, x.provider, x.cleanup",
        (True,),
    ),
}
