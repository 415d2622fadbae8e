"""What a failed step of a job means: one table from an exception to a reason, and whether to retry soon.

Why one place: the daemon used to catch whatever the engine raised and only log it, so a template that divides
by zero, an unwritable output location or a Secret that is not UTF-8 left the job with no condition, no event
and a deadline that never applied. Every exception of a step now becomes a `StepFault`: a CamelCase reason
(the event's reason, the condition's reason and the metric's label), a bounded message, and whether it may
be transient (retried with a short backoff) or needs someone to fix something (retried slowly).

| exception                                   | reason              | transient | blocks admission |
| ------------------------------------------- | ------------------- | --------- | ---------------- |
| PlanError (template does not compile, ...)  | TemplateError       | no        | yes              |
| StorageError                                | StorageError        | yes       | yes              |
| providers' Transient                        | ProviderUnavailable | yes       | no               |
| providers' Invalid / Fatal                  | ProviderRejected    | no        | no               |
| UnicodeError                                | DecodeError         | no        | yes              |
| ValueError (configuration, e.g. no baseURL) | InvalidConfiguration| no        | yes              |
| SQLAlchemyError, OSError                    | LedgerError / IOError | yes     | no               |
| anything else                               | InternalError       | yes       | no               |

`fail_at_deadline` applies the deadline to a job whose steps keep failing: past it, the job is Failed with
the last fault as its reason, whatever else is broken. A job with work at the provider (live batches, or
intents that may have created one) is not failed by a transient fault until `deadline_grace` after the
deadline: a ledger restart or a storage or provider hiccup in the minute after it is retried, and the next
step that succeeds applies the runner's own cut-off (cancel, collect, fall back). Past the grace, a job with
live batches is not Failed at once either: it is Stopping (runner._stop cancels its batches, ingests what they
return, then fails), since they are paid for. The caller never writes a terminal phase the ledger did not take.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from sqlalchemy.exc import SQLAlchemyError

from barge.api.batchjob import LLMBatchJobSpec
from barge.batch.bounded import bound
from barge.batch.job import spec_hash
from barge.batch.render import PlanError
from barge.ledger import ItemUpdate, Ledger
from barge.providers.errors import ProviderError, Transient
from barge.storage import StorageError

log = logging.getLogger("barge.batch")

#: Least time past the deadline before a transient fault fails a job with work at the provider (deadline_grace).
DEADLINE_GRACE = 600.0
#: The ledger phase of a job cancelling and collecting its batches before it fails (runner.STOPPING).
STOPPING = "Stopping"

#: Backoff of a failing step: poll interval x 2^(failures-1), at most this many seconds.
MAX_BACKOFF_TRANSIENT = 120.0
MAX_BACKOFF_PERMANENT = 600.0


@dataclass(frozen=True)
class StepFault:
    reason: str
    message: str
    transient: bool
    admission: bool = False

    def backoff(self, interval: float, failures: int) -> float:
        cap = MAX_BACKOFF_TRANSIENT if self.transient else MAX_BACKOFF_PERMANENT
        return float(min(cap, interval * 2 ** max(0, min(failures, 30) - 1)))


def classify(exc: BaseException) -> StepFault:
    """The fault a step's exception means (the table in the module docstring)."""
    text = f"{type(exc).__name__}: {exc}" if not str(exc) else str(exc)
    if isinstance(exc, PlanError):
        return StepFault("TemplateError", bound(text), transient=False, admission=True)
    if isinstance(exc, StorageError):
        return StepFault("StorageError", bound(text), transient=True, admission=True)
    if isinstance(exc, ProviderError):
        message = bound(f"{exc.error_type}: {exc.message}")
        if isinstance(exc, Transient):
            return StepFault("ProviderUnavailable", message, transient=True)
        return StepFault("ProviderRejected", message, transient=False)
    if isinstance(exc, UnicodeError):
        return StepFault("DecodeError", bound(text), transient=False, admission=True)
    if isinstance(exc, SQLAlchemyError):
        # The driver's text may quote statement parameters (item text): only the class and the first line.
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        return StepFault("LedgerError", bound(f"{type(exc).__name__}: {first}", 300), transient=True)
    if isinstance(exc, ValueError):
        return StepFault("InvalidConfiguration", bound(text), transient=False, admission=True)
    if isinstance(exc, OSError):
        return StepFault("IOError", bound(text), transient=True)
    return StepFault("InternalError", bound(f"{type(exc).__name__}: {exc}"), transient=True)


def deadline_grace(poll_seconds: float) -> float:
    """How long past the deadline transient faults are retried before the job is failed: three polls, or
    DEADLINE_GRACE if longer."""
    return max(3 * poll_seconds, DEADLINE_GRACE)


def fail_at_deadline(
    ledger: Ledger,
    key: str,
    spec: LLMBatchJobSpec,
    tenant: str,
    now: float,
    fault: StepFault,
    *,
    grace: float = DEADLINE_GRACE,
) -> bool:
    """Past the deadline, a job whose steps keep failing is Failed with the fault as the reason (its items
    still open are marked failed). True if it did; the caller writes the status. A job with work at the provider
    waits `grace` past the deadline for a transient fault to clear, then with live batches becomes Stopping
    (False: the runner cancels and collects them, then fails)."""
    if spec.deadline is None or now < spec.deadline.timestamp():
        return False
    row = ledger.ensure_job(key, spec_hash(spec), tenant, spec.provider.model)
    if row["phase"] in ("Succeeded", "Failed", STOPPING) or row["fatal"]:
        return False
    live = ledger.batches_of(key, live_only=True)
    if fault.transient and (live or ledger.intents_open(key)) and now < spec.deadline.timestamp() + grace:
        return False  # retried; a step that succeeds applies the runner's cut-off to its batches
    reason = bound(f"deadline passed while the job could not make progress: {fault.reason}: {fault.message}")
    if live:  # paid for: cancelled and collected before the job fails (runner._stop)
        ledger.set_job(key, fatal=reason, phase=STOPPING, completed_at=now)
        log.warning("%s: %s; cancelling its %d live batches before failing", key, reason, len(live))
        return False
    left = [
        ItemUpdate(cid, "failed", "deadline_exceeded", reason)
        for _, cid in ledger.iter_items(key, "custom_id", ("pending", "submitting"))
    ]
    ledger.apply(key, left)
    ledger.set_job(key, fatal=reason, phase="Failed", completed_at=now, cutoff_done=True)
    return True
