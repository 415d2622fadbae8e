"""Ledger shapes for ingestion (issue 33, "a new ledger representation, chosen from measurements"): the write of one
batch's results and the read that writes results.jsonl, today's shape beside the shape the issue proposes, on both
ledgers, with no network and no provider in the way (bench_ingest measures the whole path).

  update    today's: every result rewrites its item row in place, output included (`Ledger.apply_rows`, chunk by
            chunk as ingestion cuts them: ledger/bulk.py, sorted, COPY + UPDATE ... FROM on PostgreSQL, the count
            trigger paused on SQLite)
  append    each chunk's results appended to a table of their own in arrival order (one INSERT pass on SQLite, one
            binary COPY on PostgreSQL); item rows are not touched; the chunk's counts and usage are summed in
            Python and added as one row update per state (what "counts from the same appends" means)
  append+state  the same appends, plus each item's state and attempts updated in place (small rows, sorted): the
            shape that keeps `items.state` as the one place a reader looks, at the cost of the sorted pass
  append+fold  the same appends; only the items whose outcome differs from the batch's (anything but succeeded)
            updated in place as they come, and once the batch's last chunk is in, one statement moves every item
            still `submitted` to `succeeded` (small rows: no output, no usage): the issue's "items moved only when
            their outcome differs from the shard's", with `items.state` right again once the batch is ingested
  append+join  the same appends, then per chunk one UPDATE ... FROM the chunk's appended rows: every item moved to
            its state and usage as today, its output left in the appended row (item rows stay small, the text is
            written once): only the readers of outputs would change
  floor     the appends alone with no index, no counts and no transaction beyond one per chunk (SQLite: the
            same INSERT; PostgreSQL: COPY into an unlogged-free plain table): what storing the text costs at least

Then the read results.jsonl needs, every succeeded output in line order: from `items` (update), from the appended
table joined to `items` by custom id (append), and from the appended table in arrival order (what a results.jsonl
written "in one pass" from the appends would read; the line order would then be given up or restored by a sort).

Setup, not timed: a job of N items as submission leaves them (`submitted` in one batch), the same N rows of ~2 KB
random-word outputs for every shape, in a random order (a provider's order is not the ledger's). Each shape runs
on a fresh job of the same database, twice; the faster run counts. Size: BENCH_SHAPES_N (default 100000).
"""

from __future__ import annotations

import gc
import os
import random
import string
import tempfile
import time
from collections.abc import Callable, Iterator
from functools import partial
from operator import itemgetter
from pathlib import Path
from typing import Any

from _common import postgres_server

from barge.ledger import Ledger, summary
from barge.ledger.bulk import ROW, Row, tally

N = int(os.environ.get("BENCH_SHAPES_N", "100000"))
CHUNK_CHARS = 16 << 20  # batch/ingest.CHUNK_BYTES: a chunk per 16 M characters of result text
_R = random.Random(33)
WORDS = " ".join("".join(_R.choice(string.ascii_lowercase) for _ in range(_R.randint(2, 9))) for _ in range(600))

_APPENDED_COLUMNS = (
    "job text NOT NULL, seq bigint NOT NULL, custom_id text NOT NULL, state text NOT NULL, error_type text NOT NULL, "
    "reason text NOT NULL, attempts integer, via text NOT NULL, output text, input_tokens bigint NOT NULL, "
    "output_tokens bigint NOT NULL, cache_read_tokens bigint NOT NULL, cache_write_tokens bigint NOT NULL"
)
_TYPES = ("text", "int8", "text", "text", "text", "text", "int4", "text", "text", "int8", "int8", "int8", "int8")


def result_rows() -> list[Row]:
    rows: list[Row] = []
    for i in range(1, N + 1):
        start = _R.randrange(0, 1000)
        text = WORDS[start : start + 2000]
        if i % 100 == 0:
            rows.append((f"c{i:07d}", "invalid", "invalid_request", "bad request", 1, "batch", None, 0, 0, 0, 0))
        else:
            rows.append((f"c{i:07d}", "succeeded", "", "", 1, "batch", text, 700, 600, 0, 0))
    _R.shuffle(rows)
    return rows


