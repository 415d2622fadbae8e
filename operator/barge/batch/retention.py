"""Provider cleanup: what Barge deletes at the provider once a job's results are its own.

Results are copied to `output.url` and the ledger as batches end, but the provider keeps the uploaded prompts and
the model outputs (OpenAI and Azure files until they expire, Anthropic batches 29 days) unless told otherwise. For
personal data the safest copy is the one that no longer exists, so by default, once the job has ended (its
results.jsonl and failures.jsonl are written from the ledger), every ingested batch's provider objects are deleted.

Crash safety comes from the ledger, not from memory: a batch marked `ingested` with `cleanup` still empty *is* the
pending cleanup, recorded in the same transaction that records the ingestion. A process killed between ingestion
and deletion finds it again on the next step; deletion is idempotent (what is already gone counts as deleted).
The runner deletes only after results.jsonl and failures.jsonl are written, and records the job's final phase
only once nothing is pending: a transient failure keeps the job running and is retried on the next step. A
refusal (permission, bad request) is not retried: the batch is marked `failed` and a Warning says what was kept.

| batch in the ledger                          | cleanup at job end                                      |
| -------------------------------------------- | ------------------------------------------------------- |
| ingested, ours                               | delete files (OpenAI, Azure) or the batch (Anthropic)   |
| released as foreign, or lost at the deadline | none: not ours, or the provider does not know it        |
| not ingested (a failed job left it running)  | none: a running batch is not deleted                    |
| retention.deleteProviderCopies false         | marked kept                                             |
| the provider refuses the deletion            | marked failed, Warning event (the copies age out there) |
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

from barge.api.batchjob import RetentionSpec
from barge.batch import failpoints
from barge.batch.bounded import bound
from barge.ledger import Ledger, lifetime
from barge.providers.base import BatchProvider
from barge.providers.errors import ProviderError, Transient

log = logging.getLogger("barge.batch")
Event = Callable[[str, str, str], None]
DAY = 86400
#: ledger batch statuses of batches that are not (or no longer) ours to delete
NOT_OURS = frozenset({"foreign", "not_found"})
#: `cleanup` of batches recorded before Barge had cleanups: cleaned if their job is stepped again (jobs still running
#: at the upgrade), but not counted as pending, since jobs that had ended are never stepped again
LEGACY = "legacy"


@dataclass(frozen=True)
class Cleanup:
    deleted: int = 0
    """Provider objects deleted in this pass."""
    pending: int = 0
    """Batches whose deletion failed transiently and will be retried."""


def choose(spec: RetentionSpec, delete_default: bool, days_default: int) -> tuple[bool, int]:
    """(delete provider copies?, days OpenAI/Azure keep output files): the job's choice, else the operator's."""
    delete = delete_default if spec.delete_provider_copies is None else spec.delete_provider_copies
    return delete, spec.output_expires_after_days or days_default


def drop_texts(ledger: Ledger, job: str, spec: RetentionSpec, now: float) -> None:
    """The job has ended with its outputs written: its prompts and outputs leave the ledger (or wait for their
    keep times, spec.retention.keepPayloadsFor / keepOutputsFor). See ledger/lifetime.py."""
    payloads, outputs = lifetime.seconds(spec.keep_payloads_for), lifetime.seconds(spec.keep_outputs_for)
    lifetime.keep(ledger, job, now, payloads, outputs)


def drops_payloads_early(spec: RetentionSpec) -> bool:
    """Whether the job's payloads may go as soon as every item has its final outcome, before its outputs are
    written (`lifetime.drop_payloads`): it keeps none (spec.retention.keepPayloadsFor 0, the default)."""
    return lifetime.seconds(spec.keep_payloads_for) == 0


def pending(ledger: Ledger, job: str) -> list[str]:
    """Ids of the job's ingested batches whose provider objects are not yet deleted (nor deliberately kept)."""
    return [
        b["batch_id"]
        for b in ledger.batches_of(job)
        if b["ingested"] and b["cleanup"] in ("", LEGACY) and b["status"] not in NOT_OURS
    ]


async def clean_up(ledger: Ledger, job: str, provider: BatchProvider, *, delete: bool, on_event: Event) -> Cleanup:
    """Delete (or, with `delete` false, mark kept) the provider copies of every pending batch of an ended job."""
    todo = pending(ledger, job)
    if not delete:
        for batch_id in todo:
            ledger.set_batch(job, batch_id, cleanup="kept")
        return Cleanup()
    deleted, retry, refused = 0, [], []
    for batch_id in todo:
        failpoints.hit(failpoints.BEFORE_CLEANUP)
        try:
            deleted += await provider.delete_objects(batch_id)
        except Transient as exc:
            retry.append(batch_id)
            log.warning("cleanup of batch %s failed, retried next step: %s", batch_id, exc)
            continue
        except ProviderError as exc:
            refused.append(f"{batch_id}: {exc.error_type}")
            ledger.set_batch(job, batch_id, cleanup="failed")
            continue
        ledger.set_batch(job, batch_id, cleanup="done")
    if deleted:
        on_event("ProviderCopiesDeleted", f"{deleted} provider objects of {len(todo)} batches deleted", "Normal")
    if refused:
        on_event(
            "ProviderCopiesKept",
            bound(f"the provider refused to delete {len(refused)} batches' copies (they age out there): {refused[:3]}"),
            "Warning",
        )
    if retry:
        on_event(
            "CleanupPending",
            bound(f"deleting the provider copies of {len(retry)} batches failed, retried next step: {retry[:5]}"),
            "Warning",
        )
    return Cleanup(deleted, len(retry))
