"""The top invalid/failed reasons of a job's status message (ledger/reasons.py), on SQLite and PostgreSQL:
most frequent first with their counts, other jobs' rows never counted, long texts grouped by their head, and a
bounded read that says when its counts are of the first rows only."""

from __future__ import annotations

from barge.ledger import Ledger, reasons


def add(ledger: Ledger, job: str, rows: list[tuple[str, str, str]]) -> None:
    ledger.ensure_job(job, "h", tenant="t", model="m")
    ledger.add_items(
        job,
        (
            {"custom_id": f"c{n}", "line": n, "state": s, "error_type": t, "reason": r, "payload": "p"}
            for n, (s, t, r) in enumerate(rows, start=1)
        ),
    )


def test_the_most_frequent_reasons_first_with_their_counts(ledger_url: str) -> None:
    ledger = Ledger(ledger_url)
    div = ("invalid", "template_error", "template failed: ZeroDivisionError: division by zero")
    add(
        ledger,
        "ns/a",
        [div] * 5
        + [("invalid", "missing_id", "no id")] * 2
        + [("invalid", "malformed_json", "bad")] * 3
        + [("invalid", "empty_line", "")]
        + [("pending", "", "")] * 4
        + [("failed", "server_error", "500")] * 2,
    )
    add(ledger, "ns/other", [("invalid", "missing_id", "no id")] * 9)  # another job's rows never count
    assert reasons.note(ledger, "ns/a", "invalid", 11) == (
        " (template_error: template failed: ZeroDivisionError: division by zero x5; malformed_json: bad x3; "
        "missing_id: no id x2; ...)"
    )
    assert reasons.note(ledger, "ns/a", "failed", 2) == " (server_error: 500 x2)"
    assert reasons.note(ledger, "ns/a", "pending", 0) == ""
    ledger.close()


def test_long_reasons_are_grouped_by_their_head_and_a_big_state_says_it_was_sampled(ledger_url: str) -> None:
    ledger = Ledger(ledger_url)
    head = "x" * reasons.TEXT
    add(ledger, "ns/b", [("failed", "server_error", head + str(n)) for n in range(30)])
    assert reasons.top(ledger, "ns/b", "failed") == [reasons.Reason("server_error", head, 30)]
    assert reasons.note(ledger, "ns/b", "failed", 30, scan=10) == f" (server_error: {head} x10 in the first 10)"
    ledger.close()
