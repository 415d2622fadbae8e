"""The status of a job whose step failed, and of one that recovered (pure: no I/O).

A failed step shows as a `StepFailed` condition (True, with the fault's reason and bounded message) and as
`status.message`; before the job was planned, a fault that blocks admission shows as `Admitted=False` too. When a
step succeeds again the condition turns False, so a reader never sees a stale failure next to progress.
"""

from __future__ import annotations

from typing import Any

from barge.batch.faults import StepFault
from barge.operator import kstatus
from barge.operator.status import merge_conditions, now_rfc3339

STEP_FAILED = "StepFailed"


def fault_status(old: dict[str, Any], fault: StepFault, generation: int, *, planned: bool) -> dict[str, Any]:
    message = f"step failed ({fault.reason}): {fault.message}"
    conds = [{"type": STEP_FAILED, "status": "True", "reason": fault.reason, "message": fault.message}]
    if fault.admission and not planned:
        conds.append({"type": "Admitted", "status": "False", "reason": fault.reason, "message": fault.message})
    status: dict[str, Any] = {
        "observedGeneration": generation,
        "message": message,
        "conditions": _with_kstatus(old, conds, "" if planned else "Pending", message, generation, now_rfc3339()),
    }
    if not planned:
        status["phase"] = "Pending"
    return status


def _with_kstatus(
    old: dict[str, Any], conds: list[dict[str, str]], phase: str, message: str, generation: int, now: str
) -> list[dict[str, Any]]:
    """`conds` merged into the old conditions, then Ready/Reconciling/Stalled recomputed from the result."""
    merged = merge_conditions(old.get("conditions", []), conds, generation, now)
    ours = kstatus.job_conditions(phase or str(old.get("phase") or "Pending"), merged, message)
    return merge_conditions(merged, ours, generation, now)


def failed_at_deadline(old: dict[str, Any], fault: StepFault, generation: int) -> dict[str, Any]:
    """Terminal status of a job whose deadline passed while its steps kept failing."""
    message = f"deadline passed while the job could not make progress ({fault.reason}): {fault.message}"
    conds = [
        {"type": STEP_FAILED, "status": "True", "reason": fault.reason, "message": fault.message},
        {"type": "Failed", "status": "True", "reason": "DeadlinePassedWhileFailing", "message": message},
        {"type": "DeadlineExceeded", "status": "True", "reason": "DeadlineReached", "message": message},
        {"type": "Complete", "status": "False", "reason": "NotComplete", "message": ""},
    ]
    now = now_rfc3339()
    return {
        "phase": "Failed",
        "observedGeneration": generation,
        "message": message,
        "completedAt": now,
        "conditions": _with_kstatus(old, conds, "Failed", message, generation, now),
    }


def recovered(new: dict[str, Any], generation: int) -> dict[str, Any]:
    """`new` with StepFailed turned False when it was True (a step succeeded and the job is admitted)."""
    conds = new.get("conditions", [])
    if not any(c.get("type") == STEP_FAILED and c.get("status") == "True" for c in conds):
        return new
    if any(c.get("type") == "Admitted" and c.get("status") == "False" for c in conds):
        return new  # still not admitted (e.g. a template that can never plan): the failure stands
    ok = {"type": STEP_FAILED, "status": "False", "reason": "StepSucceeded", "message": ""}
    return {**new, "conditions": merge_conditions(conds, [ok], generation, now_rfc3339())}
