"""spec.fallback.serviceTier: which synchronous tier each fallback call asks for (OpenAI `service_tier: flex`).

Flex is billed at the batch rate but answers slower and may answer 429 "resource unavailable" (retried with
backoff). `auto` asks for flex while the time left before the deadline covers the pending items at flex's measured
pace with a margin for its retries, and standard once it does not; it never returns to flex in the same pass (a
pass that flaps between tiers near its deadline pays the slow tier's latency twice). The rule is `use_flex`, pure;
`TierChooser` holds a pass's measurements.
"""

from __future__ import annotations

import time
from collections.abc import Callable

#: Seconds a flex answer is assumed to take until the pass has measured one (OpenAI documents flex as slower,
#: with no figure; a minute of queueing is ordinary for it).
FLEX_PRIOR_SECONDS = 10.0
#: The estimate is multiplied by this before it is compared with the time left: room for 429s and their backoff.
MARGIN = 2.0
#: Weight of the newest flex item's wall time in the pace (an exponential moving average).
ALPHA = 0.5

FLEX, STANDARD = "flex", "standard"


def use_flex(
    setting: str,
    remaining: float | None,
    pending: int,
    concurrency: int,
    flex_seconds: float,
    margin: float = MARGIN,
) -> bool:
    """Whether the next call asks for flex. `remaining`: seconds to the deadline (None: the job has none);
    `pending`: items not yet answered; `flex_seconds`: wall time of one item at flex (its retries included)."""
    if setting == FLEX:
        return True
    if setting != "auto":
        return False
    if remaining is None:
        return True
    waves = -(-max(0, pending) // max(1, concurrency))
    return remaining > margin * waves * flex_seconds


class TierChooser:
    """One synchronous pass's tier choice: `tier()` before each call, `done()` after each item's last answer."""

    def __init__(
        self,
        setting: str,
        deadline: float | None,
        pending: int,
        concurrency: int,
        *,
        clock: Callable[[], float] = time.time,
        prior: float | None = None,
    ) -> None:
        self.setting = setting
        self.deadline = deadline
        self.pending = pending
        self.concurrency = concurrency
        self.clock = clock
        self.pace = FLEX_PRIOR_SECONDS if prior is None else prior
        self.dropped = False
        """auto only: the pass has fallen back to standard, for good."""

    def tier(self) -> str:
        if self.dropped:
            return STANDARD
        remaining = None if self.deadline is None else self.deadline - self.clock()
        if use_flex(self.setting, remaining, self.pending, self.concurrency, self.pace):
            return FLEX
        self.dropped = self.setting == "auto"
        return STANDARD

    def done(self, seconds: float, *, flex: bool) -> None:
        """An item answered after `seconds` of wall time (every try); flex items update the pace."""
        self.pending = max(0, self.pending - 1)
        if flex:
            self.pace = ALPHA * seconds + (1 - ALPHA) * self.pace
