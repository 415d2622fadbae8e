"""Ledger limits: what one job and one tenant may hold in the ledger every tenant shares (policy section `ledger`).

Why: the ledger is one database, by default a SQLite file on the chart's 1 GiB volume, and a full one stops every
tenant (submission, ingestion, new jobs and the delete finalizer all write). Before these limits one job's
1 MiB ConfigMap of newlines wrote a row per blank line (~209 MiB that outlived the job) and five such jobs filled
the volume (REVIEW-3 C1). The admin's policy file sets them; the defaults fit the chart's default volume.

| field (policy `ledger.`) | default   | why this default (a row with its index entries is ~228 B, REVIEW-3 A.2)      |
| ------------------------ | --------- | ---------------------------------------------------------------------------- |
| maxItemsPerJob           | 1,000,000 | ~218 MiB of rows, a fifth of 1 GiB; a longer input is refused whole          |
| maxItemsPerTenant        | 2,000,000 | ~435 MiB: one tenant at its limit leaves more than half of the volume         |
|                          |           | (1 GiB - 128 MiB floor - 435 MiB = ~461 MiB) to the others                    |
| listedInvalidLines       | 1,000     | invalid lines stored one row each per job (~223 KiB); the rest only counted  |
| minFreeBytes             | 128 MiB   | planning is refused below it: room left for running jobs' results, for        |
|                          |           | deletes and for SQLite's WAL, so the disk never fills from a new plan         |
| maxKeepFor               | 30d       | the longest spec.retention.keepPayloadsFor / keepOutputsFor a job may ask     |
| deletedJobsKeptFor       | 7d        | a deleted job's audit rows are purged this long after the delete (0s: at the  |
|                          |           | next purge); its counts stay in the per-tenant totals the metrics read        |

Rendered prompts are not rows: 1,000,000 items of 2 KB prompts hold ~2 GB of text, which no item count bounds.
The free-space floor does: it is checked before planning and at every write of the plan, and a plan that would
cross it is refused and its rows removed (batch/capacity.py).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from barge.api.batchjob import DURATION

_DURATION = re.compile(DURATION)
_UNIT = {"s": 1, "m": 60, "h": 3600, "d": 86400}
DAY = 86400


def seconds(text: str) -> int:
    """'30d' -> 2592000 (units s, m, h, d); '0s' is 0."""
    text = text.strip()
    if not _DURATION.match(text):
        raise ValueError(f"{text!r} is not a duration like 12h or 30d")
    return int(text[:-1]) * _UNIT[text[-1]]


@dataclass(frozen=True)
class LedgerLimits:
    """What one job and one tenant may hold in the shared ledger (the table in barge/limits.py)."""

    max_items_per_job: int = 1_000_000
    """Input lines one job may have (every line counts, valid or not); over it the job is Admitted=False."""
    max_items_per_tenant: int = 2_000_000
    """Item rows the jobs of one tenant may hold in the ledger together, deleted jobs' included until purged."""
    listed_invalid_lines: int = 1_000
    """Invalid lines (blank ones included) of a job stored as rows, with their reasons; the rest are counted."""
    min_free_bytes: int = 128 << 20
    """Free bytes of the ledger's volume below which no job is planned (SQLite; PostgreSQL reports none)."""
    max_keep_seconds: int = 30 * DAY
    """The longest spec.retention.keepPayloadsFor / keepOutputsFor, in seconds."""
    deleted_jobs_kept_seconds: int = 7 * DAY
    """Seconds a deleted job's audit rows stay in the ledger before the purge removes them."""


FIELDS = {
    "maxItemsPerJob": "max_items_per_job",
    "maxItemsPerTenant": "max_items_per_tenant",
    "listedInvalidLines": "listed_invalid_lines",
    "minFreeBytes": "min_free_bytes",
}
DURATIONS = {"maxKeepFor": "max_keep_seconds", "deletedJobsKeptFor": "deleted_jobs_kept_seconds"}


def parse(section: Mapping[str, Any] | None) -> LedgerLimits:
    """The policy's `ledger` section; a wrong key or value stops the operator at start-up."""
    data = dict(section or {})
    unknown = set(data) - set(FIELDS) - set(DURATIONS)
    if unknown:
        raise ValueError(f"unknown policy ledger field(s): {sorted(unknown)}")
    values: dict[str, int] = {}
    for key, name in FIELDS.items():
        if key in data:
            value = data[key]
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError(f"policy ledger.{key} must be a whole number >= 0, not {value!r}")
            values[name] = value
    for key, name in DURATIONS.items():
        if key in data:
            try:
                values[name] = seconds(str(data[key]))
            except ValueError as exc:
                raise ValueError(f"policy ledger.{key}: {exc}") from None
    limits = LedgerLimits(**values)
    if limits.max_items_per_job < 1 or limits.max_items_per_tenant < 1:
        raise ValueError("policy ledger.maxItemsPerJob and maxItemsPerTenant must be at least 1")
    return limits


def shown(n: int) -> str:
    """Bytes for a person: 134217728 -> '128 MiB'."""
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if n >= 1 << shift:
            return f"{n / (1 << shift):.0f} {unit}"
    return f"{n} B"
