"""Second-door detection: the provider batches, on a credential Barge uses, that Barge did not create.

Why: Barge's attribution holds only while every batch on its credentials and workspaces goes through it ("the
second door reopened by convenience": one team with direct access to the deployment undoes it). Barge already
lists a credential's recent batches for orphan adoption (batch/adoption.py); this asks the same listing which of
them the ledger does not know:

| provider kind                    | a listed batch is Barge's when                                           |
| -------------------------------- | ------------------------------------------------------------------------ |
| keeps metadata (OpenAI, Azure)   | the ledger recorded its id, or it carries Barge's `barge_job` metadata   |
|                                  | (a create whose record is not yet written, or another Barge install)     |
| no metadata (Anthropic, ...)     | the ledger recorded its id; one younger than `young` seconds is not      |
|                                  | judged yet (a create of ours may be between the provider and the ledger) |

Only batches created within `window` seconds count, and at most `max_listed` are listed (a page limit: a
credential with more batches than that in the window is judged on its newest `max_listed`). Nothing here
cancels, deletes or reads a foreign batch: it is someone else's, and only listed.
"""

from __future__ import annotations

import hashlib

from barge.batch import adoption
from barge.ledger import Ledger
from barge.providers.base import BatchInfo, BatchProvider

OWN_METADATA = "barge_job"
WINDOW = 86400.0
YOUNG = adoption.CLOCK_SKEW
#: Batches listed per credential and scan at most (10 pages of 100).
MAX_LISTED = 1000


def endpoint_hash(kind: str, base_url: str, credential_digest: str) -> str:
    """A short label for a (provider, endpoint, credential): two keys on one endpoint differ, the key never shows."""
    return hashlib.sha256(f"{kind}\n{base_url.rstrip('/')}\n{credential_digest}".encode()).hexdigest()[:12]


async def foreign_batches(
    provider: BatchProvider,
    ledger: Ledger,
    now: float,
    *,
    window: float = WINDOW,
    young: float = YOUNG,
    max_listed: int = adoption.MAX_LISTED,
) -> list[BatchInfo]:
    """The batches created in the last `window` seconds on this provider client that Barge did not create."""
    since = now - window
    listed = await adoption.list_since(provider, since, max_listed=max_listed)
    recent = [b for b in listed if b.created_at.timestamp() >= since]
    known = ledger.known_batch_ids(b.id for b in recent)
    found = []
    for batch in recent:
        if batch.id in known:
            continue
        if provider.keeps_metadata:
            if batch.metadata.get(OWN_METADATA):
                continue
        elif now - batch.created_at.timestamp() < young:
            continue
        found.append(batch)
    return found
