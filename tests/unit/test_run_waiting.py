"""`barge run`'s one table (cli/waiting.py): which conditions it waits on, saying why, and which stop it."""

from __future__ import annotations

import pytest

from barge.batch.render import PlanError
from barge.batch.snapshot import Snapshot
from barge.cli import local, waiting
from barge.policy import Refused


def admitted(reason: str, message: str = "m", status: str = "False") -> list[dict[str, str]]:
    return [{"type": "Admitted", "status": status, "reason": reason, "message": message}]


@pytest.mark.parametrize("reason", ["PriceMissing", "TemplateError", "TenantBudgetExceeded", "CredentialPolicy", "New"])
def test_not_admitted_for_a_reason_no_wait_resolves_stops(reason: str) -> None:
    assert waiting.blocked("Pending", admitted(reason, "why")) == waiting.Blocked(reason, "why")
    assert waiting.waiting_on(admitted(reason)) == ""


@pytest.mark.parametrize("reason", sorted(waiting.WAITS))
def test_a_wait_that_resolves_is_waited_on_and_named(reason: str) -> None:
    assert waiting.blocked("Queued", admitted(reason, "3rd in the queue")) is None
    assert waiting.waiting_on(admitted(reason, "3rd in the queue")) == f"{reason}: 3rd in the queue"


def test_over_budget_while_pending_stops_and_an_ended_job_is_no_blocked_one() -> None:
    over = [{"type": "BudgetExceeded", "status": "True", "reason": "OverBudget", "message": "$9 > $5"}]
    assert str(waiting.blocked("Pending", over)) == "OverBudget: $9 > $5"
    assert waiting.blocked("Running", over) is None  # resubmission stopped; the job goes on with what it has
    assert waiting.blocked("Failed", admitted("PriceMissing")) is None
    assert waiting.blocked("Running", admitted("Planned", status="True")) is None


def test_refusals_raised_by_a_step_name_their_rule() -> None:
    assert waiting.refused(Refused("ItemLimit", "over 1,000 items")) == waiting.Blocked("ItemLimit", "over 1,000 items")
    assert waiting.refused(PlanError("does not compile")).reason == "TemplateError"
    assert waiting.refused(PlanError("took too long", permanent=False)).reason == "PlanFailed"
    conds = waiting.admitted_false(admitted("Planning", "reading"), waiting.Blocked("ItemLimit", "over"))
    assert conds == admitted("ItemLimit", "over")
    assert waiting.admitted_false([], waiting.Blocked("X", "y")) == admitted("X", "y")


def test_each_progress_line_names_what_the_job_waits_for() -> None:
    counts = dict.fromkeys(("total", "succeeded", "refused", "submitted", "pending", "invalid", "failed"), 0)
    snap = Snapshot("Pending", counts, {"costUSD": "0"}, [], admitted("Planning", "reading the input"), "")
    assert local._progress_line(snap).endswith("(waiting: Planning: reading the input)")
    assert not local._stops(snap)
    snap.conditions = admitted("PriceMissing", "no price")
    assert "waiting" not in local._progress_line(snap)
    assert local._stops(snap)
