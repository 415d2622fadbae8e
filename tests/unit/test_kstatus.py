"""kstatus.py's tables, row by row, and the kstatus reading of the result (what Flux and helm --wait conclude)."""

from __future__ import annotations

from typing import Any

import pytest

from barge.batch.faults import StepFault
from barge.operator import faultstatus, kstatus, pools, status


def cond(type_: str, ok: bool, reason: str = "R", message: str = "") -> dict[str, str]:
    return {"type": type_, "status": "True" if ok else "False", "reason": reason, "message": message}


def kstatus_reading(conditions: list[dict[str, Any]], generation: int = 1, observed: int = 1) -> str:
    """cli-utils' order (GITOPS.md): generation lag, Reconciling, Stalled, Ready=True, Ready=False."""
    by = {c["type"]: c for c in conditions}
    if observed != generation:
        return "InProgress"
    if by.get("Reconciling", {}).get("status") == "True":
        return "InProgress"
    if by.get("Stalled", {}).get("status") == "True":
        return "Failed"
    ready = by.get("Ready")
    if ready is None:
        return "Current"
    return "Current" if ready["status"] == "True" else "InProgress"


def true_one(conds: list[dict[str, str]]) -> tuple[str, str]:
    assert [c["type"] for c in conds] == ["Ready", "Reconciling", "Stalled"]
    on = [c for c in conds if c["status"] == "True"]
    assert len(on) == 1, conds  # exactly one of the three is True
    return on[0]["type"], on[0]["reason"]


ADMITTED = cond("Admitted", True, "Planned")


@pytest.mark.parametrize(
    ("phase", "domain", "expected", "reading"),
    [
        ("Pending", [cond("Admitted", False, "InvalidSpec")], ("Stalled", "InvalidSpec"), "Failed"),
        ("Failed", [ADMITTED, cond("DeadlineExceeded", True), cond("Failed", True)], ("Stalled", "DeadlineExceeded"),
         "Failed"),
        ("Failed", [ADMITTED, cond("BudgetExceeded", True), cond("Failed", True)], ("Stalled", "BudgetExceeded"),
         "Failed"),
        ("Failed", [ADMITTED, cond("Failed", True, "Fatal")], ("Stalled", "Failed"), "Failed"),
        ("Pending", [ADMITTED, cond("BudgetExceeded", True, "OverBudget")], ("Stalled", "BudgetExceeded"), "Failed"),
        ("Succeeded", [ADMITTED, cond("Complete", True)], ("Ready", "Succeeded"), "Current"),
        ("Succeeded", [ADMITTED, cond("DeadlineExceeded", True), cond("Complete", True)], ("Ready", "Succeeded"),
         "Current"),
        ("Suspended", [ADMITTED], ("Ready", "Suspended"), "Current"),
        ("Pending", [cond("Admitted", False, "NotFound")], ("Reconciling", "NotFound"), "InProgress"),
        ("Pending", [cond("Admitted", False, "Planning")], ("Reconciling", "Planning"), "InProgress"),
        ("Running", [ADMITTED, cond("BudgetExceeded", False)], ("Reconciling", "Running"), "InProgress"),
        ("FallingBack", [ADMITTED, cond("DeadlineExceeded", True)], ("Reconciling", "FallingBack"), "InProgress"),
        ("Submitting", [ADMITTED], ("Reconciling", "Submitting"), "InProgress"),
        ("Retrying", [ADMITTED], ("Reconciling", "Retrying"), "InProgress"),
        ("Running", [ADMITTED, cond("StepFailed", True, "LedgerError")], ("Reconciling", "LedgerError"), "InProgress"),
        ("Failed", [ADMITTED, cond("StepFailed", True, "X"), cond("DeadlineExceeded", True)],
         ("Stalled", "DeadlineExceeded"), "Failed"),
    ],
)  # fmt: skip
def test_job_table(phase: str, domain: list[dict[str, str]], expected: tuple[str, str], reading: str) -> None:
    conds = kstatus.job_conditions(phase, domain, "4200/6000 with a result")
    assert true_one(conds) == expected
    assert kstatus_reading(conds) == reading
    ready = conds[0]
    assert ready["reason"] == expected[1]  # Ready=False says why, too
    assert ready["message"] == "4200/6000 with a result"


