"""What a provider deployment has in flight, from the ledger: the input of quota-aware admission.

Every job whose batches count against a deployment's batch quota carries that deployment's key in `jobs.quota_key`
(set by the operator before the job creates anything), so what is live is known for all jobs on the deployment,
whatever their namespace, from the first decision after a restart.
"""

from __future__ import annotations

from barge.ledger import Ledger

#: Items whose prompt tokens the provider holds, or is about to: in a create in flight, or in a live batch.
ENQUEUED_STATES = ("submitting", "submitted")


def mark(ledger: Ledger, job: str, quota_key: str) -> None:
    ledger.set_job(job, quota_key=quota_key)


def live(ledger: Ledger, quota_key: str) -> tuple[int, int]:
    """(estimated prompt tokens, batches) in flight on the deployment: batches not yet ingested plus open intents
    (a create in flight, or one whose outcome is not known yet), and the items in them."""
    tokens = ledger._rows(
        "SELECT COALESCE(SUM(i.est_tokens), 0) FROM items i JOIN jobs j ON j.job = i.job "
        "WHERE j.quota_key = ? AND i.state IN (?, ?)",
        (quota_key, *ENQUEUED_STATES),
    )[0][0]
    batches = ledger._rows(
        "SELECT COUNT(*) FROM batches b JOIN jobs j ON j.job = b.job WHERE j.quota_key = ? AND b.ingested = ?",
        (quota_key, False),
    )[0][0]
    intents = ledger._rows(
        "SELECT COUNT(*) FROM intents x JOIN jobs j ON j.job = x.job WHERE j.quota_key = ? AND x.state = 'open'",
        (quota_key,),
    )[0][0]
    return int(tokens), int(batches) + int(intents)


def last_served(ledger: Ledger, quota_key: str) -> dict[str, float]:
    """Tenant -> when a batch of theirs was last created (intent opened) on the deployment: the fair-share rotation."""
    return {
        str(tenant): float(at)
        for tenant, at in ledger._rows(
            "SELECT j.tenant, MAX(x.created_at) FROM intents x JOIN jobs j ON j.job = x.job "
            "WHERE j.quota_key = ? GROUP BY j.tenant",
            (quota_key,),
        )
        if at is not None
    }
