"""SQLite applies a batch's results, and submission moves a shard's items, with the item-count update trigger
dropped for the statements and put back in the same transaction (summary.update_trigger_dropped): the UPDATEs run
without it, the trigger is back as it was after every way the write can end (applied, rolled back for the
fallback, raised mid-statement), and the counts stay exact."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import event

from barge.ledger import Ledger, bulk, chunked, summary
from barge.ledger.bulk import Row

JOB = "ns/a/1"
UPDATE_TRIGGER = f"{summary.PREFIX}update"


def submitted_ledger(tmp_path: Path, n: int = 30) -> Ledger:
    ledger = Ledger(str(tmp_path / "ledger.db"))
    ledger.ensure_job(JOB, "h")
    ledger.add_items(JOB, ({"custom_id": f"c{k:02d}", "line": k, "state": "pending"} for k in range(1, n + 1)))
    ledger.open_intent(JOB, "s1", 1, 1, n, n)
    ledger.record_batch(JOB, "s1", "b1", "anthropic", 1, n, "ended", 0.0)
    return ledger


def rows(first: int, last: int) -> list[Row]:
    out: list[Row] = []
    for k in range(first, last + 1):
        if k % 3:
            out.append((f"c{k:02d}", "succeeded", "", "", 1, "batch", f"o{k}", k, 2 * k, 1, 0))
        else:
            out.append((f"c{k:02d}", "invalid", "invalid_request", "bad", 1, "batch", None, 0, 0, 0, 0))
    return out


def triggers(ledger: Ledger) -> list[tuple[Any, ...]]:
    return ledger._rows("SELECT name, sql FROM sqlite_master WHERE type = 'trigger' ORDER BY name", ())


def exact(ledger: Ledger) -> bool:
    sums = ", ".join(f"SUM({c})" for c in summary.USAGE)
    scanned = ledger._rows(f"SELECT job, state, via, COUNT(*), {sums} FROM items GROUP BY 1, 2, 3 ORDER BY 1, 2, 3", ())  # noqa: S608
    counted = ledger._rows(
        f"SELECT job, state, via, n, {', '.join(summary.USAGE)} FROM item_counts WHERE n <> 0 ORDER BY 1, 2, 3",  # noqa: S608
        (),
    )
    return scanned == counted


def test_the_item_update_runs_without_the_count_trigger_which_is_back_at_commit(tmp_path: Path) -> None:
    ledger = submitted_ledger(tmp_path)
    before = triggers(ledger)
    assert UPDATE_TRIGGER in {name for name, _ in before}
    statements: list[str] = []
    with ledger.engine.connect() as conn, conn.begin():
        conn.connection.dbapi_connection.set_trace_callback(statements.append)  # type: ignore[union-attr]
        assert bulk.apply(conn, False, JOB, rows(1, 10), "b1", submitted=True)
        conn.connection.dbapi_connection.set_trace_callback(None)  # type: ignore[union-attr]
    dropped = statements.index(f"DROP TRIGGER {UPDATE_TRIGGER}")
    updates = [i for i, s in enumerate(statements) if s.startswith("UPDATE items")]
    created = [i for i, s in enumerate(statements) if s.startswith(f"CREATE TRIGGER {UPDATE_TRIGGER}")]
    assert updates
    assert created
    assert dropped < min(updates)
    assert max(updates) < created[0]
    assert triggers(ledger) == before
    assert exact(ledger)
    assert ledger.counts(JOB)["succeeded"] == 7


@pytest.mark.parametrize("step", ["intent", "record"])
def test_submission_moves_run_without_the_count_trigger_which_is_back_at_commit(tmp_path: Path, step: str) -> None:
    ledger = Ledger(str(tmp_path / "ledger.db"))
    ledger.ensure_job(JOB, "h")
    ledger.add_items(JOB, ({"custom_id": f"c{k:04d}", "line": k, "state": "pending"} for k in range(1, 1201)))
    with ledger.engine.begin() as conn:  # one item kept a failed attempt's usage: it moves with the trigger on
        conn.exec_driver_sql("UPDATE items SET input_tokens = 9 WHERE job = ? AND custom_id = 'c0700'", (JOB,))
    if step == "record":
        ledger.open_intent(JOB, "s1", 1, 1, 1200, 1200)
    before = triggers(ledger)
    statements: list[str] = []

    def traced(dbapi_connection: Any, _record: Any) -> None:
        dbapi_connection.set_trace_callback(statements.append)

    ledger.engine.dispose()  # the pool's connections are made again, each traced
    event.listen(ledger.engine, "connect", traced)
    if step == "intent":
        ledger.open_intent(JOB, "s1", 1, 1, 1200, 1200)
    else:
        ledger.record_batch(JOB, "s1", "b1", "anthropic", 1, 1200, "in_progress", 0.0)
    event.remove(ledger.engine, "connect", traced)
    moves = [i for i, s in enumerate(statements) if s.startswith(("UPDATE items SET state", "UPDATE OR FAIL items"))]
    paused = [i for i, s in enumerate(moves) if "via = ''" in statements[s]]
    dropped = statements.index(f"DROP TRIGGER {UPDATE_TRIGGER}")
    created = [i for i, s in enumerate(statements) if s.startswith(f"CREATE TRIGGER {UPDATE_TRIGGER}")]
    assert len(paused) == -(-1200 // chunked.WINDOW)  # 1,200 lines window by window, the trigger dropped around all
    assert created
    assert dropped < moves[paused[0]]
    assert moves[paused[-1]] < created[0]
    assert any(i > created[0] for i in moves)  # then the lines again, with the trigger: c0700 moves there
    assert triggers(ledger) == before
    assert exact(ledger)
    assert ledger.counts(JOB)["submitting" if step == "intent" else "submitted"] == 1200


def test_the_trigger_is_back_after_the_fallback_and_after_an_error(tmp_path: Path) -> None:
    ledger = submitted_ledger(tmp_path)
    before = triggers(ledger)
    ledger.apply_rows(JOB, rows(1, 10), "b1")
    # c10 is applied already: the paused attempt matches 10 of 11 rows, is rolled back, and the chunk is applied
    # again with the trigger, which must be there
    ledger.apply_rows(JOB, rows(10, 20), "b1")
    assert triggers(ledger) == before
    assert exact(ledger)

    bad: list[Any] = rows(21, 30)
    bad[-1] = (*bad[-1][:7], object(), *bad[-1][8:])  # binding the last row's tokens fails, mid-statement
    with pytest.raises(sqlite3.ProgrammingError, match="binding"):
        ledger.apply_rows(JOB, bad, "b1")
    assert triggers(ledger) == before
    assert ledger.counts(JOB)["submitted"] == 10  # nothing of the failed chunk stayed
    assert exact(ledger)
    with ledger.engine.begin() as conn:
        conn.exec_driver_sql("UPDATE items SET state = 'failed' WHERE job = ? AND custom_id = 'c30'", (JOB,))
    assert exact(ledger)  # and the trigger goes on counting other writes


def test_the_trigger_is_never_dropped_outside_a_transaction(tmp_path: Path) -> None:
    ledger = submitted_ledger(tmp_path)
    with ledger.engine.connect() as conn:
        cursor = conn.connection.dbapi_connection.cursor()  # type: ignore[union-attr]
        with pytest.raises(RuntimeError, match="transaction"):
            summary.update_trigger_dropped(cursor).__enter__()
    assert UPDATE_TRIGGER in {name for name, _ in triggers(ledger)}


def test_a_chunk_adds_its_usage_and_its_expired_requests_to_the_batch_once(tmp_path: Path) -> None:
    ledger = submitted_ledger(tmp_path)
    chunk = rows(1, 20)
    chunk[4] = ("c05", "pending", "expired", "expired", None, "", None, 0, 0, 0, 0)
    chunk[5] = ("c06", "pending", "batch_expired", "expired", None, "", None, 0, 0, 0, 0)
    chunk[6] = ("c07", "refused", "refusal", "refused", 1, "batch", "", 3, 1, 4, 5)
    ledger.apply_rows(JOB, list(chunk), "b1")
    ledger.apply_rows(JOB, rows(21, 30), "b1")
    everything = chunk + rows(21, 30)
    usage = ledger._rows(
        "SELECT input_tokens, output_tokens, cache_read_tokens, cache_write_tokens, expired FROM batches", ()
    )
    assert usage == [(*(sum(r[i] for r in everything) for i in range(7, 11)), 2)]
    assert exact(ledger)
    assert ledger.counts(JOB)["pending"] == 2


def test_the_callers_rows_keep_their_order(tmp_path: Path) -> None:
    """The ledger applies a sorted copy; ingestion then writes parts/ from its own list in arrival order."""
    ledger = submitted_ledger(tmp_path)
    chunk = list(reversed(rows(1, 30)))
    arrived = list(chunk)
    ledger.apply_rows(JOB, chunk, "b1")
    assert chunk == arrived
    assert ledger.counts(JOB)["succeeded"] == 20


def test_a_full_disk_mid_statement_raises_as_itself_and_leaves_the_trigger(tmp_path: Path) -> None:
    """SQLITE_FULL rolls the whole transaction back, the drop with it: the trigger is not created a second time
    (which would fail and hide the disk's error)."""
    ledger = submitted_ledger(tmp_path, 300)
    before = triggers(ledger)
    big = [(*r[:6], "x" * 3000 if r[6] else None, *r[7:]) for r in rows(1, 300)]
    with ledger.engine.connect() as conn:
        dbapi: Any = conn.connection.dbapi_connection
        pages = dbapi.execute("PRAGMA page_count").fetchone()[0]
        dbapi.execute(f"PRAGMA max_page_count = {pages + 20}")
        with pytest.raises(sqlite3.OperationalError, match="full"), conn.begin():
            bulk.apply(conn, False, JOB, big, "b1", submitted=True)
        dbapi.execute("PRAGMA max_page_count = 1073741823")
    assert triggers(ledger) == before
    assert ledger.counts(JOB)["submitted"] == 300
    assert exact(ledger)
