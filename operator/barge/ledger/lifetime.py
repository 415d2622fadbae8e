"""How long the ledger holds the text of a job: rendered prompts and model outputs, the personal data in it.

A rendered payload is needed only until its item has a final outcome, a model output only until it is written
to `output.url`. Once a job ends (results.jsonl and failures.jsonl written) its texts are dropped (its payloads
already while those files are written: `drop_payloads`), unless the job asked to keep them
(spec.retention.keepPayloadsFor / keepOutputsFor, e.g. for replays); then they are dropped by `barge ledger purge`
once that time has passed. What stays is the audit trail: items (ids, states, reasons, usage, attempts, batch
ids), batches, jobs and their timestamps; counts and cost are computed from those alone. The audit trail of a
deleted job goes too, the policy's ledger.deletedJobsKeptFor after the delete (`purge_deleted`, on the operator's
purge timer): its counts and usage are folded into per-tenant, per-model totals first, which the metrics read.

Dropped text does not linger in the database file: SQLite runs with `secure_delete` (freed space is zeroed) and
its WAL, which holds old page images, is checkpointed and truncated after a drop; PostgreSQL leaves dead tuples
until VACUUM, which autovacuum runs (README, Data retention).

`held_bytes` measures what is still held, per tenant: two aggregates that read every text, so the operator runs
them on its purge timer and the metrics export the last measurement, never a scan per scrape.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from sqlalchemy import Connection, LargeBinary, Select, cast, delete, func, or_, select, update
from sqlalchemy.sql.elements import ColumnElement

from barge import limits
from barge.ledger import Ledger, summary
from barge.ledger.schema import USAGE, items, jobs, payload_pages, payloads

FINAL = ("Succeeded", "Failed")
seconds = limits.seconds  # '30d' -> 2592000; '0s' keeps nothing


@dataclass(frozen=True)
class Held:
    """Bytes (UTF-8) of text the ledger held at `at`: (tenant, "payload" | "output") -> bytes, every tenant listed."""

    at: float
    bytes: dict[tuple[str, str], int] = field(default_factory=dict)


def held_bytes(ledger: Ledger, now: float) -> Held:
    """Rendered payloads and model outputs still in the ledger, summed per tenant (0 for a tenant with none)."""

    def size(column: ColumnElement[str]) -> ColumnElement[int]:  # octet_length is SQLite >= 3.43 only
        return func.octet_length(column) if ledger.postgres else func.length(cast(column, LargeBinary))

    legacy = select(jobs.c.tenant, func.sum(size(payloads.c.payload))).join(jobs, jobs.c.job == payloads.c.job)
    # a page's text is the UTF-8 of its payloads, one after another: its length is their bytes
    paged = select(jobs.c.tenant, func.sum(func.length(payload_pages.c.text))).join(
        jobs, jobs.c.job == payload_pages.c.job
    )
    output = select(jobs.c.tenant, func.sum(size(items.c.output))).join(jobs, jobs.c.job == items.c.job)
    held: dict[tuple[str, str], int] = {}
    with ledger.engine.connect() as conn:
        for (tenant,) in conn.execute(select(jobs.c.tenant).distinct()):
            held[(tenant, "payload")] = held[(tenant, "output")] = 0
        queries = (("payload", legacy), ("payload", paged), ("output", output.where(items.c.output.is_not(None))))
        for kind, query in queries:
            for tenant, total in conn.execute(query.group_by(jobs.c.tenant)):
                held[(tenant, kind)] += int(total or 0)
    return Held(now, held)


def keep(ledger: Ledger, job: str, now: float, keep_payloads: int, keep_outputs: int) -> None:
    """The job has ended and its outputs are written: record until when its texts are kept, drop what is due.
    The WAL is truncated whatever was dropped here: `drop_payloads` may have dropped the payloads before."""
    with ledger.engine.begin() as conn:
        conn.execute(
            update(jobs)
            .where(jobs.c.job == job)
            .values(payloads_until=now + keep_payloads, outputs_until=now + keep_outputs)
        )
    drop_texts(ledger, now, job=job, truncate=True)


def drop_payloads(ledger: Ledger, job: str) -> int:
    """The job's rendered payloads, dropped once every item has its final outcome, when the job keeps none
    (`keepPayloadsFor` 0). The caller runs it beside the writing of results.jsonl, which reads no payload: on SQLite
    the zeroing of their pages (`secure_delete`, ~0.5 s per 100,000 ~2 KB prompts) then costs the job no time. The
    WAL still holds their page images until `keep` truncates it."""
    with ledger.engine.begin() as conn:
        return _drop_payloads(conn, select(jobs.c.job).where(jobs.c.job == job))


def drop_texts(
    ledger: Ledger,
    now: float,
    *,
    job: str | None = None,
    finished_before: float | None = None,
    truncate: bool = False,
) -> tuple[int, int]:
    """Drop payloads and outputs of ended jobs past their keep time (and, with `finished_before`, of every job that
    ended before it, kept or not). Returns (payloads deleted, outputs cleared). SQLite's WAL is truncated after a
    drop, or always with `truncate`."""
    ended = jobs.c.phase.in_(FINAL)
    scope = [jobs.c.job == job] if job is not None else []
    old = [jobs.c.completed_at <= finished_before] if finished_before is not None else []
    payload_jobs = select(jobs.c.job).where(ended, *scope, or_(jobs.c.payloads_until <= now, *old))
    output_jobs = select(jobs.c.job).where(ended, *scope, or_(jobs.c.outputs_until <= now, *old))
    return _drop(ledger, payload_jobs, output_jobs, truncate)


def forget_job(ledger: Ledger, job: str, now: float | None = None) -> tuple[int, int]:
    """The LLMBatchJob was deleted: its texts go whatever its phase or keep times; its audit rows stay until
    `purge_deleted` removes them, the policy's ledger.deletedJobsKeptFor after this delete."""
    with ledger.engine.begin() as conn:
        when = time.time() if now is None else now
        conn.execute(update(jobs).where(jobs.c.job == job, jobs.c.deleted_at.is_(None)).values(deleted_at=when))
    one = select(jobs.c.job).where(jobs.c.job == job)
    return _drop(ledger, one, one)


