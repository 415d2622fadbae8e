"""A deployment's backoff after `token_limit_exceeded`, shared by the shards (barge/sharding.py).

With one operator process the backoff lives in its memory (operator/quota.py). With several active operators on
one PostgreSQL ledger, the shard whose batch was answered `token_limit_exceeded` (the deployment's quota is in use
outside Barge) writes the backoff here, and every shard reads it before deciding on that deployment: no shard
creates a batch on it before `until`, and the next answer doubles the backoff whichever shard hears it (its
strikes count across shards). A batch that ends well clears the row once its backoff has passed.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import delete, func, select
from sqlalchemy.dialects import postgresql, sqlite

from barge.ledger import Ledger
from barge.ledger.schema import admission_backoff


@dataclass(frozen=True, slots=True)
class Backoff:
    strikes: int
    until: float


def read(ledger: Ledger, quota_key: str) -> Backoff | None:
    t = admission_backoff
    with ledger.engine.connect() as conn:
        row = conn.execute(select(t.c.strikes, t.c.until).where(t.c.quota_key == quota_key)).first()
    return None if row is None else Backoff(int(row[0]), float(row[1]))


def strike(ledger: Ledger, quota_key: str, strikes: int, until: float) -> None:
    """The deployment backs off until `until` after its `strikes`-th answer in a row: kept as the later and the
    higher of this and what another shard wrote meanwhile (an upsert: two shards may be answered at once)."""
    t = admission_backoff
    dialect = postgresql if ledger.engine.dialect.name == "postgresql" else sqlite
    upsert = dialect.insert(t).values(quota_key=quota_key, strikes=strikes, until=until)
    excluded = upsert.excluded
    greatest = func.greatest if dialect is postgresql else func.max  # SQLite's max of two values is scalar
    upsert = upsert.on_conflict_do_update(
        index_elements=[t.c.quota_key],
        set_={"strikes": greatest(t.c.strikes, excluded.strikes), "until": greatest(t.c.until, excluded.until)},
    )
    with ledger.engine.begin() as conn:
        conn.execute(upsert)


def clear(ledger: Ledger, quota_key: str, now: float) -> None:
    """A batch on the deployment ended well: its backoff, once passed, is forgotten (the strikes start again)."""
    t = admission_backoff
    with ledger.engine.begin() as conn:
        conn.execute(delete(t).where(t.c.quota_key == quota_key, t.c.until <= now))
