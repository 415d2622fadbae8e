"""The operator's ledger purge timer: what `barge ledger purge` does, on a schedule, so texts kept for a while
(spec.retention.keepPayloadsFor / keepOutputsFor) really go when their time has passed.

Every `ledger_purge_seconds` it drops the texts past their keep times and, when `ledger_purge_older_than` is set,
those of every job that ended longer ago; and it removes every row of the jobs deleted longer ago than the policy's
ledger.deletedJobsKeptFor (lifetime.purge_deleted), so that deleted jobs do not hold the shared volume for ever.
Several replicas may run it at once: dropping and purging are idempotent.
At start and after each purge it measures the text bytes still held per tenant into the Context, which the metrics
export (barge_ledger_text_bytes): the measurement reads every text, so it runs here, not on each scrape.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import TYPE_CHECKING

from barge.config import OperatorConfig
from barge.ledger import Ledger, lifetime

if TYPE_CHECKING:
    from barge.operator.jobs import Context

log = logging.getLogger("barge.operator")


def purge_once(config: OperatorConfig, ledger: Ledger, now: float) -> tuple[int, int]:
    """(payload rows, outputs) dropped now; deleted jobs past the policy's ledger.deletedJobsKeptFor go whole."""
    older = config.ledger_purge_older_than
    before = now - lifetime.seconds(older) if older else None
    ledger.fold_counts()  # where nothing scrapes /metrics, the item-count deltas still get folded
    dropped = lifetime.drop_texts(ledger, now, finished_before=before)
    purged = lifetime.purge_deleted(ledger, now, config.policy.ledger.deleted_jobs_kept_seconds)
    if purged:
        log.info("ledger purge: removed the audit rows of %d deleted jobs (their counts kept per tenant)", purged)
    return dropped


def measure(ctx: Context, now: float) -> None:
    """Record the text bytes the ledger holds per tenant, for /metrics."""
    ctx.held = lifetime.held_bytes(ctx.ledger, now)


async def run(ctx: Context) -> None:
    """Until cancelled (the operator's cleanup); a failing purge or measure is logged and tried again next time."""
    config = ctx.config
    while True:
        try:
            await asyncio.to_thread(measure, ctx, time.time())
        except Exception:
            log.exception("measuring the ledger's texts failed; trying again in %s s", config.ledger_purge_seconds)
        await asyncio.sleep(config.ledger_purge_seconds)
        try:
            dropped = await asyncio.to_thread(purge_once, config, ctx.ledger, time.time())
        except Exception:
            log.exception("ledger purge failed; trying again in %s s", config.ledger_purge_seconds)
            continue
        if any(dropped):
            log.info("ledger purge: dropped %d prompts and %d outputs", *dropped)