_COUNTED = ("n", *USAGE)
_FOLD = (
    f"INSERT INTO folded_counts (tenant, model, state, via, {', '.join(_COUNTED)}) {{select}} "
    f"ON CONFLICT (tenant, model, state, via) DO UPDATE SET "
    + ", ".join(f"{c} = folded_counts.{c} + excluded.{c}" for c in _COUNTED)
)
_SUMS = ", ".join(f"COALESCE(SUM(x.{c}), 0)" for c in USAGE)
#: Item rows removed per transaction by `purge_deleted` (~5 MB of SQLite's WAL, truncated after each).
PURGE_ITEMS = 20_000
_CHUNK = "SELECT custom_id FROM items WHERE job = ? ORDER BY custom_id LIMIT {n}"
#: One chunk of a purged job's items: what they count, folded (bound: the job twice), then the same rows deleted,
#: in one transaction; so item_counts + folded_counts never changes, whenever the metrics read them.
_FOLD_ITEMS = _FOLD.format(
    select="SELECT j.tenant, j.model, x.state, x.via, COUNT(*), "  # noqa: S608
    f"{_SUMS} FROM items x JOIN jobs j ON j.job = x.job WHERE x.job = ? AND x.custom_id IN ({_CHUNK}) "
    "GROUP BY j.tenant, j.model, x.state, x.via"
)
_DELETE_ITEMS = f"DELETE FROM items WHERE job = ? AND custom_id IN ({_CHUNK})"  # noqa: S608
#: Then, with the job row (bound: the job once each): its invalid lines counted but never stored, and its
#: batches' usage (state 'batch').
_FOLD_JOB = (
    _FOLD.format(
        select="SELECT tenant, model, 'invalid', '', unlisted, 0, 0, 0, 0 FROM jobs WHERE job = ? AND unlisted > 0"
    ),
    _FOLD.format(
        select=f"SELECT j.tenant, j.model, 'batch', 'batch', COUNT(*), {_SUMS} FROM batches x "  # noqa: S608
        "JOIN jobs j ON j.job = x.job WHERE x.job = ? GROUP BY j.tenant, j.model"
    ),
)
_PURGED_TABLES = ("payload_pages", "payloads", "intents", "batches", "item_counts", "jobs")