@pytest.mark.parametrize(
    ("domain", "expected", "reading"),
    [
        ([cond("Ready", False, "InvalidSpec")], ("Stalled", "InvalidSpec"), "Failed"),
        ([cond("Ready", False, "SecretNotFound")], ("Stalled", "SecretNotFound"), "Failed"),
        ([cond("Ready", True, "ReplicasReady"), cond("ScalingConflict", True, "ForeignHPA", "hpa x")],
         ("Stalled", "ScalingConflict"), "Failed"),
        ([cond("Ready", False, "Starting"), cond("Progressing", False, "ProgressDeadlineExceeded")],
         ("Stalled", "ProgressDeadlineExceeded"), "Failed"),
        ([cond("Ready", True, "ReplicasReady"), cond("Degraded", True, "ReplicasUnavailable", "1/3")],
         ("Reconciling", "ReplicasUnavailable"), "InProgress"),
        ([cond("Ready", True, "ReplicasReady"), cond("Degraded", False), cond("ScalingConflict", False)],
         ("Ready", "Available"), "Current"),
        ([cond("Ready", True, "SecretFound")], ("Ready", "Available"), "Current"),
        ([cond("Ready", False, "ScaledToZero")], ("Ready", "ScaledToZero"), "Current"),
        ([cond("Ready", False, "Starting")], ("Reconciling", "Starting"), "InProgress"),
        ([cond("Ready", False, "NoDeployment")], ("Reconciling", "NoDeployment"), "InProgress"),
    ],
)  # fmt: skip
def test_pool_table(domain: list[dict[str, str]], expected: tuple[str, str], reading: str) -> None:
    conds = kstatus.pool_conditions(domain)
    assert true_one(conds) == expected
    assert kstatus_reading(conds) == reading


def test_generation_lag_reads_in_progress_until_observed() -> None:
    conds = kstatus.job_conditions("Succeeded", [ADMITTED], "done")
    assert kstatus_reading(conds, generation=2, observed=1) == "InProgress"
    old = {
        "phase": "Succeeded",
        "message": "done",
        "observedGeneration": 1,
        "conditions": status.merge_conditions([ADMITTED], conds, 1, "2026-01-01T00:00:00Z"),
    }
    new = status.observed(old, 2)
    assert new["observedGeneration"] == 2
    assert {c["observedGeneration"] for c in new["conditions"]} == {2}
    assert kstatus_reading(new["conditions"], generation=2, observed=new["observedGeneration"]) == "Current"
    ready = next(c for c in new["conditions"] if c["type"] == "Ready")
    assert ready["lastTransitionTime"] == "2026-01-01T00:00:00Z", "an unchanged condition keeps its transition time"


def test_a_terminal_job_from_before_kstatus_gets_its_conditions_when_edited() -> None:
    old = {"phase": "Failed", "message": "billing", "conditions": [ADMITTED, cond("Failed", True, "Fatal")]}
    new = status.observed(old, 4)
    by = {c["type"]: c for c in new["conditions"]}
    assert (by["Stalled"]["status"], by["Stalled"]["reason"], by["Stalled"]["message"]) == ("True", "Failed", "billing")
    assert by["Admitted"]["observedGeneration"] == 4


def test_status_carries_kstatus_next_to_domain_conditions_with_integer_generation() -> None:
    out = status.admitted_false([], "InvalidSpec", "invalid spec: x", 3)
    types = [c["type"] for c in out["conditions"]]
    assert types == ["Admitted", "Ready", "Reconciling", "Stalled"]
    assert out["observedGeneration"] == 3
    assert isinstance(out["observedGeneration"], int)
    assert all(c["observedGeneration"] == 3 for c in out["conditions"])


@pytest.mark.parametrize(
    ("body", "ready"),
    [
        ({"spec": {"engine": {}}, "status": {"readyReplicas": 2, "conditions": [cond("Reconciling", True)]}}, True),
        ({"spec": {"engine": {}}, "status": {"readyReplicas": 0, "conditions": [cond("Ready", True, "ScaledToZero")]}},
         False),
        ({"spec": {"provider": {}}, "status": {"conditions": [cond("Ready", True)]}}, True),
        ({"spec": {"provider": {}}, "status": {"conditions": [cond("Stalled", True, "SecretNotFound")]}}, False),
        ({"spec": {"provider": {}}, "status": {"conditions": [cond("Stalled", True, "ScalingConflict")]}}, True),
        ({"spec": {"provider": {}}}, False),
    ],
)  # fmt: skip
def test_jobs_run_on_a_pool_that_serves_not_on_kstatus_ready(body: dict[str, Any], ready: bool) -> None:
    assert pools.is_ready(body) is ready


def test_a_job_that_failed_at_its_deadline_while_steps_failed_is_stalled() -> None:
    order = ("Ready", "Reconciling", "Stalled")

    def ours(status_: dict[str, Any]) -> list[dict[str, str]]:
        return sorted((c for c in status_["conditions"] if c["type"] in order), key=lambda c: order.index(c["type"]))

    running = {"phase": "Running", "conditions": kstatus.job_conditions("Running", [ADMITTED], "m")}
    fault = StepFault("LedgerError", "database is locked", transient=True)
    stepping = faultstatus.fault_status(running, fault, 1, planned=True)
    assert true_one(ours(stepping)) == ("Reconciling", "LedgerError")
    failed = faultstatus.failed_at_deadline(stepping, fault, 1)
    assert true_one(ours(failed)) == ("Stalled", "DeadlineExceeded")
