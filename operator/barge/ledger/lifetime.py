"""How long the ledger holds the text of a job: rendered prompts and model outputs, the personal data in it.

A rendered payload is needed only until its item has a final outcome, a model output only until it is written
to `output.url`. Once a job ends (results.jsonl and failures.jsonl written) its texts are dropped (its payloads
already while those files are written: `drop_payloads`), unless the job asked to keep them
(spec.retention.keepPayloadsFor / keepOutputsFor, e.g. for replays); then they are dropped by `barge ledger purge`
once that time has passed. What stays is the audit trail: items (ids, states, reasons, usage, attempts, batch
ids), batches, jobs and their timestamps; counts and cost are computed from those alone.

Dropped text does not linger in the database file: SQLite runs with `secure_delete` (freed space is zeroed) and
its WAL, which holds old page images, is checkpointed and truncated after a drop; PostgreSQL leaves dead tuples
until VACUUM, which autovacuum runs (README, Data retention).

`held_bytes` measures what is still held, per tenant: two aggregates that read every text, so the operator runs
them on its purge timer and the metrics export the last measurement, never a scan per scrape.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from sqlalchemy import Connection, LargeBinary, Select, cast, delete, func, or_, select, update
from sqlalchemy.sql.elements import ColumnElement

from barge.api.batchjob import DURATION
from barge.ledger import Ledger
from barge.ledger.schema import items, jobs, payload_pages, payloads

FINAL = ("Succeeded", "Failed")
_DURATION = re.compile(DURATION)
_UNIT = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def seconds(text: str) -> int:
    """'30d' -> 2592000 (units s, m, h, d); '0s' keeps nothing."""
    text = text.strip()
    if not _DURATION.match(text):
        raise ValueError(f"{text!r} is not a duration like 12h or 30d")
    return int(text[:-1]) * _UNIT[text[-1]]


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


def forget_job(ledger: Ledger, job: str) -> tuple[int, int]:
    """The LLMBatchJob was deleted: its texts go whatever its phase or keep times; its audit rows stay."""
    one = select(jobs.c.job).where(jobs.c.job == job)
    return _drop(ledger, one, one)


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