def purge_deleted(ledger: Ledger, now: float, kept_for: float) -> int:
    """Remove every row of the jobs deleted at least `kept_for` seconds ago (the policy's ledger.deletedJobsKeptFor).
    What they counted is folded into `folded_counts`, per tenant and model, in the transactions that remove it, so
    the metrics' counters keep it (ledger/summary.py). The items go `PURGE_ITEMS` at a time, SQLite's WAL truncated
    after each transaction: a purge needs little free space, which is when it is needed. Returns the jobs purged."""
    due = select(jobs.c.job).where(jobs.c.deleted_at.is_not(None), jobs.c.deleted_at <= now - kept_for)
    with ledger.engine.connect() as conn:
        keys = [str(r[0]) for r in conn.execute(due)]
    fold_items, delete_items = (_dialect(ledger, q.format(n=PURGE_ITEMS)) for q in (_FOLD_ITEMS, _DELETE_ITEMS))
    for key in keys:
        while True:
            with ledger.engine.begin() as conn:
                conn.exec_driver_sql(fold_items, (key, key))
                removed = int(conn.exec_driver_sql(delete_items, (key, key)).rowcount or 0)
            _truncate_wal(ledger)
            if removed < PURGE_ITEMS:
                break
        with ledger.engine.begin() as conn:
            for sql in _FOLD_JOB:
                conn.exec_driver_sql(_dialect(ledger, sql), (key,))
            summary.fold(conn, ledger.postgres)  # PostgreSQL: the deletes' deltas, before the job's count rows go
            for table in _PURGED_TABLES:
                conn.exec_driver_sql(_dialect(ledger, f"DELETE FROM {table} WHERE job = ?"), (key,))  # noqa: S608
        _truncate_wal(ledger)
    return len(keys)


def _truncate_wal(ledger: Ledger) -> None:
    if not ledger.postgres:
        with ledger.engine.connect() as conn:
            conn.exec_driver_sql("PRAGMA wal_checkpoint(TRUNCATE)")


def _dialect(ledger: Ledger, sql: str) -> str:
    return sql.replace("?", "%s") if ledger.postgres else sql


def _drop_payloads(conn: Connection, payload_jobs: Select[tuple[str]]) -> int:
    paged = payload_pages.c.job.in_(payload_jobs)
    dropped = conn.execute(select(func.coalesce(func.sum(payload_pages.c.n), 0)).where(paged)).scalar_one()
    conn.execute(delete(payload_pages).where(paged))
    return int(dropped or 0) + conn.execute(delete(payloads).where(payloads.c.job.in_(payload_jobs))).rowcount


def _drop(
    ledger: Ledger, payload_jobs: Select[tuple[str]], output_jobs: Select[tuple[str]], truncate: bool = False
) -> tuple[int, int]:
    with ledger.engine.begin() as conn:
        dropped = _drop_payloads(conn, payload_jobs)
        cleared = conn.execute(
            update(items).where(items.c.job.in_(output_jobs), items.c.output.is_not(None)).values(output=None)
        ).rowcount
    if (dropped or cleared or truncate) and not ledger.postgres:  # the WAL's old page images hold the text too
        with ledger.engine.connect() as conn:
            conn.exec_driver_sql("PRAGMA wal_checkpoint(TRUNCATE)")
    return dropped, int(cleared or 0)


def counted_elsewhere(ledger: Ledger) -> dict[str, list[tuple[object, ...]]]:
    """What the metrics add to `Ledger.metric_rows`, in its shapes: purged jobs' counts (`folded_counts`), and the
    invalid lines of jobs still held that were counted but never stored (jobs.unlisted)."""
    cols = ", ".join(f"CAST(SUM({c}) AS BIGINT)" for c in USAGE)
    return {
        "items": ledger._rows(
            "SELECT tenant, model, state, CAST(SUM(n) AS BIGINT) FROM folded_counts WHERE state <> 'batch' "
            "GROUP BY tenant, model, state UNION ALL "
            "SELECT tenant, model, 'invalid', CAST(SUM(unlisted) AS BIGINT) FROM jobs WHERE unlisted > 0 "
            "GROUP BY tenant, model",
            (),
        ),
        "sync": ledger._rows(
            f"SELECT tenant, model, {cols} FROM folded_counts WHERE via = 'sync' GROUP BY tenant, model",  # noqa: S608
            (),
        ),
        "flex": ledger._rows(
            f"SELECT tenant, model, {cols} FROM folded_counts WHERE via = 'flex' GROUP BY tenant, model",  # noqa: S608
            (),
        ),
        "batch": ledger._rows(
            f"SELECT tenant, model, {cols} FROM folded_counts WHERE state = 'batch' GROUP BY tenant, model",  # noqa: S608
            (),
        ),
    }
