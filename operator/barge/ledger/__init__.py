"""The ledger: the durable truth of every job, SQLite by default (one file, WAL) or PostgreSQL by URL.

Why a ledger: submission must be exactly-once across crashes. The engine writes an intent before it creates
a provider batch and records the batch id right after, items move between states only inside transactions,
and a batch's results and usage are ingested in the same transaction that marks it ingested, so nothing is
submitted twice, lost, or counted twice when a process dies at any point.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sqlalchemy import (
    Boolean,
    Column,
    Engine,
    Float,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    and_,
    bindparam,
    create_engine,
    event,
    func,
    insert,
    select,
    update,
)
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert

metadata = MetaData()

jobs = Table(
    "jobs",
    metadata,
    Column("job", String(400), primary_key=True),
    Column("spec_hash", String(64), nullable=False),
    Column("planned", Boolean, nullable=False, default=False),
    Column("total", Integer, nullable=False, default=0),
    Column("phase", String(32), nullable=False, default="Pending"),
    Column("fatal", Text, nullable=False, default=""),
    Column("started_at", Float),
    Column("completed_at", Float),
    Column("estimated_cost", String(40), nullable=False, default="0"),
    Column("cutoff_done", Boolean, nullable=False, default=False),
)

items = Table(
    "items",
    metadata,
    Column("job", String(400), primary_key=True),
    Column("custom_id", String(80), primary_key=True),
    Column("line", Integer, nullable=False),
    Column("item_id", Text),
    Column("state", String(16), nullable=False),
    Column("attempts", Integer, nullable=False, default=0),
    Column("shard", String(80)),
    Column("batch_id", String(120)),
    Column("error_type", String(80), nullable=False, default=""),
    Column("reason", Text, nullable=False, default=""),
    Column("payload", Text, nullable=False, default=""),
    Column("est_tokens", Integer, nullable=False, default=0),
    Column("via", String(8), nullable=False, default=""),
    Index("ix_items_line", "job", "line"),
    Index("ix_items_state", "job", "state"),
    Index("ix_items_batch", "job", "batch_id"),
    Index("ix_items_shard", "job", "shard"),
    sqlite_with_rowid=False,  # lookups and updates go by (job, custom_id): cluster the table on it
)

intents = Table(
    "intents",
    metadata,
    Column("job", String(400), primary_key=True),
    Column("shard", String(80), primary_key=True),
    Column("attempt", Integer, nullable=False),
    Column("requests", Integer, nullable=False),
    Column("state", String(16), nullable=False),  # open | created | abandoned
    Column("batch_id", String(120)),
    Column("created_at", Float, nullable=False),
)

batches = Table(
    "batches",
    metadata,
    Column("job", String(400), primary_key=True),
    Column("batch_id", String(120), primary_key=True),
    Column("shard", String(80), nullable=False),
    Column("provider", String(32), nullable=False),
    Column("attempt", Integer, nullable=False),
    Column("requests", Integer, nullable=False),
    Column("status", String(32), nullable=False, default=""),
    Column("submitted_at", Float, nullable=False),
    Column("ended_at", Float),
    Column("ingested", Boolean, nullable=False, default=False),
    Column("canceled", Boolean, nullable=False, default=False),
    Column("input_tokens", Integer, nullable=False, default=0),
    Column("output_tokens", Integer, nullable=False, default=0),
    Column("cache_read_tokens", Integer, nullable=False, default=0),
    Column("cache_write_tokens", Integer, nullable=False, default=0),
    Column("cost_usd", String(40), nullable=False, default="0"),
    Column("sync_cost_usd", String(40), nullable=False, default="0"),
)

results = Table(
    "results",
    metadata,
    Column("job", String(400), primary_key=True),
    Column("custom_id", String(80), primary_key=True),
    Column("status", String(16), nullable=False),
    Column("output", Text, nullable=False, default=""),
    Column("input_tokens", Integer, nullable=False, default=0),
    Column("output_tokens", Integer, nullable=False, default=0),
    Column("cache_read_tokens", Integer, nullable=False, default=0),
    Column("cache_write_tokens", Integer, nullable=False, default=0),
    Column("via", String(8), nullable=False),
    Column("attempt", Integer, nullable=False),
    Column("cost_usd", String(40), nullable=False, default="0"),
    Column("sync_cost_usd", String(40), nullable=False, default="0"),
    sqlite_with_rowid=False,
)

#: Item states. `submitting` = in an open intent; terminal: succeeded, refused, invalid, failed.
TERMINAL = ("succeeded", "refused", "invalid", "failed")


@dataclass(frozen=True)
class ItemUpdate:
    """A state change for one item, applied in bulk."""

    custom_id: str
    state: str
    error_type: str = ""
    reason: str = ""
    attempts: int | None = None
    via: str = ""


def normalise_url(url: str) -> str:
    """`./x.db` or `sqlite:///x.db` -> SQLite; `postgresql://` -> psycopg 3."""
    if url.startswith(("postgresql://", "postgres://")):
        return "postgresql+psycopg://" + url.split("://", 1)[1]
    if url.startswith("sqlite:"):
        return url
    path = Path(url).expanduser()
    path.parent.mkdir(parents=True, exist_ok=True)
    return f"sqlite:///{path}"


def _sqlite_pragmas(dbapi_connection: Any, _record: Any) -> None:
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA synchronous=NORMAL")  # WAL + NORMAL: durable across process crashes
    cursor.execute("PRAGMA busy_timeout=30000")
    cursor.execute("PRAGMA cache_size=-65536")  # 64 MiB of page cache: ingestion touches many pages
    cursor.close()


class Ledger:
    """Typed operations over the ledger tables. Every multi-row change is one transaction."""

    def __init__(self, url: str) -> None:
        self.url = normalise_url(url)
        self.engine: Engine = create_engine(self.url, future=True)
        self.postgres = self.engine.dialect.name == "postgresql"
        if not self.postgres:
            event.listen(self.engine, "connect", _sqlite_pragmas)
        metadata.create_all(self.engine)

    def close(self) -> None:
        self.engine.dispose()

    def _insert(self, table: Table) -> Any:
        return (pg_insert if self.postgres else sqlite_insert)(table)

    # --- jobs -----------------------------------------------------------------------------------------------
    def job(self, job: str) -> dict[str, Any] | None:
        with self.engine.connect() as conn:
            row = conn.execute(select(jobs).where(jobs.c.job == job)).mappings().first()
        return dict(row) if row else None

    def ensure_job(self, job: str, spec_hash: str) -> dict[str, Any]:
        with self.engine.begin() as conn:
            conn.execute(
                self._insert(jobs)
                .values(
                    job=job,
                    spec_hash=spec_hash,
                    planned=False,
                    total=0,
                    phase="Pending",
                    fatal="",
                    estimated_cost="0",
                    cutoff_done=False,
                )
                .on_conflict_do_nothing()
            )
        found = self.job(job)
        assert found is not None
        return found

    def set_job(self, job: str, **values: Any) -> None:
        with self.engine.begin() as conn:
            conn.execute(update(jobs).where(jobs.c.job == job).values(**values))

    # --- items ----------------------------------------------------------------------------------------------
    def add_items(self, job: str, rows: Iterable[dict[str, Any]], chunk: int = 5000) -> int:
        """Insert items (ignoring ones already there, so a re-plan after a crash is harmless)."""
        count = 0
        buffer: list[dict[str, Any]] = []

        def flush() -> None:
            if buffer:
                with self.engine.begin() as conn:
                    conn.execute(self._insert(items).on_conflict_do_nothing(), buffer)
                buffer.clear()

        for row in rows:
            buffer.append(
                {
                    "job": job,
                    "attempts": 0,
                    "shard": None,
                    "batch_id": None,
                    "via": "",
                    "error_type": "",
                    "reason": "",
                    "payload": "",
                    "est_tokens": 0,
                    "item_id": None,
                    **row,
                }
            )
            count += 1
            if len(buffer) >= chunk:
                flush()
        flush()
        return count

    def items_in(
        self, job: str, states: tuple[str, ...], *, limit: int | None = None, shard: str | None = None
    ) -> list[dict[str, Any]]:
        query = select(items).where(items.c.job == job, items.c.state.in_(states)).order_by(items.c.line)
        if shard is not None:
            query = query.where(items.c.shard == shard)
        if limit is not None:
            query = query.limit(limit)
        with self.engine.connect() as conn:
            return [dict(r) for r in conn.execute(query).mappings()]

    def iter_items(
        self, job: str, *, states: tuple[str, ...] | None = None, shard: str | None = None, batch_size: int = 5000
    ) -> Iterator[dict[str, Any]]:
        """Items in line order, read in pages (constant memory)."""
        last = 0
        while True:
            query = select(items).where(items.c.job == job, items.c.line > last).order_by(items.c.line)
            if states is not None:
                query = query.where(items.c.state.in_(states))
            if shard is not None:
                query = query.where(items.c.shard == shard)
            with self.engine.connect() as conn:
                page = [dict(r) for r in conn.execute(query.limit(batch_size)).mappings()]
            if not page:
                return
            yield from page
            last = page[-1]["line"]

    def attempts_of(self, job: str, batch_id: str) -> dict[str, int]:
        """custom_id -> attempts so far, for the items a batch holds."""
        query = select(items.c.custom_id, items.c.attempts).where(
            items.c.job == job, items.c.batch_id == batch_id, items.c.state == "submitted"
        )
        with self.engine.connect() as conn:
            return {cid: int(n) for cid, n in conn.execute(query)}

    def release(self, job: str, batch_id: str) -> None:
        """A batch turned out not to be ours: its items go back to pending, no attempt spent."""
        with self.engine.begin() as conn:
            conn.execute(
                update(items)
                .where(items.c.job == job, items.c.batch_id == batch_id, items.c.state == "submitted")
                .values(state="pending", shard=None, batch_id=None)
            )

    def counts(self, job: str) -> dict[str, int]:
        query = select(items.c.state, func.count()).where(items.c.job == job).group_by(items.c.state)
        with self.engine.connect() as conn:
            out = {state: int(n) for state, n in conn.execute(query)}
            via = conn.execute(select(func.count()).where(items.c.job == job, items.c.via == "sync")).scalar_one()
            retried = conn.execute(
                select(func.count()).where(items.c.job == job, items.c.state == "pending", items.c.attempts > 0)
            ).scalar_one()
        out["viaFallback"] = int(via)
        out["retrying"] = int(retried)
        return out

    def _sql(self, text: str) -> str:
        """Driver SQL written with ? placeholders, in the dialect's own paramstyle."""
        return text.replace("?", "%s") if self.postgres else text

    def update_items(self, job: str, changes: list[ItemUpdate], conn: Any = None) -> None:
        """Bulk state changes through the driver's executemany (SQLAlchemy's per-row processing costs 10x)."""
        if not changes:
            return
        with_attempts = [
            (c.state, c.error_type, c.reason, c.via, c.attempts, job, c.custom_id)
            for c in changes
            if c.attempts is not None
        ]
        without = [(c.state, c.error_type, c.reason, c.via, job, c.custom_id) for c in changes if c.attempts is None]

        def run(connection: Any) -> None:
            if with_attempts:
                connection.exec_driver_sql(
                    self._sql(
                        "UPDATE items SET state = ?, error_type = ?, reason = ?, via = ?, attempts = ? "
                        "WHERE job = ? AND custom_id = ?"
                    ),
                    with_attempts,
                )
            if without:
                connection.exec_driver_sql(
                    self._sql(
                        "UPDATE items SET state = ?, error_type = ?, reason = ?, via = ? "
                        "WHERE job = ? AND custom_id = ?"
                    ),
                    without,
                )

        if conn is not None:
            run(conn)
        else:
            with self.engine.begin() as connection:
                run(connection)

    # --- intents and batches ----------------------------------------------------------------------------------
    def open_intent(self, job: str, shard: str, attempt: int, custom_ids: list[str]) -> None:
        """Ledger first: the intent and the items' shard are written before the provider hears of them."""
        with self.engine.begin() as conn:
            conn.execute(
                insert(intents).values(
                    job=job,
                    shard=shard,
                    attempt=attempt,
                    requests=len(custom_ids),
                    state="open",
                    batch_id=None,
                    created_at=time.time(),
                )
            )
            conn.execute(
                update(items)
                .where(and_(items.c.job == job, items.c.custom_id == bindparam("cid")))
                .values(state="submitting", shard=shard),
                [{"cid": c} for c in custom_ids],
            )

    def intent_count(self, job: str) -> int:
        """Every intent ever opened for the job (shard names are numbered by it)."""
        with self.engine.connect() as conn:
            return int(conn.execute(select(func.count()).where(intents.c.job == job)).scalar_one())

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
        with self.engine.begin() as conn:
            conn.execute(
                self._insert(batches)
                .values(
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
                .on_conflict_do_nothing()
            )
            conn.execute(
                update(intents)
                .where(intents.c.job == job, intents.c.shard == shard)
                .values(state="created", batch_id=batch_id)
            )
            conn.execute(
                update(items)
                .where(items.c.job == job, items.c.shard == shard, items.c.state == "submitting")
                .values(state="submitted", batch_id=batch_id)
            )

    def abandon_intent(self, job: str, shard: str, state: str = "pending") -> None:
        """The create certainly failed (nothing on the provider's side): release the items."""
        with self.engine.begin() as conn:
            conn.execute(
                update(intents).where(intents.c.job == job, intents.c.shard == shard).values(state="abandoned")
            )
            conn.execute(
                update(items)
                .where(items.c.job == job, items.c.shard == shard, items.c.state == "submitting")
                .values(state=state, shard=None)
            )

    def batch_ids(self, job: str) -> set[str]:
        with self.engine.connect() as conn:
            return {r[0] for r in conn.execute(select(batches.c.batch_id).where(batches.c.job == job))}

    def all_batch_ids(self) -> set[str]:
        with self.engine.connect() as conn:
            return {r[0] for r in conn.execute(select(batches.c.batch_id))}

    def batches_of(self, job: str, *, live_only: bool = False) -> list[dict[str, Any]]:
        query = select(batches).where(batches.c.job == job).order_by(batches.c.submitted_at)
        if live_only:
            query = query.where(batches.c.ingested.is_(False))
        with self.engine.connect() as conn:
            return [dict(r) for r in conn.execute(query).mappings()]

    def set_batch(self, job: str, batch_id: str, **values: Any) -> None:
        with self.engine.begin() as conn:
            conn.execute(update(batches).where(batches.c.job == job, batches.c.batch_id == batch_id).values(**values))

    def ingest(
        self,
        job: str,
        batch_id: str,
        changes: list[ItemUpdate],
        rows: list[dict[str, Any]],
        batch_values: dict[str, Any],
    ) -> bool:
        """Apply a batch's results, its usage and `ingested` in one transaction; False if already ingested."""
        with self.engine.begin() as conn:
            done = conn.execute(
                select(batches.c.ingested).where(batches.c.job == job, batches.c.batch_id == batch_id)
            ).scalar_one()
            if done:
                return False
            self._upsert_results(conn, job, rows)
            self.update_items(job, changes, conn)
            conn.execute(
                update(batches)
                .where(batches.c.job == job, batches.c.batch_id == batch_id)
                .values(ingested=True, **batch_values)
            )
        return True

    def record_sync(self, job: str, changes: list[ItemUpdate], rows: list[dict[str, Any]]) -> None:
        with self.engine.begin() as conn:
            self._upsert_results(conn, job, rows)
            self.update_items(job, changes, conn)

    def _upsert_results(self, conn: Any, job: str, rows: list[dict[str, Any]]) -> None:
        if not rows:
            return
        names = [c.name for c in results.columns]
        updates = ", ".join(f"{n} = excluded.{n}" for n in names if n not in ("job", "custom_id"))
        sql = (
            f"INSERT INTO results ({', '.join(names)}) VALUES ({', '.join('?' for _ in names)}) "
            f"ON CONFLICT (job, custom_id) DO UPDATE SET {updates}"
        )
        conn.exec_driver_sql(self._sql(sql), [tuple({"job": job, **r}[n] for n in names) for r in rows])

    def joined_results(self, job: str, states: tuple[str, ...]) -> Iterator[tuple[Any, ...]]:
        """(line, item_id, custom_id, state, via, attempts, output, input, output, cache read, cache write tokens,
        result via, result attempt) in line order, streamed from one join."""
        query = (
            "SELECT i.line, i.item_id, i.custom_id, i.state, i.via, i.attempts, r.output, r.input_tokens, "
            "r.output_tokens, r.cache_read_tokens, r.cache_write_tokens, r.via, r.attempt FROM items i "
            "LEFT JOIN results r ON r.job = i.job AND r.custom_id = i.custom_id "
            f"WHERE i.job = ? AND i.state IN ({', '.join('?' for _ in states)}) ORDER BY i.line"
        )
        with self.engine.connect().execution_options(stream_results=True, yield_per=2000) as conn:
            yield from (tuple(row) for row in conn.exec_driver_sql(self._sql(query), (job, *states)))

    def results_by_id(self, job: str, custom_ids: Iterable[str]) -> dict[str, dict[str, Any]]:
        ids = list(custom_ids)
        out: dict[str, dict[str, Any]] = {}
        with self.engine.connect() as conn:
            for start in range(0, len(ids), 900):
                query = select(results).where(results.c.job == job, results.c.custom_id.in_(ids[start : start + 900]))
                out.update({r["custom_id"]: dict(r) for r in conn.execute(query).mappings()})
        return out

    def usage(self, job: str) -> dict[str, Any]:
        """Totals: batch usage from ingested batches, sync usage from results that came the sync way."""
        cols = ("input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens")
        with self.engine.connect() as conn:
            batch_rows = conn.execute(
                select(*(batches.c[c] for c in cols), batches.c.cost_usd, batches.c.sync_cost_usd).where(
                    batches.c.job == job, batches.c.ingested.is_(True)
                )
            ).all()
            sync_rows = conn.execute(
                select(*(results.c[c] for c in cols), results.c.cost_usd, results.c.sync_cost_usd).where(
                    results.c.job == job, results.c.via == "sync"
                )
            ).all()
        return {"batch": batch_rows, "sync": sync_rows}
