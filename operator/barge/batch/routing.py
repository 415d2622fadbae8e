"""What happens to each outcome: the one place that answers "what happens to an expired request?".

| outcome    | item becomes                                                       |
| ---------- | ------------------------------------------------------------------ |
| succeeded  | succeeded (a result)                                               |
| refused    | refused (a result, not a failure; never retried)                   |
| invalid    | invalid (never retried; reported in failures.jsonl)                |
| transient  | pending again while attempts remain, else failed                   |
| expired    | pending again while attempts remain (or the sync fallback once the |
|            | deadline is near), else failed                                     |
| canceled   | pending again without spending an attempt (Barge cancelled it:     |
|            | suspend or the deadline cut-off)                                   |
| quota      | (a transient `token_limit_exceeded`: the deployment's enqueued-    |
|            | token quota was full) pending again without spending an attempt;   |
|            | the submitter backs off (batch/admission_queue.py)                 |
| missing    | (asked for, absent from the results) as transient                  |
| invalid_   | (an answer that is not JSON or breaks spec.request.responseFormat, |
| output     | batch/structured.py) as transient: error type `invalid_output`     |
| fatal      | the whole job stops (authentication, permission, billing)          |
"""

from __future__ import annotations

from barge.batch.admission_queue import TOKEN_LIMIT
from barge.ledger import ItemUpdate
from barge.providers.base import Outcome, Result
from barge.providers.jsonl import UNREADABLE


def route(result: Result, attempts: int, max_attempts: int, via: str = "batch") -> ItemUpdate:
    """The item's next state after `result`; `attempts` counts tries before this one."""
    if result.outcome is Outcome.SUCCEEDED:
        return ItemUpdate(result.custom_id, "succeeded", attempts=attempts + 1, via=via)
    if result.outcome is Outcome.REFUSED:
        return ItemUpdate(
            result.custom_id, "refused", result.error_type, "refused by the model", attempts=attempts + 1, via=via
        )
    if result.outcome is Outcome.INVALID:
        return ItemUpdate(
            result.custom_id,
            "invalid",
            result.error_type or "invalid_request",
            result.message or "the provider rejected the request",
            attempts=attempts + 1,
            via=via,
        )
    if result.outcome is Outcome.CANCELED:
        return ItemUpdate(
            result.custom_id, "pending", result.error_type or "canceled", "batch cancelled by Barge", attempts=attempts
        )
    if result.outcome is Outcome.TRANSIENT and result.error_type == TOKEN_LIMIT:
        return ItemUpdate(
            result.custom_id,
            "pending",
            TOKEN_LIMIT,
            "the deployment's enqueued-token quota was full: resubmitted without spending an attempt",
            attempts=attempts,
        )
    used = attempts + 1
    reason = result.message or result.outcome.value
    if used < max_attempts:
        return ItemUpdate(result.custom_id, "pending", result.error_type or result.outcome.value, reason, attempts=used)
    return ItemUpdate(
        result.custom_id,
        "failed",
        result.error_type or result.outcome.value,
        f"{reason} (after {used} attempts)",
        attempts=used,
        via=via,
    )


def unreadable(custom_id: str, lines: int, why: str) -> Result:
    """A submitted request with no readable result, in a batch whose results held `lines` unreadable lines (one of
    them may have been its own: which, nobody can tell)."""
    return Result(
        custom_id,
        Outcome.TRANSIENT,
        error_type=UNREADABLE,
        message=f"no readable result for this request: {lines} result lines of its batch could not be read ({why})",
    )


def missing(custom_id: str) -> Result:
    """A submitted request the provider's results never mentioned."""
    return Result(
        custom_id,
        Outcome.TRANSIENT,
        error_type="missing_result",
        message="the provider returned no result for this request",
    )
