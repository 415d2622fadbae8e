"""What a provider deployment has in flight, from the ledger: the input of quota-aware admission.

Every job whose batches count against a deployment's batch quota carries that deployment's key in `jobs.quota_key`
(set by the operator before the job creates anything), so what is live is known for all jobs on the deployment,
whatever their namespace, from the first decision after a restart.

Only a job that can still act holds quota: a terminal job (ledger phase Succeeded or Failed, e.g. failed at its
deadline with batches in flight) and a deleted one (`release`, from the delete handler) count for nothing, even
with batches never ingested. Without this every deletion leaked its live batches' share of the deployment, for
every tenant on it, forever (review 3, H5). A released job keeps its key, marked (`RELEASED`), so that the
fair-share rotation still remembers when its tenant was served: deleting a job must not put its tenant first.
"""

from __future__ import annotations

from barge.ledger import Ledger

#: Items whose prompt tokens the provider holds, or is about to: in a create in flight, or in a live batch.
ENQUEUED_STATES = ("submitting", "submitted")
#: Ledger phases of a job that creates and holds nothing more.
ENDED_PHASES = ("Succeeded", "Failed")
#: Prefix of the quota key of a deleted job: it counts for the rotation (`last_served`), never as live.
RELEASED = "released:"


def mark(ledger: Ledger, job: str, quota_key: str) -> None:
    ledger.set_job(job, quota_key=quota_key)


def release(ledger: Ledger, job: str) -> None:
    """The job was deleted: its batches and open intents no longer count against its deployment's quota."""
    row = ledger.job(job)
    key = (row or {}).get("quota_key")
    if key and not str(key).startswith(RELEASED):
        ledger.set_job(job, quota_key=RELEASED + str(key))


def live(ledger: Ledger, quota_key: str) -> tuple[int, int]:
    """(estimated prompt tokens, batches) in flight on the deployment: batches not yet ingested plus open intents
    (a create in flight, or one whose outcome is not known yet), and the items in them, of the jobs that still
    hold quota (not ended, not released)."""
    tokens = ledger._rows(
        "SELECT COALESCE(SUM(i.est_tokens), 0) FROM items i JOIN jobs j ON j.job = i.job "
        "WHERE j.quota_key = ? AND j.phase NOT IN (?, ?) AND i.state IN (?, ?)",
        (quota_key, *ENDED_PHASES, *ENQUEUED_STATES),
    )[0][0]
    batches = ledger._rows(
        "SELECT COUNT(*) FROM batches b JOIN jobs j ON j.job = b.job "
        "WHERE j.quota_key = ? AND j.phase NOT IN (?, ?) AND b.ingested = ?",
        (quota_key, *ENDED_PHASES, False),
    )[0][0]
    intents = ledger._rows(
        "SELECT COUNT(*) FROM intents x JOIN jobs j ON j.job = x.job "
        "WHERE j.quota_key = ? AND j.phase NOT IN (?, ?) AND x.state = 'open'",
        (quota_key, *ENDED_PHASES),
    )[0][0]
    return int(tokens), int(batches) + int(intents)


def last_served(ledger: Ledger, quota_key: str) -> dict[str, float]:
    """Tenant -> when a batch of theirs was last created (intent opened) on the deployment: the fair-share rotation
    (deleted jobs included)."""
    return {
        str(tenant): float(at)
        for tenant, at in ledger._rows(
            "SELECT j.tenant, MAX(x.created_at) FROM intents x JOIN jobs j ON j.job = x.job "
            "WHERE j.quota_key IN (?, ?) GROUP BY j.tenant",
            (quota_key, RELEASED + quota_key),
        )
        if at is not None
    }
