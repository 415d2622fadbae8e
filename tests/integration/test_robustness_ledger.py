"""The ledger fails safe: a job whose status lists batches the ledger does not know is held (never submitted
again), money-bearing transactions are synced to disk, and driver errors never carry bound values."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from sqlalchemy import event
from sqlalchemy.exc import IntegrityError

from barge.batch import prices
from barge.batch.runner import JobRunner
from barge.ledger import Ledger
from tests.conftest import Factory, state
from tests.integration.test_engine import FAST, provider_for
from tests.integration.test_robustness_money import claims, job_of


async def test_a_lost_ledger_holds_the_job_instead_of_paying_twice(start_emulator: Factory, tmp_path: Path) -> None:
    emu = start_emulator({"batch": {"processingSeconds": 600}})
    job = job_of(tmp_path, "anthropic", "claude-sonnet-4-6", claims(30, 100))
    first = JobRunner(job, provider_for("anthropic", emu.url), Ledger(str(tmp_path / "a.db")), prices.load(), FAST)
    snap = await first.step()
    assert snap.phase == "Running"
    ids = tuple(b["id"] for b in snap.batches)
    assert len(ids) == 1
    # The operator restarts without its volume: a fresh ledger, and the job's status as the API server keeps it.
    lost = replace(job, status_batches=ids)
    events: list[str] = []
    fresh = Ledger(str(tmp_path / "b.db"))
    for _ in range(3):
        runner = JobRunner(lost, provider_for("anthropic", emu.url), fresh, prices.load(), FAST)
        runner.on_event = lambda reason, message, kind: events.append(reason)
        snap = await runner.step()
        lost = replace(lost, reported=frozenset({"LedgerMismatch"}))
    cond = next(c for c in snap.conditions if c["type"] == "LedgerMismatch")
    assert cond["status"] == "True"
    assert ids[0] in cond["message"]
    assert snap.phase == "Pending"
    assert snap.extra["ledger_mismatch"] == list(ids)
    assert events == ["LedgerMismatch"], "announced once, nothing else done"
    assert len(state(emu)["batches"]) == 1, "no second batch"
    assert fresh.job(lost.key) is None, "not even planned again"


def test_intent_and_batch_record_are_synced_at_commit(tmp_path: Path) -> None:
    ledger = Ledger(str(tmp_path / "l.db"))
    seen: list[str] = []
    event.listen(ledger.engine, "before_cursor_execute", lambda *args: seen.append(str(args[2]).split("(")[0]))
    ledger.ensure_job("j", "h")
    ledger.add_items("j", [{"custom_id": "c1", "line": 1, "state": "pending", "payload": "x"}])
    ledger.open_intent("j", "s00000", 1, 1, 1, 1)
    ledger.record_batch("j", "s00000", "msgbatch_1", "anthropic", 1, 1, "in_progress", 0.0)
    statements = [s.strip() for s in seen]
    for table in ("INSERT INTO intents", "INSERT INTO batches"):
        at = next(i for i, s in enumerate(statements) if s.startswith(table))
        before = [s for s in statements[:at] if s.startswith("PRAGMA synchronous")]
        assert before[-1] == "PRAGMA synchronous=FULL", statements
    assert statements[-1] == "PRAGMA synchronous=NORMAL"
    with ledger.engine.connect() as conn:  # everyday writes stay on NORMAL (WAL: durable across crashes)
        assert conn.exec_driver_sql("PRAGMA synchronous").scalar() == 1


def test_driver_errors_do_not_carry_parameters(tmp_path: Path) -> None:
    ledger = Ledger(str(tmp_path / "l.db"))
    ledger.ensure_job("j", "h")
    ledger.record_batch("j", "s1", "batch-with-secret-text", "anthropic", 1, 1, "x", 0.0)
    with pytest.raises(IntegrityError) as raised:
        ledger.record_batch("j", "s1", "batch-with-secret-text", "anthropic", 1, 1, "x", 0.0)
    assert "batch-with-secret-text" not in str(raised.value)
    assert "hidden" in str(raised.value)
