"""The most frequent reasons a job's items are invalid or failed, for its status message.

Why: a job whose every item failed the same way (a template dividing by zero) ended "0/20 with a result, 20
invalid, 0 failed", and the reason was only in failures.jsonl. The message now names the top reasons with their
counts: "20 invalid (template_error: ZeroDivisionError: division by zero x20)".

Bounded, since the message is rebuilt on every status patch: the query reads at most `SCAN` rows of the state,
the first by line, found through `ix_items_state` (job, state, line), never the whole job. A job with more such
rows than that says its counts are of the first `SCAN` ("... in the first 2,000"). Reasons are grouped on their
first `TEXT` characters, so one long text does not make each row its own group.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from barge.ledger import Ledger

#: Rows of one state read at most per status message.
SCAN = 2_000
#: Reasons named at most per state.
TOP = 3
#: Characters of a reason it is grouped and shown by.
TEXT = 120

_TOP = (
    "SELECT error_type, reason, COUNT(*) AS n FROM ("  # noqa: S608 - constants only; values are parameters
    f"SELECT error_type, SUBSTR(reason, 1, {TEXT}) AS reason FROM items WHERE job = ? AND state = ? "
    "ORDER BY line LIMIT ?"
    ") AS first_rows GROUP BY error_type, reason ORDER BY n DESC, error_type, reason LIMIT ?"
)


@dataclass(frozen=True)
class Reason:
    error_type: str
    reason: str
    count: int

    def __str__(self) -> str:
        text = ": ".join(part for part in (self.error_type, self.reason) if part) or "no reason recorded"
        return f"{text} x{self.count:,}"


def top(ledger: Ledger, job: str, state: str, *, scan: int = SCAN, limit: int = TOP) -> list[Reason]:
    """The `limit` most frequent (error type, reason) pairs among the first `scan` items in `state`."""
    rows = ledger._rows(_TOP, (job, state, scan, limit))  # the ledger's own read path
    return [Reason(str(t or ""), str(r or ""), int(n)) for t, r, n in rows]


def note(ledger: Ledger, job: str, state: str, count: int, *, scan: int = SCAN) -> str:
    """The note after a status message's "N <state>": ` (reason xn; ...)`, or "" with none to name."""
    if count <= 0:
        return ""
    found = top(ledger, job, state, scan=scan)
    if not found:
        return ""  # counted, not stored (lines past an item limit): no reason to name
    named = "; ".join(str(r) for r in found)
    seen = sum(r.count for r in found)
    if count > scan:
        named += f" in the first {scan:,}"
    elif count > seen and len(found) == TOP:
        named += "; ..."
    return f" ({named})"  # at most TOP x TEXT characters and their figures
