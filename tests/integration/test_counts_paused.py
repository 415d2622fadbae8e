"""The plan's inserts and submission's two state moves count items themselves, the count triggers paused
(ledger/summary.py): `item_counts` stays equal to a full GROUP BY after a plan (frames with awkward text, an
escaped NUL, invalid rows), a re-plan over lines already there, an intent and a record over items that kept a
failed attempt's usage, an abandon, a count that does not match, a crash inside the transaction, and a ledger
whose triggers an older Barge put back. On SQLite the triggers really are paused (a probe counts the writes to
`item_counts`); the frames' rows are stored exactly as bound one by one. On SQLite and a real PostgreSQL server."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest

from barge.ledger import _RETRYING, ItemUpdate, Ledger, moves, summary
from barge.ledger.chunked import update_lines
from barge.ledger.moves import SHARD_LINES
from barge.ledger.planned import INSERT_ITEM
from tests.integration.test_ledger_counts import check, counted

JOB = "ns/paused/1"
AWKWARD = ['quote" back\\ slash/', "tab\t nl\n ctl\x01\x1f", "é 漢字 😀 \u2028", "", "'single'", "\\u0000 not a NUL"]


def rows_of(lines: range, every_invalid: int = 5) -> list[list[Any]]:
    """Rows as the planner sends them (`ledger.PLANNED` lists), every `every_invalid`-th line invalid."""
    out: list[list[Any]] = []
    for n in lines:
        if n % every_invalid == 0:
            out.append([f"#line-{n}", n, None, "invalid", "malformed_json", AWKWARD[n % len(AWKWARD)], 0, 0])
        else:
            out.append([f"c{n:05d}", n, AWKWARD[n % len(AWKWARD)] + str(n), "pending", "", "", n % 7, 40 + n])
    return out


def frames_of(rows: list[list[Any]], size: int = 50) -> list[bytes]:
    return [orjson.dumps(rows[k : k + size]) for k in range(0, len(rows), size)]


def items(ledger: Ledger, job: str = JOB) -> list[tuple[Any, ...]]:
    return ledger._rows(
        "SELECT custom_id, line, item_id, state, attempts, error_type, reason, est_tokens, size, via, shard, "
        "batch_id, input_tokens, output_tokens, cache_read_tokens, cache_write_tokens FROM items WHERE job = ? "
        "ORDER BY line",
        (job,),
    )


def probe(ledger: Ledger) -> None:
    """SQLite: count every write to `item_counts` (a trigger per row writes one per item)."""
    with ledger.engine.begin() as conn:
        conn.exec_driver_sql("CREATE TABLE probe (n INTEGER NOT NULL)")
        conn.exec_driver_sql("INSERT INTO probe VALUES (0)")
        for op in ("INSERT", "UPDATE"):
            conn.exec_driver_sql(
                f"CREATE TRIGGER probe_{op.lower()} AFTER {op} ON item_counts BEGIN UPDATE probe SET n = n + 1; END"  # noqa: S608
            )


def writes(ledger: Ledger) -> int:
    n = int(ledger._rows("SELECT n FROM probe", ())[0][0])
    with ledger.engine.begin() as conn:
        conn.exec_driver_sql("UPDATE probe SET n = 0")
    return n


def test_frames_store_exactly_what_rows_bound_one_by_one_store(ledger_url: str) -> None:
    ledger = Ledger(ledger_url)
    ledger.ensure_job(JOB, "h")
    ledger.ensure_job("ns/bound/1", "h")
    rows = rows_of(range(1, 121))
    nul = "a NUL \x00 inside" if not ledger.postgres else "PostgreSQL's text holds no NUL"
    rows[7][2] = nul  # SQLite: a frame its JSON cannot carry, bound row by row
    rows[8][2] = None
    assert ledger.add_frames(JOB, frames_of(rows), []) == len(rows)
    with ledger.engine.begin() as conn:  # the same rows bound one by one, as before frames
        cursor: Any = conn.connection.dbapi_connection.cursor()  # type: ignore[union-attr]
        cursor.executemany(ledger._sql(INSERT_ITEM), [("ns/bound/1", *r) for r in rows])
    assert items(ledger) == items(ledger, "ns/bound/1")
    assert [r[2] for r in items(ledger)[7:9]] == [nul, None]
    check(ledger)


def test_counts_stay_exact_through_plan_submission_and_their_failures(
    ledger_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    ledger = Ledger(ledger_url)
    ledger.ensure_job(JOB, "h", tenant="t", model="m")
    rows = rows_of(range(1, 201))
    rows[3][2] = "NUL \x00" if not ledger.postgres else "NUL"
    assert ledger.add_frames(JOB, frames_of(rows[:150]), []) == 150
    check(ledger)
    assert ledger.add_frames(JOB, frames_of(rows), []) == 200  # a re-plan: 150 lines there already
    assert ledger.add_planned(JOB, rows[190:], []) == 10
    check(ledger)
    assert ("ns/paused/1", "invalid", "", 40, 0, 0, 0, 0) in counted(ledger)

    # Items that kept a failed attempt's usage, or went through the synchronous path and came back pending.
    ledger.apply(JOB, [ItemUpdate("c00012", "pending", "overloaded", "retry", attempts=1, usage=(5, 1, 0, 0))])
    ledger.apply(JOB, [ItemUpdate("c00013", "pending", "timeout", "retry", attempts=1, via="sync")])
    check(ledger)
    pending = [r[0] for r in items(ledger) if r[3] == "pending" and r[1] <= 100]
    ledger.open_intent(JOB, "s1", 1, 1, 100, len(pending))
    check(ledger)
    ledger.record_batch(JOB, "s1", "b1", "openai", 1, len(pending), "in_progress", 0.0)
    check(ledger)
    assert ledger.members_of(JOB, "b1") == set(pending)

    with pytest.raises(RuntimeError, match="expected"):  # a count that does not match: the intent rolls back
        ledger.open_intent(JOB, "s2", 1, 101, 200, 1)
    check(ledger)
    rest = sum(1 for r in items(ledger) if r[3] == "pending")
    ledger.open_intent(JOB, "s2", 1, 101, 200, rest)
    ledger.abandon_intent(JOB, "s2")  # the create certainly did not land
    check(ledger)

    def crash(conn: Any, sql: str, *args: Any) -> int:  # the process dies inside the intent's transaction,
        moved = update_lines(conn, sql, *args)  # after its items moved (and, on SQLite, were counted)
        if "via = ''" not in sql:
            raise ConnectionResetError
        return moved

    monkeypatch.setattr(moves, "update_lines", crash)
    with pytest.raises(ConnectionResetError):
        ledger.open_intent(JOB, "s3", 1, 101, 200, rest)
    monkeypatch.undo()
    check(ledger)
    assert not ledger.intents_open(JOB)  # nothing of it was kept
    ledger.open_intent(JOB, "s3", 1, 101, 200, rest)
    ledger.record_batch(JOB, "s3", "b3", "openai", 1, rest, "in_progress", 0.0)
    check(ledger)
    assert ledger.counts(JOB) == {
        "submitted": 160,
        "invalid": 40,
        "viaFallback": 1,
        "retrying": 0,
        "budget": 0,
        "invalidOutput": 0,
    }


def test_sqlite_counts_the_plan_and_the_moves_without_a_trigger_per_row(tmp_path: Path) -> None:
    ledger = Ledger(str(tmp_path / "ledger.db"))
    ledger.ensure_job(JOB, "h")
    probe(ledger)
    rows = rows_of(range(1, 301))
    ledger.add_frames(JOB, frames_of(rows), [])
    assert writes(ledger) <= 2  # pending and invalid, once each (a trigger per row: 300)
    check(ledger)
    ledger.open_intent(JOB, "s1", 1, 1, 300, 240)
    assert writes(ledger) <= 2
    ledger.record_batch(JOB, "s1", "b1", "anthropic", 1, 240, "in_progress", 0.0)
    assert writes(ledger) <= 2
    check(ledger)

    ledger.add_frames(JOB, frames_of(rows_of(range(250, 351))), [])  # a re-plan: counted by the trigger instead
    assert writes(ledger) == 50
    check(ledger)

    # An older Barge put its own triggers back, which know no pause: they count, and nothing twice.
    older = [t.replace(summary.PAUSE_CLAUSE, "") for t in summary._sqlite_triggers() if "TRIGGER" in t]
    with ledger.engine.begin() as conn:
        for name in summary._installed(conn, False):
            conn.exec_driver_sql(f"DROP TRIGGER {name}")
        for ddl in older:
            ddl = ddl.replace(f"WHEN {summary.UNPAUSED} ", "")
            conn.exec_driver_sql(ddl.replace(summary.PREFIX, "items_counts_v1_"))
    ledger.add_frames(JOB, frames_of(rows_of(range(351, 401))), [])
    ledger.open_intent(JOB, "s2", 1, 301, 400, 80)
    ledger.record_batch(JOB, "s2", "b2", "anthropic", 1, 80, "in_progress", 0.0)
    check(ledger)
    assert ledger.counts(JOB)["submitted"] == 320


def test_sqlite_reads_one_state_through_the_state_index(tmp_path: Path) -> None:
    """`counts`' retrying items and the record's shard bounds read the state's range of ix_items_state, not every
    item of the job (SQLite's own choice without the `line > 0` bound), and find what the plain queries find."""
    ledger = Ledger(str(tmp_path / "ledger.db"))
    ledger.ensure_job(JOB, "h")
    ledger.add_frames(JOB, frames_of(rows_of(range(1, 301))), [])
    ledger.open_intent(JOB, "s1", 1, 101, 200, 80)
    ledger.apply(JOB, [ItemUpdate(f"c{k:05d}", "pending", "overloaded", "retry", attempts=1) for k in (1, 2, 3)])
    for sql, params, plain in (
        (_RETRYING, (JOB,), "SELECT COUNT(*) FROM items WHERE job = ? AND state = 'pending' AND attempts > 0"),
        (SHARD_LINES, (JOB, "s1"), "SELECT MIN(line), MAX(line) FROM items WHERE job = ? AND state = 'submitting' "),
    ):
        plan = ledger._rows(f"EXPLAIN QUERY PLAN {sql}", params)
        assert "ix_items_state" in str(plan), plan
        plain += "AND shard = ?" if len(params) == 2 else ""
        assert ledger._rows(sql, params) == ledger._rows(plain, params)
    assert ledger.counts(JOB)["retrying"] == 3
