"""`item_counts` (ledger/summary.py) equals a full GROUP BY over the items after every kind of ledger write:
plan and re-plan, intents opened, abandoned and rolled back, batches recorded, results applied and re-applied,
a batch released, the synchronous path, retention, a crash mid-transaction, and an upgrade from a ledger that
had no counts. On SQLite and on a real PostgreSQL server."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from barge.config import OperatorConfig
from barge.ledger import ItemUpdate, Ledger, bulk, summary
from barge.ledger.bulk import Row
from barge.ledger.lifetime import drop_texts, forget_job, keep
from barge.operator.purge import purge_once

COLUMNS = ", ".join(summary.COUNTED[1:])


def counted(ledger: Ledger) -> list[tuple[Any, ...]]:
    ledger.fold_counts()
    rows = ledger._rows(f"SELECT job, state, via, n, {COLUMNS} FROM item_counts ORDER BY job, state, via", ())  # noqa: S608
    return [tuple(int(x) if i > 2 else x for i, x in enumerate(r)) for r in rows if any(r[3:])]


def scanned(ledger: Ledger) -> list[tuple[Any, ...]]:
    sums = ", ".join(f"SUM({c})" for c in summary.COUNTED[1:])
    sql = f"SELECT job, state, via, COUNT(*), {sums} FROM items GROUP BY job, state, via ORDER BY job, state, via"  # noqa: S608
    rows = ledger._rows(sql, ())
    return [tuple(int(x) if i > 2 else x for i, x in enumerate(r)) for r in rows]


def metric_scan(ledger: Ledger) -> dict[str, list[tuple[Any, ...]]]:
    """What metric_rows answered before the counts: GROUP BYs over every item."""
    usage = ", ".join(f"COALESCE(SUM(x.{c}), 0)" for c in summary.COUNTED[1:])
    return {
        "items": sorted(
            ledger._rows(
                "SELECT j.tenant, j.model, i.state, COUNT(*) FROM items i JOIN jobs j ON j.job = i.job "
                "GROUP BY j.tenant, j.model, i.state",
                (),
            )
        ),
        "sync": sorted(
            ledger._rows(
                f"SELECT j.tenant, j.model, {usage} FROM items x JOIN jobs j ON j.job = x.job "  # noqa: S608
                "WHERE x.via = 'sync' GROUP BY j.tenant, j.model",
                (),
            )
        ),
    }


def check(ledger: Ledger) -> None:
    assert counted(ledger) == scanned(ledger)
    rows = ledger.metric_rows()
    assert {
        k: sorted(tuple(int(x) if isinstance(x, int) else x for x in r) for r in rows[k]) for k in ("items", "sync")
    } == {
        k: [tuple(int(x) if not isinstance(x, str) else x for x in r) for r in v]
        for k, v in metric_scan(ledger).items()
    }


def plan(ledger: Ledger, job: str, n: int, invalid: int = 0) -> None:
    ledger.add_items(
        job,
        (
            {"custom_id": f"c{k}", "line": k, "state": "invalid" if k <= invalid else "pending", "payload": "p"}
            for k in range(1, n + 1)
        ),
    )


def test_counts_equal_a_full_group_by_after_every_kind_of_write(ledger_url: str) -> None:
    ledger = Ledger(ledger_url)
    check(ledger)  # empty
    ledger.ensure_job("ns/a/1", "h", tenant="team-a", model="m1")
    ledger.ensure_job("ns/b/2", "h", tenant="team-b", model="m2")
    plan(ledger, "ns/a/1", 30, invalid=2)
    plan(ledger, "ns/a/1", 35, invalid=2)  # a re-plan after a crash: the first 30 are already there
    plan(ledger, "ns/b/2", 10)
    check(ledger)

    ledger.open_intent("ns/a/1", "s1", 1, 3, 12, 10)
    with pytest.raises(RuntimeError):  # wrong count: the whole intent rolls back, the counts with it
        ledger.open_intent("ns/a/1", "s2", 1, 13, 30, 99)
    check(ledger)
    ledger.record_batch("ns/a/1", "s1", "b1", "openai", 1, 10, "in_progress", 0.0)
    ledger.open_intent("ns/a/1", "s2", 1, 13, 17, 5)
    ledger.abandon_intent("ns/a/1", "s2")  # the create certainly did not land
    check(ledger)

    results = [ItemUpdate(f"c{k}", "succeeded", attempts=1, output="o", usage=(10, 20, 3, 1)) for k in range(3, 8)]
    results.append(ItemUpdate("c8", "refused", "refusal", "refused by the model", attempts=1, usage=(5, 1, 0, 0)))
    results.append(ItemUpdate("c9", "pending", "overloaded", "retry", attempts=1))
    ledger.apply("ns/a/1", results, "b1")
    check(ledger)
    ledger.apply("ns/a/1", results, "b1")  # a crash replay re-applies the same chunk: nothing moves twice
    check(ledger)
    ledger.apply("ns/a/1", [ItemUpdate("nope", "succeeded", usage=(1, 1, 1, 1))])  # no such item: counts nothing
    check(ledger)

    ledger.release("ns/a/1", "b1")  # what is still submitted goes back to pending
    check(ledger)

    sync = [ItemUpdate(f"c{k}", "succeeded", attempts=1, via="sync", usage=(7, 8, 0, 0)) for k in range(20, 26)]
    sync.append(ItemUpdate("c26", "failed", "server_error", "gave up", attempts=3, via="sync"))
    ledger.apply("ns/a/1", sync)
    ledger.apply("ns/b/2", [ItemUpdate(f"c{k}", "succeeded", via="sync", usage=(1, 2, 0, 0)) for k in range(1, 11)])
    ledger.apply("ns/a/1", [ItemUpdate("c21", "succeeded", attempts=2, via="sync", usage=(9, 9, 0, 0))])  # usage
    check(ledger)

    def crash() -> None:  # a crash mid-transaction
        with ledger.engine.begin() as conn:
            conn.exec_driver_sql("UPDATE items SET state = 'failed' WHERE job = 'ns/a/1'")
            raise ConnectionResetError

    with pytest.raises(ConnectionResetError):
        crash()
    check(ledger)

    ledger.set_job("ns/b/2", phase="Succeeded", completed_at=1.0)
    keep(ledger, "ns/b/2", 2.0, 0, 0)  # retention drops its texts; the audit rows and their counts stay
    drop_texts(ledger, 3.0, finished_before=3.0)
    forget_job(ledger, "ns/a/1")
    check(ledger)

    if not ledger.postgres:  # SQLite's REPLACE deletes the old row: counted out, the new one counted in
        columns = "job, custom_id, line, state, attempts, error_type, reason, est_tokens, size, via, " + COLUMNS
        values = columns.replace("state", "'failed'")
        with ledger.engine.begin() as conn:
            conn.exec_driver_sql(
                f"INSERT OR REPLACE INTO items ({columns}) SELECT {values} FROM items "  # noqa: S608
                "WHERE job = 'ns/b/2' AND line <= 3"
            )
        check(ledger)

    with ledger.engine.begin() as conn:  # should items ever be deleted, they leave the counts too
        conn.exec_driver_sql("DELETE FROM items WHERE job = 'ns/a/1' AND line > 30")
    check(ledger)
    assert counted(ledger), "the test counted nothing"


def test_a_ledger_without_counts_is_counted_once_when_opened(ledger_url: str) -> None:
    ledger = Ledger(ledger_url)
    ledger.ensure_job("ns/a/1", "h", tenant="team-a", model="m1")
    plan(ledger, "ns/a/1", 20)
    ledger.apply("ns/a/1", [ItemUpdate(f"c{k}", "succeeded", via="sync", usage=(1, 2, 3, 4)) for k in range(1, 6)])
    # What a ledger written by an older Barge looks like: items, and no counts table or triggers.
    with ledger.engine.begin() as conn:
        for name in summary._installed(conn, ledger.postgres):
            conn.exec_driver_sql(f"DROP TRIGGER {name} ON items" if ledger.postgres else f"DROP TRIGGER {name}")
        conn.exec_driver_sql("DROP TABLE item_counts")
        conn.exec_driver_sql("UPDATE items SET state = 'failed' WHERE line > 15")
    ledger.close()

    reopened = Ledger(ledger_url)
    assert counted(reopened) == scanned(reopened)
    assert ("ns/a/1", "failed", "", 5, 0, 0, 0, 0) in counted(reopened)
    plan(reopened, "ns/a/1", 25)  # and kept from then on
    check(reopened)
    Ledger(ledger_url).close()  # opened again: nothing recounted, nothing lost
    check(reopened)


def test_the_purge_timer_folds_the_deltas_where_nothing_scrapes(ledger_url: str) -> None:
    ledger = Ledger(ledger_url)
    ledger.ensure_job("ns/a/1", "h", tenant="team-a", model="m1")
    plan(ledger, "ns/a/1", 50)
    if ledger.postgres:
        assert ledger._rows("SELECT COUNT(*) FROM item_count_deltas", ())[0][0] > 0
    purge_once(OperatorConfig(), ledger, 1.0)
    if ledger.postgres:
        assert ledger._rows("SELECT COUNT(*) FROM item_count_deltas", ())[0][0] == 0
    rows = ledger._rows(f"SELECT job, state, via, n, {COLUMNS} FROM item_counts WHERE n <> 0", ())  # noqa: S608
    assert [tuple(int(x) if i > 2 else x for i, x in enumerate(r)) for r in rows] == scanned(ledger)


def test_a_batch_counted_by_its_writer_with_the_trigger_paused_stays_exact(tmp_path: Path) -> None:
    """SQLite applies a batch's results with the update trigger paused and counts them itself (ledger/bulk.py).
    The counts stay exact; a chunk in which one item is not as submission left it, or a ledger whose triggers an
    older Barge put back, is applied with the trigger instead; the pause never outlives the transaction."""
    ledger = Ledger(str(tmp_path / "ledger.db"))
    job = "ns/a/1"
    ledger.ensure_job(job, "h", tenant="team-a", model="m1")
    plan(ledger, job, 40)
    ledger.open_intent(job, "s1", 1, 1, 30, 30)
    ledger.record_batch(job, "s1", "b1", "anthropic", 1, 30, "ended", 0.0)

    def rows(first: int, last: int) -> list[Row]:
        out: list[Row] = []
        for k in range(first, last + 1):
            if k % 4 == 0:
                out.append((f"c{k}", "succeeded", "", "", 1, "batch", f"o{k}", k, 2 * k, 1, 0))
            elif k % 4 == 1:
                out.append((f"c{k}", "refused", "refusal", "refused by the model", 1, "batch", "", 3, 1, 0, 2))
            elif k % 4 == 2:
                out.append((f"c{k}", "pending", "expired", "expired", None, "", None, 0, 0, 0, 0))
            else:
                out.append((f"c{k}", "invalid", "invalid_request", "bad", 1, "batch", None, 0, 0, 0, 0))
        return out

    def paused() -> int:
        return int(ledger._rows("SELECT COUNT(*) FROM item_counts_paused", ())[0][0])

    with ledger.engine.begin() as conn:
        assert bulk.apply(conn, False, job, rows(1, 10), "b1", submitted=True)
    assert paused() == 0
    check(ledger)
    assert ("ns/a/1", "succeeded", "batch", 2, 12, 24, 2, 0) in counted(ledger)

    chunk = rows(10, 20)  # c10 is already applied: nothing of the paused attempt may stay
    with ledger.engine.connect() as conn, conn.begin() as transaction:
        assert not bulk.apply(conn, False, job, list(chunk), "b1", submitted=True)
        transaction.rollback()
    assert paused() == 0
    assert ledger._rows("SELECT state FROM items WHERE job = ? AND custom_id = 'c12'", (job,)) == [("submitted",)]
    ledger.apply_rows(job, chunk, "b1")  # falls back to the trigger
    assert ledger._rows("SELECT state FROM items WHERE job = ? AND custom_id = 'c12'", (job,)) == [("succeeded",)]
    check(ledger)

    # An older Barge opened the ledger and put its own update trigger back, which knows no pause.
    older = next(t for t in summary._sqlite_triggers() if "AFTER UPDATE" in t).replace(summary.PAUSE_CLAUSE, "")
    with ledger.engine.begin() as conn:
        conn.exec_driver_sql(f"DROP TRIGGER {summary.PREFIX}update")
        conn.exec_driver_sql(older.replace(summary.PREFIX, "items_counts_v1_"))
    ledger.apply_rows(job, rows(21, 30), "b1")
    assert paused() == 0
    check(ledger)
    assert "submitted" not in ledger.counts(job)


def test_job_counts_match_the_items_one_by_one(ledger_url: str) -> None:
    """`Ledger.counts` (what each step's verdict reads: per state, viaFallback, retrying, budget, invalidOutput)
    equals the same figures counted here in Python from every item row, for a job holding each kind of item."""
    ledger = Ledger(ledger_url)
    job = "ns/job-counts/1"
    ledger.ensure_job(job, "h")
    n = 60
    ledger.add_items(job, ({"custom_id": f"c{i}", "line": i + 1, "state": "pending"} for i in range(n)))
    ledger.add_items(job, [{"custom_id": "#bad", "line": -1, "state": "invalid"}])
    changes = []
    for i in range(n):
        kind = i % 6
        if kind == 0:
            changes.append(ItemUpdate(f"c{i}", "succeeded", "", "", 1, "sync", "out"))
        elif kind == 1:
            changes.append(ItemUpdate(f"c{i}", "pending", "overloaded", "retry", 1))
        elif kind == 2:
            changes.append(ItemUpdate(f"c{i}", "failed", "budget_exceeded", "over budget", 0))
        elif kind == 3:
            changes.append(ItemUpdate(f"c{i}", "pending", "budget_exceeded", "held", 0, "sync"))
        elif kind == 4:
            changes.append(ItemUpdate(f"c{i}", "succeeded", "", "", 1, "batch", "out"))
        elif i % 12 == 5:  # an answer that broke spec.request.responseFormat: retried, or failed for good
            changes.append(ItemUpdate(f"c{i}", "pending", "invalid_output", "breaks the schema", 1))
        else:
            changes.append(ItemUpdate(f"c{i}", "failed", "invalid_output", "breaks the schema", 3, "batch"))
    ledger.apply(job, changes)
    rows = ledger._rows("SELECT state, via, line, attempts, error_type FROM items WHERE job = ?", (job,))
    expected: dict[str, int] = {}
    for state, *_ in rows:
        expected[state] = expected.get(state, 0) + 1
    expected["viaFallback"] = sum(r[1] == "sync" for r in rows)
    expected["retrying"] = sum(r[0] == "pending" and r[2] > 0 and r[3] > 0 for r in rows)
    expected["budget"] = sum(r[4] == "budget_exceeded" for r in rows)
    expected["invalidOutput"] = sum(r[4] == "invalid_output" for r in rows)
    assert ledger.counts(job) == expected
    assert (expected["viaFallback"], expected["retrying"], expected["budget"]) == (20, 15, 20)
    assert expected["invalidOutput"] == 10
    ledger.close()
