"""A job's observable state, derived from the ledger: phase, counts, usage, conditions, batches.

The same snapshot feeds `barge run --json`, the operator's status subresource and the metrics, so the three
can never disagree.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from barge.batch import prices
from barge.batch.bounded import bound
from barge.batch.budget import missing_price_message
from barge.ledger import Ledger, reasons
from barge.providers.base import Usage

if TYPE_CHECKING:
    from barge.batch.job import Job


def rfc3339(ts: float | None) -> str | None:
    if ts is None:
        return None
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass
class Snapshot:
    phase: str
    counts: dict[str, int]
    usage: dict[str, Any]
    batches: list[dict[str, Any]]
    conditions: list[dict[str, str]]
    message: str
    started_at: str | None = None
    completed_at: str | None = None
    results_url: str | None = None
    deadline_slack_seconds: float | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def terminal(self) -> bool:
        return self.phase in ("Succeeded", "Failed")

    def to_json(self) -> dict[str, Any]:
        return {
            "phase": self.phase,
            "counts": self.counts,
            "usage": self.usage,
            "resultsURL": self.results_url,
            "message": self.message,
            "startedAt": self.started_at,
            "completedAt": self.completed_at,
            "batches": self.batches,
            "conditions": self.conditions,
            "deadlineSlackSeconds": self.deadline_slack_seconds,
        }


def _usage(ledger: Ledger, job: Job, table: prices.PriceTable, estimated: Decimal) -> dict[str, Any]:
    """Tokens from the ledger; money derived from them with the price table (batch price for batch usage)."""
    batch, sync = ledger.usage(job.key)
    batch_usage, sync_usage = Usage(*batch), Usage(*sync)
    batch_cost = table.cost(job.model, batch_usage, batch=True)
    cost = batch_cost + table.cost(job.model, sync_usage, batch=False)
    saved = table.cost(job.model, batch_usage, batch=False) - batch_cost
    tokens = [a + b for a, b in zip(batch, sync, strict=True)]
    return {
        "inputTokens": tokens[0],
        "outputTokens": tokens[1],
        "cacheReadTokens": tokens[2],
        "cacheWriteTokens": tokens[3],
        "costUSD": prices.money(cost),
        "estimatedCostUSD": prices.money(estimated),
        "savedUSD": prices.money(saved),
    }


def _condition(type_: str, ok: bool, reason: str, message: str) -> dict[str, str]:
    return {"type": type_, "status": "True" if ok else "False", "reason": reason, "message": message}


LEDGER_MISMATCH = "LedgerMismatch"


def ledger_mismatch(ledger: Ledger, key: str, status_batches: tuple[str, ...]) -> list[str]:
    """Batches the job's status lists and the ledger does not know: the ledger was lost or replaced (a restart
    without its volume). Submitting now could pay a second time for items already in those batches."""
    if not status_batches:
        return []
    known = {b["batch_id"] for b in ledger.batches_of(key)}
    return [b for b in status_batches if b not in known]


def mismatch_message(unknown: list[str]) -> str:
    return bound(
        f"status.batches lists {len(unknown)} batches the ledger does not know ({', '.join(unknown[:5])}): the "
        "ledger was lost or replaced; nothing is submitted until the ledger holding them is back"
    )


def build_snapshot(
    ledger: Ledger,
    job: Job,
    table: prices.PriceTable,
    max_batches: int,
    now: float,
    *,
    held: bool,
    unknown_batches: list[str] | None = None,
) -> Snapshot:
    row = ledger.job(job.key) or {}
    raw = ledger.counts(job.key)
    total = sum(
        raw.get(s, 0) for s in ("pending", "submitting", "submitted", "succeeded", "refused", "invalid", "failed")
    )
    counts = {
        "total": total,
        "pending": raw.get("pending", 0) + raw.get("submitting", 0),
        "submitted": raw.get("submitted", 0),
        "succeeded": raw.get("succeeded", 0),
        "refused": raw.get("refused", 0),
        "invalid": raw.get("invalid", 0),
        "failed": raw.get("failed", 0),
        "retrying": raw.get("retrying", 0),
        "viaFallback": raw.get("viaFallback", 0),
        "invalidOutput": raw.get("invalidOutput", 0),
    }
    tokens, count = ledger.estimate_inputs(
        job.key, ("pending", "submitting", "submitted", "succeeded", "refused", "failed")
    )
    estimate = table.cost(
        job.model, Usage(input_tokens=tokens, output_tokens=count * job.spec.request.max_tokens), batch=True
    )
    usage = _usage(ledger, job, table, estimate)
    all_batches = ledger.batches_of(job.key)
    batches = [
        {
            "id": b["batch_id"],
            "attempt": b["attempt"],
            "requests": b["requests"],
            "state": b["status"],
            "submittedAt": rfc3339(b["submitted_at"]),
            "endedAt": rfc3339(b["ended_at"]),
        }
        for b in all_batches[-max_batches:]
    ]
    live = [b for b in all_batches if not b["ingested"]]
    planned = bool(row.get("planned"))
    budget = job.spec.budget
    budget_stop = raw.get("budget", 0) > 0
    fatal = str(row.get("fatal") or "")
    phase = str(row.get("phase") or "Pending")
    message = ""
    unpriced = budget is not None and table.price(job.model) is None
    not_admitted = phase == "NotAdmitted"
    if unknown_batches:
        phase, message = "Pending", mismatch_message(unknown_batches)
    elif not_admitted:
        phase, message = "Pending", bound(fatal)
    elif fatal and phase == "Stopping":
        phase = "Running"
        message = bound(f"stopping: {fatal}; cancelling and collecting {len(live)} batches in flight")
    elif fatal:
        phase, message = "Failed", bound(fatal)
    elif phase not in ("Succeeded", "Failed"):
        if not planned:
            phase = "Pending"
            message = missing_price_message(job.model, job.spec) if unpriced else ""
        elif held:
            phase = "Pending"
            message = (
                f"estimated cost up to ${usage['estimatedCostUSD']} is over spec.budget.maxCostUSD "
                f"${budget.max_cost_usd if budget else ''}: not submitting"
            )
        elif job.spec.suspend:
            phase = "Suspended"
        elif row.get("cutoff_done") or (
            counts["pending"] and job.spec.deadline and job.spec.deadline.timestamp() <= now
        ):
            phase = "FallingBack"
        elif counts["retrying"]:
            phase = "Retrying"
        elif live:
            phase = "Running"
        else:
            phase = "Submitting"
    good = counts["succeeded"] + counts["refused"]
    if not message:
        message = (  # the top reasons: a bounded read (ledger/reasons.py), not a scan of the job
            f"{good}/{total} with a result, {counts['invalid']} invalid"
            f"{reasons.note(ledger, job.key, 'invalid', counts['invalid'])}, {counts['failed']} failed"
            f"{reasons.note(ledger, job.key, 'failed', counts['failed'])}, {len(live)} batches in flight"
        )
        if counts["invalidOutput"]:
            message += f", {counts['invalidOutput']} answers that broke the schema"
    if table.price(job.model) is None:
        message += f"; no price known for model {job.model!r}: cost shows 0"
    conditions = [
        _condition(
            "Admitted",
            planned,
            "Planned" if planned else ("TemplateError" if not_admitted else "PriceMissing" if unpriced else "Planning"),
            f"{total} items, {counts['invalid']} invalid"
            if planned
            else (message if unpriced or not_admitted else "reading the input"),
        ),
        _condition(
            "Submitted",
            bool(all_batches),
            "BatchesCreated" if all_batches else "NoBatches",
            f"{len(all_batches)} batches created",
        ),
        _condition(
            "Complete",
            phase == "Succeeded",
            "SuccessRatioMet" if phase == "Succeeded" else "NotComplete",
            message if phase == "Succeeded" else "",
        ),
        _condition(
            "Failed",
            phase == "Failed",
            ("Fatal" if fatal else "SuccessRatioNotMet") if phase == "Failed" else "NotFailed",
            message if phase == "Failed" else "",
        ),
        _condition(
            "DeadlineExceeded",
            bool(row.get("cutoff_done")),
            "DeadlineReached" if row.get("cutoff_done") else "BeforeDeadline",
            "in-flight batches cancelled at the deadline" if row.get("cutoff_done") else "",
        ),
        _condition(
            "BudgetExceeded",
            held or budget_stop,
            "OverBudget" if held or budget_stop else "WithinBudget",
            message if held else ("resubmission stopped by the budget" if budget_stop else ""),
        ),
    ]
    conditions.append(
        _condition(
            LEDGER_MISMATCH,
            bool(unknown_batches),
            "UnknownBatches" if unknown_batches else "LedgerConsistent",
            message if unknown_batches else "",
        )
    )
    slack = job.spec.deadline.timestamp() - now if job.spec.deadline else None
    return Snapshot(
        phase,
        counts,
        usage,
        batches,
        conditions,
        message,
        rfc3339(row.get("started_at")),
        rfc3339(row.get("completed_at")),
        job.spec.output.url.rstrip("/") + "/" + job.spec.output.results_name
        if phase in ("Succeeded", "Failed")
        else None,
        slack,
        {"ledger_mismatch": unknown_batches} if unknown_batches else {},
    )
