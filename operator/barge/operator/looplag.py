"""How late each event loop of the operator wakes up: barge_event_loop_lag_seconds{loop}.

A task per loop sleeps TICK seconds and records how much later than asked it woke: anything that blocks the loop
(a synchronous ledger call, a parse) shows here. The Kopf loop (`main`) must stay near zero: it sends the peering
keep-alives and the status patches; the engine loops (operator/engine.py) run the job steps.

The same task says when a loop last woke: an engine loop that has not for `STUCK_SECONDS` (a job's synchronous
storage write to a stalled mount or server, review 3 M10) makes `/healthz` answer 503 naming it, so liveness
restarts an operator whose jobs stopped moving instead of answering ok for ever. Kopf's loop needs no such check:
`/healthz` is served on it, so a stuck Kopf loop does not answer at all.
"""

from __future__ import annotations

import asyncio
import time
from bisect import bisect_left
from collections.abc import Iterator, Mapping

from prometheus_client.core import HistogramMetricFamily
from prometheus_client.registry import Collector

TICK = 0.1
STUCK_SECONDS = 60.0
"""An engine loop that has not woken for this long is reported stuck by /healthz (the chart's liveness probe then
restarts the operator after its 6 x 20 s of failures)."""
BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


class Lag:
    """A histogram of wake-up delays (seconds)."""

    def __init__(self) -> None:
        self.counts = [0] * (len(BUCKETS) + 1)
        self.total = 0.0
        self.woke = time.monotonic()
        """When the loop last woke from its tick (time.monotonic); set from creation until the first tick."""

    def observe(self, seconds: float) -> None:
        self.counts[bisect_left(BUCKETS, seconds)] += 1
        self.total += seconds

    async def watch(self, tick: float = TICK) -> None:
        """Until cancelled."""
        while True:
            started = time.perf_counter()
            await asyncio.sleep(tick)
            self.woke = time.monotonic()
            self.observe(max(0.0, time.perf_counter() - started - tick))

    def asleep_for(self, now: float | None = None) -> float:
        """Seconds since the loop last woke."""
        return (time.monotonic() if now is None else now) - self.woke


def stuck(lags: Mapping[str, Lag], threshold: float | None = None) -> list[str]:
    """The engine loops that have not woken for `threshold` seconds (STUCK_SECONDS), by name; `main` (Kopf's
    loop, which serves /healthz) is never listed."""
    limit = STUCK_SECONDS if threshold is None else threshold
    now = time.monotonic()
    return sorted(name for name, lag in lags.items() if name != "main" and lag.asleep_for(now) > limit)


class LagCollector(Collector):
    def __init__(self, lags: Mapping[str, Lag]) -> None:
        self.lags = lags

    def collect(self) -> Iterator[HistogramMetricFamily]:
        family = HistogramMetricFamily(
            "barge_event_loop_lag_seconds",
            "How late the operator's event loops wake from a sleep (blocked loops show here)",
            labels=["loop"],
        )
        for name, lag in sorted(self.lags.items()):
            counts, running, buckets = list(lag.counts), 0, []
            for bound, n in zip((*map(str, BUCKETS), "+Inf"), counts, strict=True):
                running += n
                buckets.append((bound, float(running)))
            family.add_metric([name], buckets, lag.total)
        yield family
