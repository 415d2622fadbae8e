"""Usage per job and hour (`spend_hours`): what tenant budgets and cost reports read instead of the items.

Why a table of its own: a tenant's month-to-date spend is asked at every admission and every resubmission, and
the usage it sums lives in every item row (sync) and every batch row (batch) of every job the tenant ever ran.
So the statements that record usage (ledger/bulk.py: a batch chunk's `UPDATE batches ... + usage`, a sync page's
results) add the same figures, in the same transaction, to the row of (job, hour, via); the job's tenant, model
and provider are copied into it, so that one range of the (tenant, hour) index answers a tenant's month: a few
rows per job and hour, never a scan. A rolled-back chunk rolls its row back too; a purged job's rows stay (its
money was spent).

Reads take a `Ledger` (like ledger/lifetime.py); `record` works on the writer's DBAPI cursor inside its
transaction.
"""

# ruff: noqa: S608  (every statement here is built from the constant column names below, never from input)
from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from barge.ledger.schema import USAGE

if TYPE_CHECKING:
    from barge.ledger import Ledger

HOUR = 3600
COUNTED = ("requests", *USAGE)
_ADD = ", ".join(f"{c} = spend_hours.{c} + excluded.{c}" for c in COUNTED)
#: The job's tenant and model from `jobs`; the provider from the batch if there is one, else the job's own.
_RECORD = (
    f"INSERT INTO spend_hours (job, hour, via, tenant, model, provider, {', '.join(COUNTED)}) "
    "SELECT j.job, ?, ?, j.tenant, j.model, "
    "COALESCE((SELECT b.provider FROM batches b WHERE b.job = j.job AND b.batch_id = ?), j.provider), "
    f"?, ?, ?, ?, ? FROM jobs j WHERE j.job = ? ON CONFLICT (job, hour, via) DO UPDATE SET {_ADD}"
)


def hour_of(when: float) -> int:
    return int(when // HOUR) * HOUR


def record(
    cursor: Any,
    postgres: bool,
    job: str,
    via: str,
    batch_id: str | None,
    counted: Sequence[int],
    when: float | None = None,
) -> None:
    """Add `counted` (requests, input, output, cache read, cache write) to the job's row for the hour of `when`
    (now), with the caller's cursor in its transaction. Nothing for an all-zero change or a job the ledger does
    not hold."""
    if not any(counted):
        return
    hour = hour_of(time.time() if when is None else when)
    sql = _RECORD.replace("?", "%s") if postgres else _RECORD
    cursor.execute(sql, (hour, via, batch_id, *counted, job))


def sync_counted(rows: Sequence[Sequence[Any]], via: str = "sync") -> tuple[int, int, int, int, int]:
    """What a chunk of `bulk.ROW` rows adds on the synchronous path: the rows with `via` ('sync', or 'flex': answers
    at OpenAI's flex tier, recorded apart since they are billed at the batch rate) and usage, summed."""
    n = i = o = cr = cw = 0
    for r in rows:
        if r[5] == via and (r[7] or r[8] or r[9] or r[10]):
            n += 1
            i, o, cr, cw = i + r[7], o + r[8], cr + r[9], cw + r[10]
    return n, i, o, cr, cw


@dataclass(frozen=True, slots=True)
class SpendRow:
    """One (job, hour, via) row of usage, with what the job is tagged with."""

    job: str
    hour: int
    via: str
    tenant: str
    model: str
    provider: str
    schedule: str
    requests: int
    usage: tuple[int, int, int, int]

    @property
    def namespace(self) -> str:
        return self.job.split("/", 1)[0]


_SUMS = ", ".join(f"CAST(COALESCE(SUM({c}), 0) AS BIGINT)" for c in COUNTED)


def tenant_usage(ledger: Ledger, tenant: str, start: float, end: float) -> list[tuple[str, str, int, tuple[int, ...]]]:
    """(model, via, requests, usage) summed over the tenant's rows with hours in [start, end): one range of the
    (tenant, hour) index."""
    rows = ledger._rows(
        f"SELECT model, via, {_SUMS} FROM spend_hours WHERE tenant = ? AND hour >= ? AND hour < ? GROUP BY model, via",
        (tenant, hour_of(start), end),
    )
    return [(str(r[0]), str(r[1]), int(r[2]), tuple(int(x) for x in r[3:])) for r in rows]


def namespace_usage(
    ledger: Ledger, namespace: str, start: float, end: float
) -> list[tuple[str, str, int, tuple[int, ...]]]:
    """The same for one namespace's jobs (their keys start with `namespace/`: a range of the primary key)."""
    rows = ledger._rows(
        f"SELECT model, via, {_SUMS} FROM spend_hours WHERE job >= ? AND job < ? AND hour >= ? AND hour < ? "
        "GROUP BY model, via",
        (f"{namespace}/", f"{namespace}0", hour_of(start), end),  # '0' is the character after '/'
    )
    return [(str(r[0]), str(r[1]), int(r[2]), tuple(int(x) for x in r[3:])) for r in rows]


def all_tenants_usage(ledger: Ledger, start: float, end: float) -> list[tuple[str, str, str, tuple[int, ...]]]:
    """(tenant, model, via, usage) over every tenant for hours in [start, end) (the metrics' month to date)."""
    rows = ledger._rows(
        f"SELECT tenant, model, via, {_SUMS} FROM spend_hours WHERE hour >= ? AND hour < ? GROUP BY tenant, model, via",
        (hour_of(start), end),
    )
    return [(str(r[0]), str(r[1]), str(r[2]), tuple(int(x) for x in r[4:])) for r in rows]


def rows_between(ledger: Ledger, start: float, end: float, tenant: str | None = None) -> list[SpendRow]:
    """Every (job, hour, via) row with its hour in [start, end), optionally one tenant's, in a stable order."""
    where = "s.hour >= ? AND s.hour < ?"
    params: list[Any] = [hour_of(start), end]
    if tenant is not None:
        where += " AND s.tenant = ?"
        params.append(tenant)
    cols = ", ".join(f"s.{c}" for c in COUNTED)
    rows = ledger._rows(
        f"SELECT s.job, s.hour, s.via, s.tenant, s.model, s.provider, COALESCE(j.schedule, ''), {cols} "
        f"FROM spend_hours s LEFT JOIN jobs j ON j.job = s.job WHERE {where} ORDER BY s.hour, s.job, s.via",
        tuple(params),
    )
    return [
        SpendRow(
            str(r[0]),
            int(r[1]),
            str(r[2]),
            str(r[3]),
            str(r[4]),
            str(r[5]),
            str(r[6]),
            int(r[7]),
            (int(r[8]), int(r[9]), int(r[10]), int(r[11])),
        )
        for r in rows
    ]