def chunks(rows: list[Row]) -> Iterator[list[Row]]:
    chunk: list[Row] = []
    held = 0
    for r in rows:
        chunk.append(r)
        held += len(r[6] or "") + len(r[3])
        if held >= CHUNK_CHARS:
            yield chunk
            chunk, held = [], 0
    if chunk:
        yield chunk


def setup(ledger: Ledger, job: str) -> None:
    ledger.ensure_job(job, "bench")
    ledger.add_items(
        job, ({"custom_id": f"c{i:07d}", "line": i, "state": "pending", "size": 2000} for i in range(1, N + 1))
    )
    ledger.open_intent(job, "s0", 1, 1, N, N)
    ledger.record_batch(job, "s0", "b0", "anthropic", 1, N, "ended", time.time())


def _cursor(ledger: Ledger) -> tuple[Any, Any]:
    raw = ledger.engine.raw_connection()
    return raw, raw.cursor()


def make_tables(ledger: Ledger) -> None:
    raw, cur = _cursor(ledger)
    cur.execute(f"CREATE TABLE IF NOT EXISTS appended ({_APPENDED_COLUMNS}, PRIMARY KEY (job, seq))")
    cur.execute("CREATE INDEX IF NOT EXISTS ix_appended_cid ON appended (job, custom_id)")
    cur.execute(f"CREATE TABLE IF NOT EXISTS appended_floor ({_APPENDED_COLUMNS})")
    raw.commit()
    raw.close()


def _append(ledger: Ledger, cur: Any, table: str, job: str, seq: int, chunk: list[Row]) -> None:
    if ledger.postgres:
        with cur.copy(f"COPY {table} (job, seq, {', '.join(ROW)}) FROM STDIN (FORMAT BINARY)") as copy:
            copy.set_types(_TYPES)
            for n, r in enumerate(chunk, seq):
                copy.write_row((job, n, *r))
    else:
        sql = f"INSERT INTO {table} VALUES (?{', ?' * 12})"  # noqa: S608
        cur.executemany(sql, [(job, n, *r) for n, r in enumerate(chunk, seq)])


def _counts(ledger: Ledger, cur: Any, job: str, chunk: list[Row], *, items: bool = True) -> None:
    """The chunk's counts (`items`: when no item row moved, so no count trigger counted them) and the batch's usage,
    summed here and added once (`bulk.tally`, `summary.add`), as the trigger-paused path adds them today."""
    counts, usage = tally(job, chunk)
    if items:
        summary.add(cur, ledger.postgres, counts)
    p = "%s" if ledger.postgres else "?"
    cur.execute(
        f"UPDATE batches SET input_tokens = input_tokens + {p}, output_tokens = output_tokens + {p}, "  # noqa: S608
        f"cache_read_tokens = cache_read_tokens + {p}, cache_write_tokens = cache_write_tokens + {p}, "
        f"expired = expired + {p} WHERE job = {p} AND batch_id = 'b0'",
        (*usage, job),
    )


def write_update(ledger: Ledger, job: str, rows: list[Row]) -> None:
    for chunk in chunks(rows):
        ledger.apply_rows(job, chunk, "b0")


def write_append(ledger: Ledger, job: str, rows: list[Row], *, state: bool = False) -> None:
    raw, cur = _cursor(ledger)
    seq = 0
    p = "%s" if ledger.postgres else "?"
    for chunk in chunks(rows):
        _append(ledger, cur, "appended", job, seq, chunk)
        seq += len(chunk)
        if state:
            cur.executemany(
                f"UPDATE items SET state = {p}, attempts = {p} WHERE job = {p} AND custom_id = {p}",  # noqa: S608
                sorted(((r[1], r[4], job, r[0]) for r in chunk), key=lambda t: t[3]),
            )
        _counts(ledger, cur, job, chunk, items=not state)
        raw.commit()
    raw.close()


_FOLD = (
    "UPDATE items SET state = 'succeeded', via = 'batch', attempts = attempts + 1 "
    "WHERE job = ? AND batch_id = 'b0' AND state = 'submitted'"
)


