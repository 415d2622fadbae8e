"""Keys remembered for a while, then forgotten: per-job state that must outlive a job only briefly.

Why: `Context.deleting` (jobs whose delete handler started, so that their daemon creates nothing more) was a set
only ever added to: every deleted job stayed in the operator's memory for its whole life (REVIEW-3 L5). A deleted
job's daemon is stopped by Kopf within seconds to minutes of its delete handler starting, and a job key carries
its uid, so no later job has the same key: an hour of memory is plenty, and the set stays as large as an hour's
deletions.
"""

from __future__ import annotations

import time
from collections.abc import Callable

KEEP_SECONDS = 3600.0


class RecentKeys:
    """A set whose keys are forgotten `keep` seconds after they were added (pruned as keys are added)."""

    def __init__(self, keep: float = KEEP_SECONDS, clock: Callable[[], float] = time.monotonic) -> None:
        self.keep = keep
        self.clock = clock
        self._added: dict[str, float] = {}  # in the order added: the oldest first

    def add(self, key: str) -> None:
        now = self.clock()
        self._added.pop(key, None)
        self._added[key] = now
        for old, at in list(self._added.items()):
            if now - at <= self.keep:
                break
            del self._added[old]

    def __contains__(self, key: object) -> bool:
        return key in self._added

    def __len__(self) -> int:
        return len(self._added)
