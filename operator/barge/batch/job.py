"""What the engine is given: a job, wherever it came from (a manifest for `barge run`, an LLMBatchJob for the
operator), and the engine's knobs.

Apart from the runner (batch/runner.py) so that the step machine's module holds the steps, and so that what
describes a job can be imported without it (batch/faults.py needs only `spec_hash`).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from barge.api.batchjob import IMMUTABLE_SPEC_FIELDS, LLMBatchJobSpec
from barge.api.common import ModelPrice
from barge.batch import planner
from barge.limits import LedgerLimits
from barge.storage import StoragePolicy


@dataclass(frozen=True)
class EngineSettings:
    """Knobs of the engine; the defaults suit real providers, tests shrink them."""

    min_batch_window: float = 3600.0
    """Closer than this to the deadline, leftovers go to the sync path instead of a new batch."""
    adopt_window: float = 600.0
    """Anthropic orphans: batches created up to this many seconds after an open intent may be ours."""
    sync_tries: int = 3
    """Transient answers retried this many times on the sync path."""
    status_batches: int = 20
    """How many batches the status lists (the ledger keeps them all)."""
    max_shard_requests: int = 0
    """Cap on requests per batch below the provider's limit (0 = the provider's); smaller shards fail smaller."""
    max_shard_bytes: int = 0
    """Cap on a batch's encoded bytes below the provider's limit (0 = the provider's)."""
    plan_limits: planner.PlanLimits = field(default_factory=planner.PlanLimits)
    """CPU, memory and time limits of the planner process (templates and input are the job's, not ours)."""
    ledger_limits: LedgerLimits = field(default_factory=LedgerLimits)
    """Items per job and tenant, invalid lines listed, the free-space floor (policy `ledger`; batch/capacity.py)."""
    delete_provider_copies: bool = True
    """Default of spec.retention.deleteProviderCopies (batch/retention.py)."""
    output_expires_after_days: int = 14
    """Default of spec.retention.outputExpiresAfterDays (OpenAI and Azure output and error files)."""


@dataclass(frozen=True)
class Job:
    """Everything the engine needs to know about one job, independent of where it came from."""

    key: str
    spec: LLMBatchJobSpec
    tenant: str
    run_date: str
    model: str
    lines: Callable[[], Iterator[tuple[int, bytes]]]
    storage: StoragePolicy = field(default_factory=StoragePolicy)
    status_batches: tuple[str, ...] = ()
    """Batch ids the job's status lists (operator mode): a ledger that knows none of them was lost."""
    reported: frozenset[str] = frozenset()
    """Condition types already True in the status (so a standing problem is announced once)."""
    pool_price: ModelPrice | None = None
    """The provider pool's spec.provider.price, for a job on one (its own spec.budget.price wins)."""
    schedule: str = ""
    """The LLMBatchSchedule that created the job (its barge.dev/schedule label), for cost reports' tags."""

    @property
    def spec_hash(self) -> str:
        return spec_hash(self.spec)


def spec_hash(spec: LLMBatchJobSpec) -> str:
    """Hash of the immutable part of a spec: the ledger refuses to go on with a job whose spec changed under it."""
    names = [n for n, info in LLMBatchJobSpec.model_fields.items() if (info.alias or n) in IMMUTABLE_SPEC_FIELDS]
    fixed = spec.model_dump(mode="json", by_alias=True, include=set(names))
    return hashlib.sha256(json.dumps(fixed, sort_keys=True).encode()).hexdigest()