def write_append_fold(ledger: Ledger, job: str, rows: list[Row]) -> None:
    """Appends as `append`; only the items whose outcome differs from the batch's (not succeeded, 1% here) are
    updated in place (their count trigger counts them), the succeeded results' usage is added to `item_counts` per
    chunk; once the batch's last chunk is in, one statement moves every item still `submitted` to `succeeded`
    (small rows, no output), counted by the trigger on PostgreSQL and by its row count on SQLite (the trigger
    dropped, as ledger/bulk.py does)."""
    raw, cur = _cursor(ledger)
    seq = 0
    p = "%s" if ledger.postgres else "?"
    differing = (
        f"UPDATE items SET state = {p}, error_type = {p}, reason = {p}, attempts = {p}, via = {p} "  # noqa: S608
        f"WHERE job = {p} AND custom_id = {p}"
    )
    for chunk in chunks(rows):
        _append(ledger, cur, "appended", job, seq, chunk)
        seq += len(chunk)
        rest = sorted(((*r[1:6], job, r[0]) for r in chunk if r[1] != "succeeded"), key=itemgetter(6))
        cur.executemany(differing, rest)
        counts, _ = tally(job, [r for r in chunk if r[1] == "succeeded"])
        summary.add(cur, ledger.postgres, {k: [0, *v[1:]] for k, v in counts.items()})  # usage only: n at the fold
        _counts(ledger, cur, job, chunk, items=False)  # the batch's usage
        raw.commit()
    if ledger.postgres:
        cur.execute(_FOLD.replace("?", "%s"), (job,))
    else:
        assert summary.pause(cur)
        with summary.update_trigger_dropped(cur):
            cur.execute(_FOLD, (job,))
            moved = cur.rowcount
        summary.resume(cur)
        moves = {(job, "succeeded", "batch"): [moved, 0, 0, 0, 0], (job, "submitted", ""): [-moved, 0, 0, 0, 0]}
        summary.add(cur, False, moves)
    raw.commit()
    raw.close()


_JOINED = (
    "UPDATE items SET state = a.state, error_type = a.error_type, reason = a.reason, "
    "attempts = COALESCE(a.attempts, items.attempts), via = a.via, input_tokens = a.input_tokens, "
    "output_tokens = a.output_tokens, cache_read_tokens = a.cache_read_tokens, "
    "cache_write_tokens = a.cache_write_tokens FROM appended a "
    "WHERE a.job = ? AND a.seq >= ? AND a.seq < ? AND items.job = a.job AND items.custom_id = a.custom_id"
)


def write_append_join(ledger: Ledger, job: str, rows: list[Row]) -> None:
    """Appends as `append`, then in the same transaction one set-based UPDATE ... FROM the chunk's appended rows
    moves each item to its state and usage, output left in the appended row: item rows stay small (the output is
    written once, appended), and `items` holds every state and usage as today, so only the readers of outputs
    change. SQLite: the count trigger dropped and the chunk's counts added from `bulk.tally`, as ledger/bulk.py does
    today; PostgreSQL: its statement trigger counts."""
    raw, cur = _cursor(ledger)
    seq = 0
    for chunk in chunks(rows):
        _append(ledger, cur, "appended", job, seq, chunk)
        bounds = (job, seq, seq + len(chunk))
        seq += len(chunk)
        if ledger.postgres:
            cur.execute(_JOINED.replace("?", "%s"), bounds)
            _counts(ledger, cur, job, chunk, items=False)
        else:
            assert summary.pause(cur)
            with summary.update_trigger_dropped(cur):
                cur.execute(_JOINED + " AND items.state = 'submitted'", bounds)
                assert cur.rowcount == len(chunk), (cur.rowcount, len(chunk))
            summary.resume(cur)
            _counts(ledger, cur, job, chunk)
        raw.commit()
    raw.close()


def write_floor(ledger: Ledger, job: str, rows: list[Row]) -> None:
    raw, cur = _cursor(ledger)
    seq = 0
    for chunk in chunks(rows):
        _append(ledger, cur, "appended_floor", job, seq, chunk)
        seq += len(chunk)
        raw.commit()
    raw.close()


def read(ledger: Ledger, job: str, sql: str) -> int:
    raw, cur = _cursor(ledger)
    p = "%s" if ledger.postgres else "?"
    cur.execute(sql.replace("?", p), (job,))
    n = chars = 0
    while page := cur.fetchmany(500):
        n += len(page)
        chars += sum(len(r[1]) for r in page)
    raw.close()
    return n


