"""Open intents after a crash or an uncertain create: adopt the batch the provider did create, else release.

Why apart: the ledger writes an intent before every create, so an intent still open at the next step means
"maybe created". OpenAI and Azure batches carry Barge's metadata (job tag and shard), which identifies them.
Anthropic batches carry none: a batch created within the adoption window with the shard's request count is a
candidate. One candidate is adopted at once (ingestion still releases it if none of its ids are the shard's).
Several candidates mean another job on the same workspace may have crashed at the same moment with a shard of
the same size: then a candidate is adopted only once its results show one of the shard's own custom ids; until
they exist the intent stays open (its items wait, nothing is resubmitted), and a candidate whose results hold
none of them is left for its owner. Past the deadline cut-off a still-waiting intent is released. The listing
goes back as far as the oldest open intent needs, not a fixed 100.
"""

from __future__ import annotations

from collections.abc import Callable

from barge.ledger import Ledger
from barge.providers.base import BatchInfo, BatchProvider
from barge.providers.errors import Transient
from barge.providers.jsonl import UNREADABLE

Record = Callable[[str, int, int, BatchInfo], None]
Event = Callable[[str, str, str], None]
MAX_LISTED = 100_000


async def list_since(provider: BatchProvider, since: float) -> list[BatchInfo]:
    """Batches created after `since` (newest first), listing further back until the window is covered."""
    limit = 100
    while True:
        listed = await provider.list_recent(limit)
        if len(listed) < limit or limit >= MAX_LISTED or min(b.created_at.timestamp() for b in listed) < since:
            return [b for b in listed if b.created_at.timestamp() >= since]
        limit *= 10


async def _holds_shard(ledger: Ledger, key: str, shard: str, provider: BatchProvider, batch: BatchInfo) -> bool:
    """Whether an ended batch's results name an item of this shard (only the first readable result is read). Results
    that hold only unreadable lines (providers/jsonl.py) say nothing: Transient, and the intent stays open, since
    calling the batch not ours would create the shard a second time."""
    mine = {cid for _, cid in ledger.iter_items(key, "custom_id", ("submitting",), shard=shard)}
    results = provider.results(batch.id)
    unreadable = 0
    try:
        async for result in results:
            if not result.custom_id and result.error_type == UNREADABLE:
                unreadable += 1
                continue
            return result.custom_id in mine
        if unreadable:
            raise Transient(f"no result of batch {batch.id} could be read: whether it holds shard {shard} is unknown")
        return False
    finally:
        close = getattr(results, "aclose", None)
        if close is not None:
            await close()


async def reconcile_intents(
    ledger: Ledger,
    key: str,
    provider: BatchProvider,
    tag: str,
    adopt_window: float,
    record: Record,
    on_event: Event,
    *,
    give_up: bool = False,
) -> None:
    """`give_up` (past the deadline cut-off): an Anthropic intent whose candidates have not ended is released."""
    open_intents = ledger.intents_open(key)
    if not open_intents:
        return
    known = ledger.all_batch_ids()
    since = min(i["created_at"] for i in open_intents) - 60
    recent = [b for b in await list_since(provider, since) if b.id not in known]
    for intent in open_intents:
        shard = intent["shard"]
        found = next(
            (b for b in recent if b.metadata.get("barge_job") == tag and b.metadata.get("barge_shard") == shard),
            None,
        )
        waiting = False
        if found is None and provider.name == "anthropic":  # no metadata: window + size, confirmed by result ids
            start, end = intent["created_at"] - 60, intent["created_at"] + adopt_window
            candidates = [
                b
                for b in sorted(recent, key=lambda b: b.created_at)
                if start <= b.created_at.timestamp() <= end and b.request_count == intent["requests"]
            ]
            if len(candidates) == 1 and not candidates[0].ended:
                found = candidates[0]  # unambiguous; ingestion still releases it if its ids are not ours
            for candidate in candidates if found is None else []:
                if not candidate.ended:
                    waiting = True  # ambiguous (another job's crash?): decide once its results exist
                elif await _holds_shard(ledger, key, shard, provider, candidate):
                    found = candidate
                    break
        if found is not None:
            recent.remove(found)
            record(shard, intent["attempt"], intent["requests"], found)
            on_event(
                "Adopted",
                f"batch {found.id} adopted for shard {shard} (created before a crash or an uncertain answer)",
                "Normal",
            )
        elif waiting and not give_up:
            on_event("AdoptionPending", f"shard {shard}: a batch that may be ours has not ended yet; waiting", "Normal")
        else:
            ledger.abandon_intent(key, shard)
