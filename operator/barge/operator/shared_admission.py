"""Admission shared by several active operators (barge/sharding.py): the deployment's turn across processes.

operator/quota.py keeps each deployment's queue in this process. When shards share the ledger (PostgreSQL), a
deployment's turn is also held across processes, by an advisory lock on the deployment's key (ledger/waiting.py),
and each decision reads every shard's waiting jobs from the ledger and what is in flight afresh. This module holds
the lock for an async turn (polled: a blocking acquire would stall every job on the engine loop) and converts the
ledger's rows to the queue's `Waiting`.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

from barge.batch import admission_queue as aq
from barge.ledger import Ledger, waiting

#: Seconds between two attempts at a deployment's lock that another shard holds.
LOCK_POLL = 0.02


@contextlib.asynccontextmanager
async def turn(ledger: Ledger, quota_key: str) -> AsyncIterator[None]:
    """The deployment's lock held across processes for the body (a decision and the creates it admits)."""
    conn = ledger.engine.connect().execution_options(isolation_level="AUTOCOMMIT")
    try:
        while not await asyncio.to_thread(waiting.try_lock, conn, quota_key):  # noqa: ASYNC110 - across processes
            await asyncio.sleep(LOCK_POLL)
        try:
            yield
        finally:
            await asyncio.to_thread(waiting.unlock, conn, quota_key)
    finally:
        conn.close()


def as_row(w: aq.Waiting, quota: aq.BatchQuota, seen: float) -> waiting.Row:
    return waiting.Row(
        w.key, w.tenant, w.priority, w.rank, w.created, w.since, seen, w.shards,
        quota.enqueued_tokens, quota.max_live_batches,
    )  # fmt: skip


def as_waiting(row: waiting.Row) -> aq.Waiting:
    return aq.Waiting(row.job, row.tenant, row.priority, row.created, row.shards, row.since, row.own_priority)


def as_quota(row: waiting.Row) -> aq.BatchQuota:
    return aq.BatchQuota(row.enqueued_tokens, row.max_live_batches)
