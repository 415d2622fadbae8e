"""The operator's FOCUS export timer: the previous UTC day's cost and usage rows (FOCUS 1.2, CSV) written to the
admin's storage URL (BARGE_FOCUS_EXPORT_URL; the chart's reports.focus.url) every BARGE_FOCUS_EXPORT_SECONDS.

Each run writes focus-1.2-YYYY-MM-DD.csv for the day before now, whole (a local file is renamed into place), so
several replicas or a restart only write the same file again. The URL is the admin's, not a tenant's: it is
written with the operator's own identity and no tenant prefix applies. A failure is logged and tried again next
time; it never stops the operator.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import TYPE_CHECKING

from barge.reports import export
from barge.storage import StoragePolicy

if TYPE_CHECKING:
    from barge.operator.jobs import Context

log = logging.getLogger("barge.operator")


def export_once(ctx: Context, now: float) -> tuple[str, int]:
    config = ctx.config
    day = export.previous_day(now)
    return export.export_day(
        ctx.ledger, ctx.prices, config.focus_export_url, day, StoragePolicy(), period=config.focus_export_period
    )


async def run(ctx: Context) -> None:
    """Until cancelled (the operator's cleanup): export at start, then every focus_export_seconds."""
    while True:
        try:
            url, rows = await asyncio.to_thread(export_once, ctx, time.time())
            log.info("FOCUS export: %d rows to %s", rows, url)
        except Exception:
            log.exception("FOCUS export failed; trying again in %s s", ctx.config.focus_export_seconds)
        await asyncio.sleep(ctx.config.focus_export_seconds)
