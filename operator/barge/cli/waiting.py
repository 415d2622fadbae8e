"""What `barge run` does with a job that is not moving: wait (saying why) or stop (saying what to fix).

A job that cannot progress without a person used to print `Pending: 0/0 done, 0 in flight ...` forever; the
reason was only in a condition nobody printed. One table decides, from the snapshot's conditions:

| the snapshot says                                     | barge run                                    |
| ----------------------------------------------------- | -------------------------------------------- |
| Admitted=False, reason in WAITS (Planning, the        | waits; each progress line names the reason    |
| admission queue: QuotaExhausted, AdmissionWindow)     | and message                                  |
| Admitted=False, any other reason (PriceMissing,       | stops, exit 3, printing `reason: message`    |
| TemplateError, a policy or tenant-budget refusal ...) |                                              |
| the step raised PlanError or a policy's Refused       | stops, exit 3 (`refused`)                    |
| BudgetExceeded=True while Pending (over maxCostUSD)   | stops, exit 3                                |
| Succeeded / Failed                                    | stops, exit 0 / 1                            |

Unknown reasons stop: a wait this table does not know of is shown and ended, never looped on silently.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from barge.batch.render import PlanError
from barge.policy import Refused

#: Admitted=False reasons that resolve by themselves: the input is being read, or the job waits its turn.
WAITS = frozenset({"Planning", "QuotaExhausted", "AdmissionWindow"})
#: Exit status of `barge run` for a job that needs a person (1 is a Failed job, 2 an invalid manifest).
EXIT_NEEDS_A_PERSON = 3


@dataclass(frozen=True)
class Blocked:
    """Why a job cannot go on: the condition's reason and message."""

    reason: str
    message: str

    def __str__(self) -> str:
        return f"{self.reason}: {self.message}" if self.message else self.reason


def _conditions(conditions: Iterable[Mapping[str, str]]) -> dict[str, Mapping[str, str]]:
    return {str(c.get("type")): c for c in conditions}


def blocked(phase: str, conditions: Iterable[Mapping[str, str]]) -> Blocked | None:
    """The reason a job needs a person, or None while it moves or waits for something that will resolve."""
    if phase in ("Succeeded", "Failed"):
        return None
    by = _conditions(conditions)
    admitted = by.get("Admitted")
    if admitted is not None and admitted.get("status") == "False" and admitted.get("reason") not in WAITS:
        return Blocked(str(admitted.get("reason")), str(admitted.get("message", "")))
    over = by.get("BudgetExceeded")
    if over is not None and over.get("status") == "True" and phase == "Pending":
        return Blocked(str(over.get("reason", "OverBudget")), str(over.get("message", "")))
    return None


def waiting_on(conditions: Iterable[Mapping[str, str]]) -> str:
    """What a job not yet admitted waits for ("Planning: reading the input"); "" when admitted or blocked."""
    admitted = _conditions(conditions).get("Admitted")
    if admitted is None or admitted.get("status") != "False" or admitted.get("reason") not in WAITS:
        return ""
    return str(Blocked(str(admitted.get("reason")), str(admitted.get("message", ""))))


def refused(exc: PlanError | Refused) -> Blocked:
    """What a step's refusal means for `barge run`: a template that does not compile (or a plan over its limits),
    or a policy that says no (the ledger's limits, a tenant's budget): each needs a person, never a retry loop."""
    if isinstance(exc, Refused):
        return Blocked(exc.policy, exc.message)
    return Blocked("TemplateError" if exc.permanent else "PlanFailed", str(exc))


def admitted_false(conditions: list[dict[str, str]], why: Blocked) -> list[dict[str, str]]:
    """The conditions with Admitted=False naming `why`, as the operator's status would show them."""
    cond = {"type": "Admitted", "status": "False", "reason": why.reason, "message": why.message}
    return (
        [cond if c.get("type") == "Admitted" else c for c in conditions]
        if any(c.get("type") == "Admitted" for c in conditions)
        else [cond, *conditions]
    )