READS = {
    "update": "SELECT custom_id, output FROM items WHERE job = ? AND state = 'succeeded' ORDER BY line",
    "append": (
        "SELECT a.custom_id, a.output FROM appended a JOIN items i ON i.job = a.job AND i.custom_id = a.custom_id "
        "WHERE a.job = ? AND a.state = 'succeeded' ORDER BY i.line"
    ),
    "append, arrival order": (
        "SELECT custom_id, output FROM appended WHERE job = ? AND state = 'succeeded' ORDER BY seq"
    ),
}


def counted(ledger: Ledger, job: str) -> int:
    """Succeeded items in `item_counts` (with PostgreSQL's deltas not yet folded), as /metrics counts them."""
    p = "%s" if ledger.postgres else "?"
    sql = f"SELECT COALESCE(SUM(n), 0) FROM item_counts WHERE job = {p} AND state = 'succeeded'"  # noqa: S608
    if ledger.postgres:
        sql += " UNION ALL SELECT COALESCE(SUM(n), 0) FROM item_count_deltas WHERE job = %s AND state = 'succeeded'"
    raw, cur = _cursor(ledger)
    cur.execute(sql, (job, job) if ledger.postgres else (job,))
    n = sum(int(r[0]) for r in cur.fetchall())
    raw.close()
    return n


def timed(fn: Callable[[], Any]) -> tuple[float, float, Any]:
    gc.collect()
    started, cpu = time.perf_counter(), time.process_time()
    out = fn()
    return time.perf_counter() - started, time.process_time() - cpu, out


def run(name: str, url: str, rows: list[Row]) -> list[tuple[str, str, str, float, float]]:
    ledger = Ledger(url)
    make_tables(ledger)
    shapes: dict[str, Callable[[str], None]] = {
        "floor": lambda job: write_floor(ledger, job, rows),
        "update": lambda job: write_update(ledger, job, rows),
        "append": lambda job: write_append(ledger, job, rows),
        "append+state": lambda job: write_append(ledger, job, rows, state=True),
        "append+fold": lambda job: write_append_fold(ledger, job, rows),
        "append+join": lambda job: write_append_join(ledger, job, rows),
    }
    out = []
    for shape, write in shapes.items():
        best: tuple[float, float] | None = None
        for attempt in range(2):
            job = f"shapes/{shape}/{attempt}"
            setup(ledger, job)
            seconds, cpu, _ = timed(partial(write, job))
            if shape != "floor":  # what /metrics reads: the counts kept by the writes themselves
                assert counted(ledger, job) == N - N // 100, (shape, counted(ledger, job))
            best = (seconds, cpu) if best is None or seconds < best[0] else best
            if shape in ("update", "append") and attempt == 1:
                read_shapes = ["update"] if shape == "update" else ["append", "append, arrival order"]
                for r in read_shapes:
                    rs, rc, n = min((timed(partial(read, ledger, job, READS[r])) for _ in range(2)), key=itemgetter(0))
                    assert n == N - N // 100, (r, n)
                    out.append((name, "read", r, rs, rc))
        assert best is not None
        out.append((name, "write", shape, *best))
    ledger.close()
    return out


def main() -> None:
    rows = result_rows()
    table = []
    with postgres_server() as pg_url, tempfile.TemporaryDirectory(prefix="barge-bench-shapes-") as tmp:
        for name, url in (("sqlite", str(Path(tmp) / "ledger.db")), ("postgresql", pg_url)):
            table += run(name, url, rows)
    print(f"\nLedger shapes: {N:,} results of ~2 KB, one batch, chunks of {CHUNK_CHARS >> 20} M characters")
    print("| ledger | step | shape | seconds | results/s | CPU s (this process) | / floor |")
    print("| --- | --- | --- | ---: | ---: | ---: | ---: |")
    floors = {r[0]: r[3] for r in table if r[2] == "floor"}
    for name, step, shape, seconds, cpu in table:
        ratio = f"{seconds / floors[name]:.2f}x" if step == "write" else "-"
        print(f"| {name} | {step} | {shape} | {seconds:.2f} | {N / seconds:,.0f} | {cpu:.2f} | {ratio} |")


if __name__ == "__main__":
    main()
