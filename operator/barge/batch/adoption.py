"""Open intents after a crash or an uncertain create: adopt the batch the provider did create, else release.

Why apart: the ledger writes an intent before every create, so an intent still open at the next step means
"maybe created". OpenAI and Azure batches carry Barge's metadata (job tag and shard), which identifies them;
Anthropic batches carry none, so a batch created within the adoption window with the shard's request count is
taken as the shard's (results are then checked against the shard's custom ids: a batch holding none of them is
released by ingestion, never counted).
"""

from __future__ import annotations

from collections.abc import Callable

from barge.ledger import Ledger
from barge.providers.base import BatchInfo, BatchProvider

Record = Callable[[str, int, int, BatchInfo], None]
Event = Callable[[str, str, str], None]


async def reconcile_intents(
    ledger: Ledger, key: str, provider: BatchProvider, tag: str, adopt_window: float, record: Record, on_event: Event
) -> None:
    open_intents = ledger.intents_open(key)
    if not open_intents:
        return
    known = ledger.all_batch_ids()
    recent = [b for b in await provider.list_recent(100) if b.id not in known]
    for intent in open_intents:
        found = next(
            (
                b
                for b in recent
                if b.metadata.get("barge_job") == tag and b.metadata.get("barge_shard") == intent["shard"]
            ),
            None,
        )
        if found is None and provider.name == "anthropic":  # no metadata: time window + size
            start, end = intent["created_at"] - 60, intent["created_at"] + adopt_window
            found = next(
                (
                    b
                    for b in sorted(recent, key=lambda b: b.created_at)
                    if start <= b.created_at.timestamp() <= end and b.request_count == intent["requests"]
                ),
                None,
            )
        if found is not None:
            recent.remove(found)
            record(intent["shard"], intent["attempt"], intent["requests"], found)
            on_event(
                "Adopted",
                f"batch {found.id} adopted for shard {intent['shard']} (created before a crash or an uncertain answer)",
                "Normal",
            )
        else:
            ledger.abandon_intent(key, intent["shard"])
