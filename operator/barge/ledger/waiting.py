"""The admission queues' waiting jobs in the ledger, and a deployment's advisory lock: admission shared by shards.

With one operator process the waiting list lives in its memory (operator/quota.py). With several active
operators (barge/sharding.py) on one PostgreSQL ledger, a deployment shared by tenants of different shards needs
one queue: each shard writes the jobs it steps here (`publish`), and takes the deployment's decision holding a
PostgreSQL advisory lock on the deployment's key (`try_lock`), reading every shard's waiting jobs (`fresh`) and
what is in flight (ledger/quota.py) inside it. The lock is held until the admitted batches' intents are written, so
what a shard admitted is in flight for the next shard's decision: two shards never over-admit one deployment.

A session-level lock on a connection of its own: PostgreSQL releases it if the process dies (the connection goes).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import orjson
from sqlalchemy import Connection, delete, select

from barge.ledger import Ledger
from barge.ledger.schema import admission_waiting


@dataclass(frozen=True, slots=True)
class Row:
    job: str
    tenant: str
    priority: int
    own_priority: int
    created: float
    since: float
    seen: float
    shards: tuple[int, ...]
    enqueued_tokens: int
    max_live_batches: int


def lock_id(quota_key: str) -> int:
    """The advisory lock's 64-bit key: the first 8 bytes of the deployment key's SHA-256, signed."""
    return int.from_bytes(hashlib.sha256(b"barge-admission\n" + quota_key.encode()).digest()[:8], "big", signed=True)


def try_lock(conn: Connection, quota_key: str) -> bool:
    """Take the deployment's lock on `conn` (autocommit) if no other session holds it."""
    return bool(conn.exec_driver_sql("SELECT pg_try_advisory_lock(%s)", (lock_id(quota_key),)).scalar())


def unlock(conn: Connection, quota_key: str) -> None:
    conn.exec_driver_sql("SELECT pg_advisory_unlock(%s)", (lock_id(quota_key),))


def publish(ledger: Ledger, quota_key: str, row: Row) -> None:
    """This job waits on the deployment (or still does): its row written or refreshed."""
    values = {
        "tenant": row.tenant,
        "priority": row.priority,
        "own_priority": row.own_priority,
        "created": row.created,
        "since": row.since,
        "seen": row.seen,
        "shards": orjson.dumps(list(row.shards)).decode(),
        "enqueued_tokens": row.enqueued_tokens,
        "max_live_batches": row.max_live_batches,
    }
    with ledger.engine.begin() as conn:
        done = conn.execute(
            admission_waiting.update()
            .where(admission_waiting.c.quota_key == quota_key, admission_waiting.c.job == row.job)
            .values(**values)
        ).rowcount
        if not done:
            conn.execute(admission_waiting.insert().values(quota_key=quota_key, job=row.job, **values))


def fresh(ledger: Ledger, quota_key: str, seen_after: float) -> list[Row]:
    """Every shard's jobs waiting on the deployment, refreshed after `seen_after`; older rows are removed."""
    t = admission_waiting
    with ledger.engine.begin() as conn:
        conn.execute(delete(t).where(t.c.quota_key == quota_key, t.c.seen <= seen_after))
        found = conn.execute(
            select(
                t.c.job, t.c.tenant, t.c.priority, t.c.own_priority, t.c.created, t.c.since, t.c.seen,
                t.c.shards, t.c.enqueued_tokens, t.c.max_live_batches,
            ).where(t.c.quota_key == quota_key)
        ).all()  # fmt: skip
    return [
        Row(
            str(r[0]), str(r[1]), int(r[2]), int(r[3]), float(r[4]), float(r[5]), float(r[6]),
            tuple(int(n) for n in orjson.loads(r[7])), int(r[8]), int(r[9]),
        )
        for r in found
    ]  # fmt: skip


def leave(ledger: Ledger, job: str, quota_key: str | None = None) -> None:
    """The job waits no more (on the deployment, or anywhere)."""
    t = admission_waiting
    where = [t.c.job == job] + ([t.c.quota_key == quota_key] if quota_key is not None else [])
    with ledger.engine.begin() as conn:
        conn.execute(delete(t).where(*where))
