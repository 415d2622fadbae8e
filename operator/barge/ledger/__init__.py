"""The ledger: the durable truth of every job, SQLite by default (one file, WAL) or PostgreSQL by URL.

Why a ledger: submission must be exactly-once across crashes. The engine writes an intent (and moves the
shard's items to `submitting`) before it creates a provider batch, and records the batch id right after.
Results are applied chunk by chunk; each chunk moves its items out of `submitted` and adds its usage to the
batch in one transaction, so a crash mid-ingestion neither loses nor double-counts anything.

Hot paths use the driver's executemany with keyset-paginated reads: SQLAlchemy's per-row processing would
cost ten times more at 100,000 items. On SQLite the plan's rows go in as the planner process wrote them (JSON,
parsed by SQLite inside one INSERT per frame), and the plan and submission's two state moves count items
themselves with the count triggers paused (ledger/summary.py).
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
from sqlalchemy import Connection, Engine, create_engine, event, insert, inspect, select, update

from barge.ledger import bulk, moves, pages, planned, summary
from barge.ledger.planned import PLANNED, Planned
from barge.ledger.schema import ADDED_COLUMNS, TERMINAL, USAGE, WIDENED, batches, intents, items, jobs, metadata

__all__ = ["PLANNED", "TERMINAL", "ItemUpdate", "Ledger", "Planned", "normalise_url"]

PAGE = 5000
#: The advisory lock (a 64-bit key) under which a PostgreSQL ledger's schema is made or upgraded.
SCHEMA_LOCK = 0x6261726765_0001  # "barge", 1
#: `Ledger.counts`: PostgreSQL's one pass; SQLite's three reads. Retrying: pending after an attempt (lines count
#: from 1: `line > 0` keeps every item, and makes SQLite read the state's range of ix_items_state instead of every
#: item of the job, 17 ms per 100,000).
_RETRYING_ITEM = "state = 'pending' AND line > 0 AND attempts > 0"
_SYNC_N = "SUM(CASE WHEN via IN ('sync', 'flex') THEN 1 ELSE 0 END)"  # flex: the sync path at OpenAI's flex tier
_BUDGET_N = "SUM(CASE WHEN error_type = 'budget_exceeded' THEN 1 ELSE 0 END)"
#: Items whose last answer broke spec.request.responseFormat (batch/structured.py): retrying or failed.
_INVALID_OUTPUT_N = "SUM(CASE WHEN error_type = 'invalid_output' THEN 1 ELSE 0 END)"
_COUNTS = (
    f"SELECT state, COUNT(*), {_SYNC_N}, SUM(CASE WHEN {_RETRYING_ITEM} THEN 1 ELSE 0 END), {_BUDGET_N}, "  # noqa: S608
    f"{_INVALID_OUTPUT_N} FROM items WHERE job = ? GROUP BY state"
)
_STATE_COUNTS = "SELECT state, COUNT(*) FROM items WHERE job = ? GROUP BY state"
_SYNC_BUDGET = f"SELECT {_SYNC_N}, {_BUDGET_N}, {_INVALID_OUTPUT_N} FROM items WHERE job = ?"  # noqa: S608
_RETRYING = f"SELECT COUNT(*) FROM items WHERE job = ? AND {_RETRYING_ITEM}"  # noqa: S608


@dataclass(frozen=True, slots=True)
class ItemUpdate:
    """A state change for one item, with its result when it has one."""

    custom_id: str
    state: str
    error_type: str = ""
    reason: str = ""
    attempts: int | None = None
    via: str = ""
    output: str | None = None
    usage: tuple[int, int, int, int] = (0, 0, 0, 0)


def is_postgresql(url: str) -> bool:
    """A ledger URL naming a PostgreSQL server (anything else is a SQLite file)."""
    return url.startswith(("postgresql://", "postgres://"))


def normalise_url(url: str) -> str:
    """`./x.db` or `sqlite:///x.db` -> SQLite; `postgresql://` -> psycopg 3."""
    if is_postgresql(url):
        return "postgresql+psycopg://" + url.split("://", 1)[1]
    if url.startswith("sqlite:"):
        return url
    path = Path(url).expanduser()
    path.parent.mkdir(parents=True, exist_ok=True)
    return f"sqlite:///{path}"


def _sqlite_pragmas(dbapi_connection: Any, _record: Any) -> None:
    cursor = dbapi_connection.cursor()
    # New ledgers only (a file's page size is set when its first table is written): 16 KiB pages keep a ~2 KB model
    # output inside its `items` row; with 4 KiB pages SQLite moved anything over ~1 KB of a WITHOUT ROWID row to
    # overflow pages, and ingestion of ~2 KB results ran at 18,500/s instead of 29,000/s (bench/README.md).
    cursor.execute("PRAGMA page_size=16384")
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA synchronous=NORMAL")  # WAL + NORMAL: durable across process crashes
    cursor.execute("PRAGMA busy_timeout=30000")
    cursor.execute("PRAGMA cache_size=-16384")  # 16 MiB
    cursor.execute("PRAGMA secure_delete=ON")  # dropped prompts and outputs are zeroed, not left in free pages
    # Statement journals in memory: a write that fires the item-count triggers (ledger/summary.py) needs one per
    # statement, and in a temporary file it cost 13 us per row (three times an insert's own cost).
    cursor.execute("PRAGMA temp_store=MEMORY")
    cursor.execute("PRAGMA recursive_triggers=ON")  # rows an INSERT OR REPLACE deletes leave the counts too
    cursor.close()


class Ledger:
    """Typed operations over the ledger tables. Every multi-row change is one transaction."""

    def __init__(self, url: str) -> None:
        self.url = normalise_url(url)
        # hide_parameters: a driver error must never copy item text (or anything else bound) into logs or status.
        self.engine: Engine = create_engine(self.url, hide_parameters=True)
        self.postgres = self.engine.dialect.name == "postgresql"
        if not self.postgres:
            event.listen(self.engine, "connect", _sqlite_pragmas)
        with self._schema_lock():
            metadata.create_all(self.engine)
            self._add_columns()
            if self.postgres:
                self._keep_outputs_inline()
                self._widen_columns()
            summary.install(self.engine, self.postgres)

    @contextmanager
    def _schema_lock(self) -> Iterator[None]:
        """PostgreSQL: the schema is made or upgraded by one process at a time. Several shards (or replicas)
        starting at once on an empty database all ran CREATE TABLE, and all but one failed on PostgreSQL's unique
        type names (seen in bench/bench_shards.py); under a session advisory lock the others wait, then find the
        tables made. SQLite: one process owns the file."""
        if not self.postgres:
            yield
            return
        with self.engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
            conn.exec_driver_sql("SELECT pg_advisory_lock(%s)", (SCHEMA_LOCK,))
            try:
                yield
            finally:
                conn.exec_driver_sql("SELECT pg_advisory_unlock(%s)", (SCHEMA_LOCK,))

    def _add_columns(self) -> None:
        """A ledger written by an older Barge lacks columns added since: add them (create_all only makes tables)."""
        found = inspect(self.engine)
        with self.engine.begin() as conn:
            for table, column, ddl in ADDED_COLUMNS:
                if column not in {c["name"] for c in found.get_columns(table)}:
                    conn.exec_driver_sql(f"ALTER TABLE {table} ADD COLUMN {column} {ddl}")

    def _keep_outputs_inline(self) -> None:
        """PostgreSQL: an item row is TOASTed only past `bulk.ROW_INLINE` bytes, not past the default ~2 KB. A ~2 KB
        model output was compressed (pglz) and moved out of line in two chunks, each with a TOAST index entry, on
        every ingestion UPDATE: 10 WAL records per result instead of 6, and 4.4 s instead of 2.5 s for 100,000
        results of real text (bench/README.md, Ingestion). A storage parameter: set once, on old ledgers too."""
        option = f"toast_tuple_target={bulk.ROW_INLINE}"
        found = self._rows("SELECT reloptions FROM pg_class WHERE oid = 'items'::regclass", ())
        if option not in (found[0][0] or []):
            with self.engine.begin() as conn:
                conn.exec_driver_sql(f"ALTER TABLE items SET ({option})")

    def _widen_columns(self) -> None:
        """PostgreSQL: the `schema.WIDENED` columns of a ledger made before them become bigint (once: a rewrite of
        the few rows of `batches`, under its lock)."""
        narrow = self._rows(
            "SELECT table_name, column_name FROM information_schema.columns WHERE table_schema = current_schema() "
            "AND data_type = 'integer' AND table_name = 'batches'",
            (),
        )
        todo = sorted({(str(t), str(c)) for t, c in narrow} & set(WIDENED))
        if todo:
            with self.engine.begin() as conn:
                changes = ", ".join(f"ALTER COLUMN {c} TYPE bigint" for _, c in todo)
                conn.exec_driver_sql(f"ALTER TABLE batches {changes}")

    @contextmanager
    def _durable(self) -> Iterator[Connection]:
        """A transaction that is on disk when it commits, whatever happens next (power loss included): on SQLite
        the WAL is synced at this commit (synchronous=FULL), not only at checkpoints (NORMAL). Used where money
        is at stake: the submit intent and the batch record."""
        with self.engine.connect() as conn:
            if not self.postgres:
                conn.exec_driver_sql("PRAGMA synchronous=FULL")
                conn.commit()
            try:
                with conn.begin():
                    yield conn
            finally:
                if not self.postgres:
                    conn.exec_driver_sql("PRAGMA synchronous=NORMAL")
                    conn.commit()

    def close(self) -> None:
        self.engine.dispose()

    def _sql(self, text: str) -> str:
        """Driver SQL written with ? placeholders, in the dialect's own paramstyle."""
        return text.replace("?", "%s") if self.postgres else text

    def _rows(self, sql: str, params: tuple[Any, ...]) -> list[tuple[Any, ...]]:
        """Plain tuples straight from the driver's cursor (no Row objects: this is the read hot path)."""
        with self.engine.connect() as conn:
            cursor = conn.connection.dbapi_connection.cursor()  # type: ignore[union-attr]
            try:
                cursor.execute(self._sql(sql), params)
                return [tuple(r) for r in cursor.fetchall()]
            finally:
                cursor.close()

    # --- jobs -------------------------------------------------------------------------------------------------
    def job(self, job: str) -> dict[str, Any] | None:
        with self.engine.connect() as conn:
            row = conn.execute(select(jobs).where(jobs.c.job == job)).mappings().first()
        return dict(row) if row else None

    def ensure_job(
        self, job: str, spec_hash: str, tenant: str = "", model: str = "", *, provider: str = "", schedule: str = ""
    ) -> dict[str, Any]:
        found = self.job(job)
        if found is None:
            with self.engine.begin() as conn:
                conn.exec_driver_sql(
                    self._sql(
                        "INSERT INTO jobs (job, spec_hash, tenant, model, planned, total, phase, fatal, cutoff_done, "
                        "provider, schedule) VALUES (?, ?, ?, ?, ?, 0, 'Pending', '', ?, ?, ?) "
                        "ON CONFLICT (job) DO NOTHING"
                    ),
                    (job, spec_hash, tenant, model, False, False, provider, schedule),
                )
            found = self.job(job)
        assert found is not None
        return found

    def set_job(self, job: str, **values: Any) -> None:
        with self.engine.begin() as conn:
            conn.execute(update(jobs).where(jobs.c.job == job).values(**values))

    # --- items ------------------------------------------------------------------------------------------------
    def add_items(self, job: str, rows: Iterable[dict[str, Any]]) -> int:
        """Insert items (and payloads) given as dicts, ignoring ones already there (a re-plan after a crash is
        harmless). The planner's rows take `add_frames`."""
        count = 0
        buffer: list[Planned] = []
        texts: list[tuple[int, str]] = []

        def flush() -> None:
            page = pages.build(texts)
            self.add_planned(job, buffer, [page] if page else [])
            buffer.clear()
            texts.clear()

        for r in rows:
            buffer.append(
                (
                    r["custom_id"],
                    r["line"],
                    r.get("item_id"),
                    r["state"],
                    r.get("error_type", ""),
                    r.get("reason", ""),
                    r.get("est_tokens", 0),
                    r.get("size", 0),
                )
            )
            if r.get("payload") is not None:
                texts.append((r["line"], r["payload"]))
            count += 1
            if len(buffer) >= PAGE:
                flush()
        if buffer:
            flush()
        return count

    def add_planned(self, job: str, rows: Sequence[Sequence[Any]], payload_pages: Sequence[pages.Page]) -> int:
        """Items (`PLANNED` sequences) and their payload pages in one transaction, ignoring ones already there (a
        re-plan after a crash writes the same lines again); ledger/planned.py."""
        if not self.postgres:
            return self.add_frames(job, [orjson.dumps(rows)] if rows else [], payload_pages)
        with self.engine.begin() as conn:
            planned.insert_pg(conn, job, rows, payload_pages)
        return len(rows)

    def add_frames(self, job: str, frames: Sequence[bytes], payload_pages: Sequence[pages.Page]) -> int:
        """`add_planned` of rows as the planner process sends them: frames, each a JSON array of `PLANNED` lists.
        SQLite inserts each frame with one statement and counts the rows itself, the count triggers paused
        (ledger/summary.py); if any row was there already (a re-plan), the transaction is rolled back and written
        again with the triggers on. The number of rows offered."""
        if self.postgres:
            return self.add_planned(job, [row for frame in frames for row in orjson.loads(frame)], payload_pages)
        with self.engine.connect() as conn:
            with conn.begin() as transaction:
                offered = planned.insert_frames(conn, job, frames, payload_pages, count=True)
                if offered is not None:
                    return offered
                transaction.rollback()
            with conn.begin():
                offered = planned.insert_frames(conn, job, frames, payload_pages, count=False)
        assert offered is not None
        return offered

    def iter_items(
        self,
        job: str,
        columns: str,
        states: tuple[str, ...],
        *,
        shard: str | None = None,
        unsized: bool = False,
        page_size: int = PAGE,
    ) -> Iterator[tuple[Any, ...]]:
        """`line, <columns>` of the items in `states`, in line order, one short query per page (keyset).
        Asking for `payload` reads the payload pages (ledger/pages.py) and leaves out items without one (dropped,
        or never rendered); `unsized` keeps only items whose size is not recorded."""
        names = [c.strip() for c in columns.split(",")]
        at = names.index("payload") + 1 if "payload" in names else 0
        selected = ", ".join("NULL" if n == "payload" else n for n in names)
        where = f"job = ? AND state IN ({', '.join('?' for _ in states)})" + (" AND shard = ?" if shard else "")
        where += " AND size = 0" if unsized else ""
        sql = (
            f"SELECT line, {selected} FROM items WHERE {where} AND line > ? "  # noqa: S608
            f"ORDER BY line LIMIT {int(page_size)}"
        )
        params = (job, *states, *((shard,) if shard else ()))
        reader = pages.PayloadReader(self._rows, job) if at else None
        last = 0
        while True:
            page = self._rows(sql, (*params, last))
            if not page:
                return
            last = page[-1][0]
            if reader is None:
                yield from page
            else:
                texts = reader.lookup([r[0] for r in page])
                for r in page:
                    text = texts.get(r[0])
                    if text is not None:
                        yield (*r[:at], text, *r[at + 1 :])
                del texts
            del page  # one page held at a time

    def counts(self, job: str) -> dict[str, int]:
        """Items per state, and `viaFallback`, `retrying`, `budget`. PostgreSQL: one pass over the job's rows (four
        took 0.45 s a call for 100,000 ~2 KB results, 0.17 s now). SQLite: the states and the retrying items from
        `ix_items_state` (8 ms), the other two in one pass over the rows (two before: 0.06 s instead of 0.1 s)."""
        out: dict[str, int] = {"viaFallback": 0, "retrying": 0, "budget": 0, "invalidOutput": 0}
        if self.postgres:
            for state, n, sync, retrying, budget, bad in self._rows(_COUNTS, (job,)):
                out[state] = int(n)
                out["viaFallback"] += int(sync)
                out["retrying"] += int(retrying)
                out["budget"] += int(budget)
                out["invalidOutput"] += int(bad)
        else:
            out.update((s, int(n)) for s, n in self._rows(_STATE_COUNTS, (job,)))
            out["retrying"] = int(self._rows(_RETRYING, (job,))[0][0])
            sync, budget, bad = self._rows(_SYNC_BUDGET, (job,))[0]
            out["viaFallback"], out["budget"], out["invalidOutput"] = int(sync or 0), int(budget or 0), int(bad or 0)
        # invalid lines counted, not stored (batch/capacity.py): they are invalid items all the same
        unlisted = self._rows("SELECT unlisted FROM jobs WHERE job = ?", (job,))
        if unlisted and unlisted[0][0]:
            out["invalid"] = out.get("invalid", 0) + int(unlisted[0][0])
        return out

    def set_sizes(self, job: str, sizes: list[tuple[int, str]]) -> None:
        """Record encoded sizes, (size, custom_id) pairs, of items planned before sizes were kept."""
        if sizes:
            with self.engine.begin() as conn:
                conn.exec_driver_sql(
                    self._sql("UPDATE items SET size = ? WHERE job = ? AND custom_id = ?"),
                    [(n, job, cid) for n, cid in sizes],
                )

    def estimate_inputs(self, job: str, states: tuple[str, ...]) -> tuple[int, int]:
        """(sum of estimated input tokens, item count) over `states`."""
        row = self._rows(
            f"SELECT COALESCE(SUM(est_tokens), 0), COUNT(*) FROM items WHERE job = ? AND state IN "  # noqa: S608
            f"({', '.join('?' for _ in states)})",
            (job, *states),
        )[0]
        return int(row[0]), int(row[1])

    def apply(self, job: str, changes: list[ItemUpdate], batch_id: str | None = None) -> None:
        """Item changes (with their results) and, for a batch, their usage: one transaction."""
        if changes:
            rows = [
                (c.custom_id, c.state, c.error_type, c.reason, c.attempts, c.via, c.output, *c.usage) for c in changes
            ]
            self.apply_rows(job, rows, batch_id)

    def apply_rows(self, job: str, rows: list[bulk.Row], batch_id: str | None = None) -> None:
        """`apply` for rows already in `bulk.ROW` order (the ingestion hot path builds no ItemUpdate). A batch's rows
        are first tried as moves of submitted items, which SQLite counts faster (ledger/bulk.py). A NUL in a row's
        provider text is stored as U+FFFD (`bulk.nul_free`)."""
        if not rows:
            return
        rows = bulk.nul_free(rows)
        if batch_id is not None and not self.postgres:
            with self.engine.connect() as conn, conn.begin() as transaction:
                if bulk.apply(conn, self.postgres, job, rows, batch_id, submitted=True):
                    return
                transaction.rollback()  # some row matched no submitted item: nothing of it is kept
        with self.engine.begin() as conn:
            bulk.apply(conn, self.postgres, job, rows, batch_id)

    # --- intents and batches ----------------------------------------------------------------------------------
    def intent_count(self, job: str) -> int:
        """Every intent ever opened for the job (shard names are numbered by it)."""
        return int(self._rows("SELECT COUNT(*) FROM intents WHERE job = ?", (job,))[0][0])

    def open_intent(self, job: str, shard: str, attempt: int, first_line: int, last_line: int, count: int) -> None:
        """Ledger first: the intent, and the shard's items (pending, lines first..last) moved to `submitting`,
        before the provider hears of them."""
        with self._durable() as conn:
            conn.execute(
                insert(intents).values(
                    job=job,
                    shard=shard,
                    attempt=attempt,
                    requests=count,
                    state="open",
                    batch_id=None,
                    created_at=time.time(),
                )
            )
            lines, states = (first_line, last_line), ("pending", "submitting")
            moved = moves.move(conn, self.postgres, job, moves.TO_SUBMITTING, (shard, job), lines, states)
            if moved != count:
                raise RuntimeError(f"shard {shard}: expected {count} pending items, found {moved}")

    def intents_open(self, job: str) -> list[dict[str, Any]]:
        query = select(intents).where(intents.c.job == job, intents.c.state == "open").order_by(intents.c.shard)
        with self.engine.connect() as conn:
            return [dict(r) for r in conn.execute(query).mappings()]

    def record_batch(
        self,
        job: str,
        shard: str,
        batch_id: str,
        provider: str,
        attempt: int,
        requests: int,
        status: str,
        submitted_at: float,
    ) -> None:
        """The batch id, recorded before anything else happens (one transaction)."""
        with self._durable() as conn:
            conn.execute(
                insert(batches).values(
                    job=job,
                    batch_id=batch_id,
                    shard=shard,
                    provider=provider,
                    attempt=attempt,
                    requests=requests,
                    status=status,
                    submitted_at=submitted_at,
                    ingested=False,
                    canceled=False,
                )
            )
            conn.execute(
                update(intents)
                .where(intents.c.job == job, intents.c.shard == shard)
                .values(state="created", batch_id=batch_id)
            )
            lines = moves.shard_lines(conn, self.postgres, job, shard)
            if lines is not None:
                states = ("submitting", "submitted")
                moves.move(conn, self.postgres, job, moves.TO_SUBMITTED, (batch_id, job, shard), lines, states)

    def abandon_intent(self, job: str, shard: str) -> None:
        """The create certainly did not land: release the items to pending."""
        with self._durable() as conn:
            conn.execute(
                update(intents).where(intents.c.job == job, intents.c.shard == shard).values(state="abandoned")
            )
            conn.execute(
                update(items)
                .where(items.c.job == job, items.c.shard == shard, items.c.state == "submitting")
                .values(state="pending", shard=None)
            )

    def known_batch_ids(self, ids: Iterable[str]) -> set[str]:
        """Those of `ids` some job of the ledger recorded: one short query per 500 ids, instead of every batch id
        ever recorded loaded at each reconcile with an open intent (REVIEW-3 L5)."""
        wanted = sorted(set(ids))
        found: set[str] = set()
        with self.engine.connect() as conn:
            for start in range(0, len(wanted), 500):
                part = wanted[start : start + 500]
                found.update(r[0] for r in conn.execute(select(batches.c.batch_id).where(batches.c.batch_id.in_(part))))
        return found

    def batches_of(self, job: str, *, live_only: bool = False) -> list[dict[str, Any]]:
        query = select(batches).where(batches.c.job == job).order_by(batches.c.submitted_at, batches.c.shard)
        if live_only:
            query = query.where(batches.c.ingested.is_(False))
        with self.engine.connect() as conn:
            return [dict(r) for r in conn.execute(query).mappings()]

    def set_batch(self, job: str, batch_id: str, **values: Any) -> None:
        with self.engine.begin() as conn:
            conn.execute(update(batches).where(batches.c.job == job, batches.c.batch_id == batch_id).values(**values))

    def submitted_of(self, job: str, batch_id: str) -> dict[str, int]:
        """custom_id -> attempts so far, for the items the batch still holds (not yet ingested)."""
        return {
            cid: int(n)
            for cid, n in self._rows(
                "SELECT custom_id, attempts FROM items WHERE job = ? AND batch_id = ? AND state = 'submitted'",
                (job, batch_id),
            )
        }

    def members_of(self, job: str, batch_id: str) -> set[str]:
        """Every custom_id the batch was created with, whatever its state now."""
        return {r[0] for r in self._rows("SELECT custom_id FROM items WHERE job = ? AND batch_id = ?", (job, batch_id))}

    def release(self, job: str, batch_id: str) -> None:
        """A batch turned out not to be ours: its items go back to pending, no attempt spent."""
        with self.engine.begin() as conn:
            conn.execute(
                update(items)
                .where(items.c.job == job, items.c.batch_id == batch_id, items.c.state == "submitted")
                .values(state="pending", shard=None, batch_id=None)
            )

    def usage(self, job: str) -> tuple[tuple[int, ...], tuple[int, ...]]:
        """(batch usage, sync usage) totals, each (input, output, cache read, cache write). Synchronous answers
        served at OpenAI's flex tier (via 'flex') are billed at the batch rate: they count with the batch usage."""
        cols = ", ".join(f"COALESCE(SUM({c}), 0)" for c in USAGE)
        batch = self._rows(f"SELECT {cols} FROM batches WHERE job = ?", (job,))[0]  # noqa: S608
        flex = self._rows(f"SELECT {cols} FROM items WHERE job = ? AND via = 'flex'", (job,))[0]  # noqa: S608
        sync = self._rows(f"SELECT {cols} FROM items WHERE job = ? AND via = 'sync'", (job,))[0]  # noqa: S608
        return tuple(int(x) + int(y) for x, y in zip(batch, flex, strict=True)), tuple(int(x) for x in sync)

    # --- metrics (aggregates over every job, for Prometheus) ------------------------------------------------------
    def fold_counts(self) -> None:
        """PostgreSQL: fold the item-count deltas the triggers appended into `item_counts` (ledger/summary.py).
        Each scrape does, and the purge timer, so that they stay few where nothing scrapes."""
        if self.postgres:
            with self.engine.begin() as conn:
                summary.fold(conn, self.postgres)

    def metric_rows(self, only: tuple[str, ...] = ()) -> dict[str, list[tuple[Any, ...]]]:
        """Item counts and sync usage come from `item_counts` (ledger/summary.py), never from a scan of the items.
        `only`: just those of `summary.METRIC_QUERIES` (a shard other than 0 reads only the jobs' tenants)."""
        if only:
            return {name: self._rows(*summary.METRIC_QUERIES[name]) for name in only}
        self.fold_counts()
        return {name: self._rows(sql, params) for name, (sql, params) in summary.METRIC_QUERIES.items()}
