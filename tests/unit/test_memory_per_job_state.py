"""Per-job state in the operator's memory is dropped when the job no longer needs it (REVIEW-3 L5).

`Context.deleting` was a set only ever added to, a terminal job's lock and quota mark stayed for the operator's
life, and every reconcile with an open intent loaded every batch id the ledger ever recorded.
"""

from __future__ import annotations

from pathlib import Path

from barge.ledger import Ledger
from barge.operator import jobs
from barge.operator import quota as quota_
from barge.operator.recent import RecentKeys


def test_deleted_jobs_are_forgotten_an_hour_after_their_deletion() -> None:
    now = [1000.0]
    ctx = jobs.Context(config=None, ledger=None, kube=None, prices=None)  # type: ignore[arg-type]
    if isinstance(ctx.deleting, RecentKeys):
        ctx.deleting.clock = lambda: now[0]
    for n in range(10_000):  # a day of churn: a deletion every 8.6 s
        ctx.deleting.add(f"ns/job-{n}/uid-{n}")
        now[0] += 8.64
    assert "ns/job-9999/uid-9999" in ctx.deleting  # the daemon of a job being deleted still sees it
    assert "ns/job-0/uid-0" not in ctx.deleting
    assert len(ctx.deleting) <= 3600 / 8.64 + 1  # an hour's deletions, not the day's


def test_recent_keys_keep_a_key_for_its_whole_hour() -> None:
    now = [0.0]
    keys = RecentKeys(keep=3600, clock=lambda: now[0])
    keys.add("a")
    now[0] = 3599.0
    keys.add("b")
    assert "a" in keys
    now[0] = 3601.0
    keys.add("c")
    assert "a" not in keys
    assert "b" in keys


def test_an_ended_job_leaves_no_quota_mark() -> None:
    queues = quota_.Queues()
    queues.marked["ns/j/u"] = "deployment"
    queues.forget("ns/j/u")
    assert "ns/j/u" not in queues.marked


def test_known_batch_ids_asks_only_for_the_listed_ids(tmp_path: Path) -> None:
    ledger = Ledger(str(tmp_path / "l.db"))
    for n in range(3):
        key = f"ns/j{n}/u"
        ledger.ensure_job(key, "h", "t", "m")
        ledger.add_items(key, [{"custom_id": "c1", "line": 1, "state": "pending", "payload": "p", "est_tokens": 1}])
        ledger.open_intent(key, "s00000", 1, 1, 1, 1)
        ledger.record_batch(key, "s00000", f"batch-{n}", "anthropic", 1, 1, "in_progress", 0.0)
    assert ledger.known_batch_ids(["batch-1", "batch-9"]) == {"batch-1"}
    assert ledger.known_batch_ids(f"x{n}" for n in range(1200)) == set()  # several queries of 500
