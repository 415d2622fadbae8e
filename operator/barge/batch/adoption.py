"""Open intents after a crash or an uncertain create: adopt the batch the provider did create, else release.

Why apart: the ledger writes an intent before every create, so an intent still open at the next step means
"maybe created". OpenAI and Azure batches carry Barge's metadata (job tag and shard), which identifies them
whatever their time: the operator's clock is not compared with the provider's for them (a clock minutes fast
used to release a batch that had landed, and the shard was sent and billed twice). The listing goes back as far
as the oldest open intent needs, `CLOCK_SKEW` more, and stops early once every intent's batch is found.

Anthropic batches carry none, nor are an openai-compatible service's trusted to (`keeps_metadata` False): a batch
created within the adoption window (widened by `CLOCK_SKEW` both ways) with the shard's request count (or none:
Together lists no counts) is a candidate, and a candidate is adopted only once it has ended and every
readable result names one of the shard's own custom ids, even a lone one (another ledger on the same
workspace, a staging operator or `barge run` with a shared key, may have a batch of the same size; a lone
candidate used to be taken at once). Until then the intent stays open (its items wait, nothing is resubmitted),
and a candidate whose results name any other id is left for its owner. Past the deadline cut-off a
still-waiting intent is released. Two ledgers whose shards hold the very same custom ids cannot be told apart
by Anthropic's API (results echo only the custom id), so a batch adopted this way is never deleted by Barge's
cleanup: its `cleanup` is `kept` and the provider's copy ages out (29 days); it may be its owner's.
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
#: Seconds the operator's clock (intents) and the provider's (batches) may differ by: VMs after a suspend or a
#: live migration, a broken NTP.
CLOCK_SKEW = 600.0
#: `cleanup` of a batch adopted on Anthropic by its results' ids alone: retention never deletes it.
KEPT = "kept"


async def list_since(
    provider: BatchProvider,
    since: float,
    done: Callable[[list[BatchInfo]], bool] = lambda _: False,
    *,
    max_listed: int = MAX_LISTED,
) -> list[BatchInfo]:
    """Batches newest first, listing further back until the oldest is before `since` (the provider's clock,
    compared only to decide how far to list) or `done` says all that was looked for is there, `max_listed` at
    most. Not filtered."""
    limit = min(100, max_listed)
    while True:
        listed = await provider.list_recent(limit)
        if (
            len(listed) < limit
            or limit >= max_listed
            or min(b.created_at.timestamp() for b in listed) < since
            or done(listed)
        ):
            return listed
        limit = min(limit * 10, max_listed)


async def _holds_shard(ledger: Ledger, key: str, shard: str, provider: BatchProvider, batch: BatchInfo) -> bool:
    """Whether every readable result of an ended batch names an item of this shard (one that does not: another
    job's batch, which may share some ids). Results that hold only unreadable lines (providers/jsonl.py) say
    nothing: Transient, and the intent stays open, since calling the batch not ours would create the shard a
    second time."""
    mine = {cid for _, cid in ledger.iter_items(key, "custom_id", ("submitting",), shard=shard)}
    results = provider.results(batch.id)
    unreadable = read = 0
    try:
        async for result in results:
            if not result.custom_id and result.error_type == UNREADABLE:
                unreadable += 1
                continue
            if result.custom_id not in mine:
                return False
            read += 1
        if unreadable and not read:
            raise Transient(f"no result of batch {batch.id} could be read: whether it holds shard {shard} is unknown")
        return read > 0
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
    since = min(i["created_at"] for i in open_intents) - CLOCK_SKEW
    shards = {i["shard"] for i in open_intents}

    def all_found(listed: list[BatchInfo]) -> bool:  # metadata found for every open intent: no need to list further
        return shards <= {b.metadata.get("barge_shard") for b in listed if b.metadata.get("barge_job") == tag}

    listed = await list_since(provider, since, all_found)
    known = ledger.known_batch_ids(b.id for b in listed)  # not every batch id ever recorded (L5)
    recent = [b for b in listed if b.id not in known]
    for intent in open_intents:
        shard = intent["shard"]
        found = next(
            (b for b in recent if b.metadata.get("barge_job") == tag and b.metadata.get("barge_shard") == shard),
            None,
        )
        waiting = confirmed_by_ids = False
        if found is None and not provider.keeps_metadata:  # no metadata: window + size, confirmed by result ids
            start = intent["created_at"] - CLOCK_SKEW
            end = intent["created_at"] + adopt_window + CLOCK_SKEW
            candidates = [
                b
                for b in sorted(recent, key=lambda b: b.created_at)
                if start <= b.created_at.timestamp() <= end and b.request_count in (intent["requests"], None)
            ]
            for candidate in candidates:  # even a lone one: it may be another ledger's batch of the same size
                if not candidate.ended:
                    waiting = True  # decide once its results exist
                elif await _holds_shard(ledger, key, shard, provider, candidate):
                    found, confirmed_by_ids = candidate, True
                    break
        if found is not None:
            recent.remove(found)
            record(shard, intent["attempt"], intent["requests"], found)
            if confirmed_by_ids:
                ledger.set_batch(key, found.id, cleanup=KEPT)
            on_event(
                "Adopted",
                f"batch {found.id} adopted for shard {shard} (created before a crash or an uncertain answer)"
                + ("; identified by its results' custom ids only, so its provider copy is kept" * confirmed_by_ids),
                "Normal",
            )
        elif waiting and not give_up:
            on_event("AdoptionPending", f"shard {shard}: a batch that may be ours has not ended yet; waiting", "Normal")
        else:
            ledger.abandon_intent(key, shard)
