"""From an engine snapshot to the LLMBatchJob status subresource (pure: no I/O).

Conditions keep their lastTransitionTime unless their status flips, and the patch is skipped when nothing
changed, so a running job costs one cheap read per poll and no writes.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from barge.batch.snapshot import Snapshot


def now_rfc3339() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def merge_conditions(
    old: list[dict[str, Any]], new: list[dict[str, str]], generation: int, now: str
) -> list[dict[str, Any]]:
    previous = {c.get("type"): c for c in old or []}
    out = []
    for cond in new:
        before = previous.pop(cond["type"], None)
        stamp = before.get("lastTransitionTime") if before and before.get("status") == cond["status"] else now
        out.append({**cond, "lastTransitionTime": stamp or now, "observedGeneration": generation})
    out.extend(previous.values())  # conditions the engine does not own (e.g. set while waiting for a Secret)
    return out


def admitted_false(old: list[dict[str, Any]], reason: str, message: str, generation: int) -> dict[str, Any]:
    """Status of a job that cannot start yet (missing Secret, unreadable input)."""
    cond = {"type": "Admitted", "status": "False", "reason": reason, "message": message}
    return {
        "phase": "Pending",
        "observedGeneration": generation,
        "message": message,
        "conditions": merge_conditions(old, [cond], generation, now_rfc3339()),
    }


def from_snapshot(snap: Snapshot, old_status: dict[str, Any], generation: int) -> dict[str, Any]:
    counts = snap.counts
    return {
        "phase": snap.phase,
        "observedGeneration": generation,
        "conditions": merge_conditions(old_status.get("conditions", []), snap.conditions, generation, now_rfc3339()),
        "counts": counts,
        "progress": f"{counts['succeeded']}/{counts['total']}",
        "batches": snap.batches,
        "usage": snap.usage,
        "startedAt": snap.started_at,
        "completedAt": snap.completed_at,
        "resultsURL": snap.results_url,
        "message": snap.message,
    }


def changed(old: dict[str, Any], new: dict[str, Any]) -> bool:
    """Whether a patch is needed (timestamps of unchanged conditions are carried over, so equal means equal)."""
    return any(old.get(k) != v for k, v in new.items())
