"""How late each event loop of the operator wakes up: barge_event_loop_lag_seconds{loop}.

A task per loop sleeps TICK seconds and records how much later than asked it woke: anything that blocks the loop
(a synchronous ledger call, a parse) shows here. The Kopf loop (`main`) must stay near zero: it sends the peering
keep-alives and the status patches; the engine loops (operator/engine.py) run the job steps.
"""

from __future__ import annotations

import asyncio
import time
from bisect import bisect_left
from collections.abc import Iterator, Mapping

from prometheus_client.core import HistogramMetricFamily
from prometheus_client.registry import Collector

TICK = 0.1
BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


class Lag:
    """A histogram of wake-up delays (seconds)."""

    def __init__(self) -> None:
        self.counts = [0] * (len(BUCKETS) + 1)
        self.total = 0.0

    def observe(self, seconds: float) -> None:
        self.counts[bisect_left(BUCKETS, seconds)] += 1
        self.total += seconds

    async def watch(self, tick: float = TICK) -> None:
        """Until cancelled."""
        while True:
            started = time.perf_counter()
            await asyncio.sleep(tick)
            self.observe(max(0.0, time.perf_counter() - started - tick))


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
