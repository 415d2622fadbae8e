"""Barge's domain conditions -> the kstatus conditions `Ready`, `Reconciling`, `Stalled` (pure: no I/O).

Why: Flux, Helm 4 `--wait`, `kubectl wait` and Argo CD-adjacent tooling know nothing of `Admitted` or
`ScalingConflict`; they read kstatus (cli-utils): `Reconciling=True` -> InProgress, `Stalled=True` -> Failed,
`Ready=True` -> Current, `Ready=False` -> InProgress (never Failed), and an integer `status.observedGeneration`
behind `metadata.generation` -> InProgress. Exactly one of the three is True at any time, so every tool reads
the same answer. The operator writes them next to the domain conditions, with `observedGeneration` (added by
status.merge_conditions).

LLMBatchJob (first matching row wins; the one True condition and its reason; the other two are False):

| domain state                                                          | True condition, reason            |
| --------------------------------------------------------------------- | --------------------------------- |
| `Admitted=False` reason `InvalidSpec`                                 | Stalled `InvalidSpec`             |
| phase Failed, `DeadlineExceeded=True`                                 | Stalled `DeadlineExceeded`        |
| phase Failed, `BudgetExceeded=True`                                   | Stalled `BudgetExceeded`          |
| phase Failed, otherwise                                               | Stalled `Failed`                  |
| phase Pending, `BudgetExceeded=True` (held by the budget)             | Stalled `BudgetExceeded`          |
| phase Succeeded                                                       | Ready `Succeeded`                 |
| phase Suspended                                                       | Ready `Suspended`                 |
| `StepFailed=True` (a step keeps failing; retried every poll)          | Reconciling (the fault's reason)  |
| phase Pending, `Admitted=False` (waiting for a Secret, pool or input) | Reconciling (the Admitted reason) |
| Pending, Submitting, Running, Retrying, FallingBack                   | Reconciling (the phase)           |

A suspended job is Ready (kstatus Current): `spec.suspend: true` is the state Git asked for, and it is
reached once in-flight batches are cancelled. Reporting it as InProgress would make `helm --wait` and Flux
wait until their timeout, and Argo CD's `Suspended` health would hold a sync wave forever. A failed job's
Stalled reason names the cause: the deadline (`DeadlineExceeded=True`), the budget (`BudgetExceeded=True`), or
anything else (`Failed`). A job past its deadline that is still finishing synchronously (FallingBack) is
Reconciling, not Stalled: it may still succeed.

InferencePool (first matching row wins):

| domain state                                                          | True condition, reason            |
| --------------------------------------------------------------------- | --------------------------------- |
| `Ready=False` reason `InvalidSpec` or `SecretNotFound`                | Stalled (that reason)             |
| `ScalingConflict=True`                                                | Stalled `ScalingConflict`         |
| `Progressing` reason `ProgressDeadlineExceeded`                       | Stalled `ProgressDeadlineExceeded`|
| `Ready=True`, `Degraded=True` (some replicas unavailable)             | Reconciling `ReplicasUnavailable` |
| `Ready=True`                                                          | Ready `Available`                 |
| `Ready=False` reason `ScaledToZero`                                   | Ready `ScaledToZero`              |
| `Ready=False`, any other reason (starting, no Deployment yet)         | Reconciling (that reason)         |

`Ready=False` repeats the reason and message of the True condition.

A pool scaled to zero is Ready for kstatus and Healthy for Argo CD: zero replicas is its steady state until
work arrives, and a wave or `helm --wait` that waited for replicas would deadlock against the jobs that wake it.

LLMBatchSchedule:

| domain state                                                          | True condition, reason            |
| --------------------------------------------------------------------- | --------------------------------- |
| the spec fails validation                                             | Stalled `InvalidSpec`             |
| the cron expression, the zone or the name cannot work                 | Stalled `InvalidSchedule`         |
| the API server refuses a run built from the template                  | Stalled `RunRejected`             |
| `spec.suspend: true`                                                  | Ready `Suspended`                 |
| otherwise                                                             | Ready `Scheduled`                 |

A schedule's steady state is waiting for its next time, whatever its runs are doing (each run has its own
conditions), so a schedule with a run in flight is still Ready: a sync wave must not wait for a night's work.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

Condition = dict[str, str]


def _cond(type_: str, true: bool, reason: str, message: str) -> Condition:
    return {"type": type_, "status": "True" if true else "False", "reason": reason, "message": message}


def _three(state: str, reason: str, message: str) -> list[Condition]:
    """The three conditions with `state` (Ready, Reconciling or Stalled) the one that is True.

    `Ready=False` repeats the reason and message of the condition that is True, so `kubectl wait` and
    `kubectl get -o yaml` say why a resource is not Ready in the condition people look at first."""
    return [
        _cond("Ready", state == "Ready", reason, message),
        _cond("Reconciling", *((True, reason, message) if state == "Reconciling" else (False, "NotReconciling", ""))),
        _cond("Stalled", *((True, reason, message) if state == "Stalled" else (False, "NotStalled", ""))),
    ]


def _by_type(conditions: Iterable[Mapping[str, str]]) -> dict[str, Mapping[str, str]]:
    return {str(c.get("type")): c for c in conditions}


def _true(by_type: Mapping[str, Mapping[str, str]], type_: str) -> bool:
    return by_type.get(type_, {}).get("status") == "True"


def job_conditions(phase: str, conditions: Iterable[Mapping[str, str]], message: str) -> list[Condition]:
    """Ready / Reconciling / Stalled of an LLMBatchJob, from its phase and domain conditions (table above)."""
    by = _by_type(conditions)
    admitted = by.get("Admitted", {})
    if admitted.get("status") == "False" and admitted.get("reason") == "InvalidSpec":
        return _three("Stalled", "InvalidSpec", message)
    if phase == "Failed":
        reason = (
            "DeadlineExceeded"
            if _true(by, "DeadlineExceeded")
            else "BudgetExceeded"
            if _true(by, "BudgetExceeded")
            else "Failed"
        )
        return _three("Stalled", reason, message)
    if phase == "Pending" and _true(by, "BudgetExceeded"):
        return _three("Stalled", "BudgetExceeded", message)
    if phase in ("Succeeded", "Suspended"):
        return _three("Ready", phase, message)
    step = by.get("StepFailed", {})
    if step.get("status") == "True":
        return _three("Reconciling", str(step.get("reason") or "StepFailed"), message)
    if phase == "Pending" and admitted.get("status") == "False":
        return _three("Reconciling", str(admitted.get("reason") or "Pending"), message)
    return _three("Reconciling", phase or "Pending", message)


def schedule_conditions(problem: str | None, message: str, suspended: bool) -> list[Condition]:
    """Ready / Reconciling / Stalled of an LLMBatchSchedule (table above); `problem` is the Stalled reason."""
    if problem:
        return _three("Stalled", problem, message)
    return _three("Ready", "Suspended" if suspended else "Scheduled", message)


def pool_conditions(conditions: Iterable[Mapping[str, str]]) -> list[Condition]:
    """Ready / Reconciling / Stalled of an InferencePool, from its domain conditions (table above)."""
    by = _by_type(conditions)
    ready = by.get("Ready", {})
    reason, message = str(ready.get("reason") or ""), str(ready.get("message") or "")
    if ready.get("status") != "True" and reason in ("InvalidSpec", "SecretNotFound"):
        return _three("Stalled", reason, message)
    if _true(by, "ScalingConflict"):
        return _three("Stalled", "ScalingConflict", str(by["ScalingConflict"].get("message") or ""))
    progressing = by.get("Progressing", {})
    if progressing.get("reason") == "ProgressDeadlineExceeded":
        return _three("Stalled", "ProgressDeadlineExceeded", str(progressing.get("message") or ""))
    if ready.get("status") == "True":
        if _true(by, "Degraded"):
            return _three("Reconciling", "ReplicasUnavailable", str(by["Degraded"].get("message") or ""))
        return _three("Ready", "Available", message)
    if reason == "ScaledToZero":
        return _three("Ready", "ScaledToZero", message)
    return _three("Reconciling", reason or "Reconciling", message)
