"""The operator's second-door timer: every BARGE_SECOND_DOOR_SECONDS, for each provider credential a job used
since the operator started, list the provider's recent batches and count those Barge did not create
(batch/second_door.py), per tenant that uses the credential.

Exported as `barge_provider_foreign_batches{provider, endpoint_hash, tenant}` (0 for a clean credential, so the
alert BargeSecondDoorOpen sees the first one), and a Warning event `SecondDoorBatches` on the newest job of each
tenant that used the credential, once per newly seen foreign batch id. The listing runs on the job's engine loop
with its long-lived client. A failing listing is logged and tried again next time.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from prometheus_client.core import GaugeMetricFamily

from barge.batch import second_door
from barge.operator.cache import ClientSpec

if TYPE_CHECKING:
    from barge.operator.engine import EngineLoop
    from barge.operator.jobs import Context

log = logging.getLogger("barge.operator")
Poster = Callable[[str, str, str], None]
#: Foreign batch ids listed in an event at most.
SHOWN = 5


@dataclass
class Doors:
    """Credentials in use (spec -> tenant -> (newest job key, its event poster)) and what the last scan found."""

    seen: dict[ClientSpec, dict[str, tuple[str, Poster]]] = field(default_factory=dict)
    foreign: dict[tuple[str, str, str], int] = field(default_factory=dict)
    reported: set[str] = field(default_factory=set)

    def saw(self, spec: ClientSpec, tenant: str, key: str, post: Poster) -> None:
        if spec.kind in ("pool", "vllm") or not spec.guarded:
            return  # an engine pool's own vLLM: nobody else's batches there
        self.seen.setdefault(spec, {})[tenant] = (key, post)


async def scan_once(ctx: Context, now: float) -> None:
    for spec, tenants in list(ctx.doors.seen.items()):
        label = (spec.kind, second_door.endpoint_hash(spec.kind, spec.base_url, spec.key[1]))
        first_key = next(iter(tenants.values()))[0]

        async def listing(engine: EngineLoop, spec: ClientSpec = spec) -> list[str]:
            async with engine.clients.lease(spec) as provider:
                window, young = ctx.config.second_door_window, second_door.YOUNG
                found = await second_door.foreign_batches(provider, ctx.ledger, now, window=window, young=young)
                return [b.id for b in found]

        try:
            ids = await ctx.engine.call(first_key, listing)
        except Exception:
            log.exception("second-door scan of a %s credential failed; trying again later", spec.kind)
            continue
        new = [i for i in ids if i not in ctx.doors.reported]
        for tenant, (_key, post) in tenants.items():
            ctx.doors.foreign[(*label, tenant)] = len(ids)
            if new:
                shown = ", ".join(new[:SHOWN]) + (f" and {len(new) - SHOWN} more" if len(new) > SHOWN else "")
                post(
                    "SecondDoorBatches",
                    f"{len(ids)} batch(es) on this job's {spec.kind} credential were not created by Barge "
                    f"(endpoint {label[1]}): {shown}; their cost is not attributed to any tenant",
                    "Warning",
                )
        ctx.doors.reported.update(new)


async def run(ctx: Context) -> None:
    """Until cancelled (the operator's cleanup)."""
    while True:
        await asyncio.sleep(ctx.config.second_door_seconds)
        try:
            await scan_once(ctx, time.time())
        except Exception:
            log.exception("second-door scan failed")


def collect(doors: Doors) -> Iterator[GaugeMetricFamily]:
    gauge = GaugeMetricFamily(
        "barge_provider_foreign_batches",
        "Recent provider batches on a credential Barge uses that Barge did not create (the second door)",
        labels=["provider", "endpoint_hash", "tenant"],
    )
    for labels, n in sorted(doors.foreign.items()):
        gauge.add_metric(list(labels), n)
    yield gauge
