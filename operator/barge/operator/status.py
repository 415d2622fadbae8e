"""From an engine snapshot to the LLMBatchJob status subresource (pure: no I/O).

Conditions keep their lastTransitionTime unless their status flips, and the patch is skipped when nothing
changed, so a running job costs one cheap read per poll and no writes.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from barge.batch.snapshot import Snapshot
from barge.operator import kstatus


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
    conds = [cond, *kstatus.job_conditions("Pending", [cond], message)]
    return {
        "phase": "Pending",
        "observedGeneration": generation,
        "message": message,
        "conditions": merge_conditions(old, conds, generation, now_rfc3339()),
    }


def from_snapshot(snap: Snapshot, old_status: dict[str, Any], generation: int) -> dict[str, Any]:
    counts = snap.counts
    return {
        "phase": snap.phase,
        "observedGeneration": generation,
        "conditions": merge_conditions(
            old_status.get("conditions", []),
            [*snap.conditions, *kstatus.job_conditions(snap.phase, snap.conditions, snap.message)],
            generation,
            now_rfc3339(),
        ),
        "counts": counts,
        "progress": f"{counts['succeeded']}/{counts['total']}",
        "batches": snap.batches,
        "usage": snap.usage,
        "startedAt": snap.started_at,
        "completedAt": snap.completed_at,
        "resultsURL": snap.results_url,
        "message": snap.message,
    }


def observed(old: dict[str, Any], generation: int) -> dict[str, Any]:
    """A terminal job's status at a new generation: nothing more to do, but kstatus readers (kubectl wait,
    Flux, helm --wait) need observedGeneration to catch up with the spec edit."""
    conds = old.get("conditions") or []
    ours = kstatus.job_conditions(str(old.get("phase") or ""), conds, str(old.get("message") or ""))
    merged = merge_conditions(conds, ours, generation, now_rfc3339())
    return {"observedGeneration": generation, "conditions": [{**c, "observedGeneration": generation} for c in merged]}


def changed(old: dict[str, Any], new: dict[str, Any]) -> bool:
    """Whether a patch is needed (timestamps of unchanged conditions are carried over, so equal means equal)."""
    return any(old.get(k) != v for k, v in new.items())
