"""`/metrics` on a big ledger: 5,000 jobs and 1,000,000 items (issue 14, point 4: answer in < 250 ms).

The ledger is filled by SQL (`INSERT ... SELECT` from recursive counters, a few statements) with the counting
triggers in place, as the engine's writes would leave it: 90% of jobs ended (succeeded, refused, invalid,
failed; 5% of items through the synchronous path with usage), 10% running (pending, submitted), one batch per
job. The operator's book holds the same 5,000 jobs, as the watch would after a restart.

Baseline, measured in the same run on the same ledger: the full GROUP BYs over every item that /metrics ran
before the counts existed. Barge: a real HTTP GET of the operator's metrics server (best of 5 and median).
On SQLite and on a real PostgreSQL server (Debian's binaries, started here; BENCH_PG_URL to use another).
A second table: what the counting triggers cost the writes (Ledger.add_items and Ledger.apply, whatever path
they take on this commit), with the triggers and, on the same ledger, without them (alternately, best of two).
Sizes: BENCH_METRICS_JOBS (5000), BENCH_METRICS_ITEMS_PER_JOB (200), BENCH_METRICS_WRITE_ITEMS (50000).
"""

from __future__ import annotations

import asyncio
import os
import socket
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx2 as httpx
from _common import postgres_server

from barge.batch import prices
from barge.config import OperatorConfig
from barge.ledger import ItemUpdate, Ledger, summary
from barge.operator import metrics
from barge.operator.jobs import Context

JOBS = int(os.environ.get("BENCH_METRICS_JOBS", "5000"))
PER_JOB = int(os.environ.get("BENCH_METRICS_ITEMS_PER_JOB", "200"))
TARGET_MS = 250.0
WRITES = int(os.environ.get("BENCH_METRICS_WRITE_ITEMS", "50000"))
STEP = 250  # jobs per INSERT statement

_COUNTER = (
    "WITH RECURSIVE j(x) AS (SELECT {lo} UNION ALL SELECT x + 1 FROM j WHERE x < {hi}), "
    "k(y) AS (SELECT 1 UNION ALL SELECT y + 1 FROM k WHERE y < {per}) "
)
# State by item number (k mod 100) for ended jobs, pending/submitted for every tenth job (running).
_ITEMS = (
    "INSERT INTO items (job, custom_id, line, state, attempts, error_type, reason, est_tokens, size, via, "
    "input_tokens, output_tokens, cache_read_tokens, cache_write_tokens) "
    + _COUNTER
    + "SELECT 'ns' || (x - (x / 50) * 50) || '/job-' || x || '/uid-' || x, 'c' || y, y, "
    "CASE WHEN x - (x / 10) * 10 = 0 THEN (CASE WHEN y - (y / 2) * 2 = 0 THEN 'pending' ELSE 'submitted' END) "
    "WHEN y - (y / 100) * 100 < 90 THEN 'succeeded' WHEN y - (y / 100) * 100 < 94 THEN 'refused' "
    "WHEN y - (y / 100) * 100 < 97 THEN 'invalid' ELSE 'failed' END, 1, '', '', 100, 2000, "
    "CASE WHEN x - (x / 10) * 10 <> 0 AND y - (y / 20) * 20 = 0 THEN 'sync' ELSE '' END, "
    "CASE WHEN x - (x / 10) * 10 = 0 THEN 0 ELSE 100 END, CASE WHEN x - (x / 10) * 10 = 0 THEN 0 ELSE 50 END, 0, 0 "
    "FROM j, k"
)
_JOBS = (
    "INSERT INTO jobs (job, spec_hash, tenant, model, planned, total, phase, fatal, cutoff_done) "
    "SELECT 'ns' || (x - (x / 50) * 50) || '/job-' || x || '/uid-' || x, 'h', 't' || (x - (x / 20) * 20), "
    "'claude-sonnet-4-5', TRUE, {per}, 'Running', '', FALSE FROM j"
)
_BATCHES = (
    "INSERT INTO batches (job, batch_id, shard, provider, attempt, requests, status, submitted_at, ingested, "
    "canceled, input_tokens, output_tokens, cache_read_tokens, cache_write_tokens, expired, cleanup) "
    "SELECT 'ns' || (x - (x / 50) * 50) || '/job-' || x || '/uid-' || x, 'batch-' || x, 's1', 'anthropic', 1, "
    "{per}, 'ended', 1.0, x - (x / 10) * 10 <> 0, FALSE, 1000, 500, 0, 0, 0, 'done' FROM j"
)

#: What /metrics ran before the counts: GROUP BYs over every item of every job.
BASELINE = (
    "SELECT j.tenant, j.model, i.state, COUNT(*) FROM items i JOIN jobs j ON j.job = i.job "
    "GROUP BY j.tenant, j.model, i.state",
    "SELECT j.tenant, j.model, COALESCE(SUM(x.input_tokens), 0), COALESCE(SUM(x.output_tokens), 0), "
    "COALESCE(SUM(x.cache_read_tokens), 0), COALESCE(SUM(x.cache_write_tokens), 0) FROM items x "
    "JOIN jobs j ON j.job = x.job WHERE x.via = 'sync' GROUP BY j.tenant, j.model",
)


def build(ledger: Ledger) -> float:
    started = time.perf_counter()
    for lo in range(0, JOBS, STEP):
        counter = _COUNTER.format(lo=lo, hi=min(JOBS, lo + STEP) - 1, per=PER_JOB)
        with ledger.engine.begin() as conn:
            conn.exec_driver_sql(counter + _JOBS.format(per=PER_JOB))
            conn.exec_driver_sql(counter + _BATCHES.format(per=PER_JOB))
            conn.exec_driver_sql(_ITEMS.format(lo=lo, hi=min(JOBS, lo + STEP) - 1, per=PER_JOB))
    if ledger.postgres:
        with ledger.engine.begin() as conn:
            conn.exec_driver_sql("ANALYZE")
    return time.perf_counter() - started


def book() -> metrics.Book:
    found = metrics.Book()
    for x in range(JOBS):
        found.observe(
            {
                "type": "MODIFIED",
                "object": {
                    "kind": "LLMBatchJob",
                    "metadata": {"namespace": f"ns{x % 50}", "name": f"job-{x}", "uid": f"uid-{x}"},
                    "spec": {"deadline": "2030-01-01T00:00:00+00:00"},
                    "status": {
                        "phase": "Running" if x % 10 == 0 else "Succeeded",
                        "counts": {"total": PER_JOB, "pending": PER_JOB // 2, "submitted": PER_JOB // 2},
                        "startedAt": "2026-01-01T00:00:00+00:00",
                    },
                },
            }
        )
    return found


def timed(fn: Any, runs: int = 5) -> tuple[float, float]:
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        fn()
        times.append((time.perf_counter() - started) * 1000)
    return min(times), statistics.median(times)


async def scrape(ctx: Context) -> tuple[tuple[float, float], int]:
    port = free_port()
    runner = await metrics.start_server(ctx, port)
    try:
        async with httpx.AsyncClient() as client:
            times = []
            size = 0
            for _ in range(5):
                started = time.perf_counter()
                response = await client.get(f"http://127.0.0.1:{port}/metrics")
                response.raise_for_status()
                times.append((time.perf_counter() - started) * 1000)
                size = len(response.content)
    finally:
        await runner.cleanup()
    return (min(times), statistics.median(times)), size


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def write_rates(ledger: Ledger, job: str) -> tuple[float, float]:
    """(items planned/s, results applied/s) through Ledger.add_items and Ledger.apply, 5,000 per transaction."""
    ledger.ensure_job(job, "h", tenant="t", model="claude-sonnet-4-5")
    started = time.perf_counter()
    ledger.add_items(job, ({"custom_id": f"c{k}", "line": k, "state": "submitted"} for k in range(1, WRITES + 1)))
    planned = time.perf_counter() - started
    started = time.perf_counter()
    for first in range(1, WRITES + 1, 5000):
        last = min(WRITES + 1, first + 5000)
        ledger.apply(job, [ItemUpdate(f"c{k}", "succeeded", usage=(100, 50, 0, 0)) for k in range(first, last)])
    return WRITES / planned, WRITES / (time.perf_counter() - started)


def write_cost(ledger: Ledger) -> dict[str, tuple[float, float]]:
    """The same writes with the counting triggers and without them (dropped, then put back and recounted, on this
    throwaway ledger), alternately, twice: what keeping the counts costs the write path (best of two each)."""
    runs: dict[str, list[tuple[float, float]]] = {"with counts": [], "without": []}
    for attempt in range(2):
        summary.install(ledger.engine, ledger.postgres)
        runs["with counts"].append(write_rates(ledger, f"bench/with/{attempt}"))
        with ledger.engine.begin() as conn:
            for name in summary._installed(conn, ledger.postgres):
                conn.exec_driver_sql(f"DROP TRIGGER {name} ON items" if ledger.postgres else f"DROP TRIGGER {name}")
        runs["without"].append(write_rates(ledger, f"bench/without/{attempt}"))
    return {k: (max(r[0] for r in v), max(r[1] for r in v)) for k, v in runs.items()}


def measure(label: str, url: str) -> dict[str, Any]:
    ledger = Ledger(url)
    build_s = build(ledger)
    baseline = timed(lambda: [ledger._rows(sql, ()) for sql in BASELINE])
    rows = timed(ledger.metric_rows)
    ctx = Context(OperatorConfig(), ledger, None, prices.load())  # type: ignore[arg-type]
    ctx.book = book()
    http, size = asyncio.run(scrape(ctx))
    items = ledger._rows("SELECT COUNT(*) FROM items", ())[0][0]
    writes = write_cost(ledger)
    ledger.close()
    return {
        "writes": writes,
        "ledger": label,
        "items": items,
        "build_s": build_s,
        "baseline": baseline,
        "rows": rows,
        "http": http,
        "kb": size / 1024,
    }


def main() -> None:
    results = []
    with tempfile.TemporaryDirectory(prefix="barge-bench-") as tmp:
        results.append(measure("SQLite", str(Path(tmp) / "ledger.db")))
    with postgres_server() as pg:
        results.append(measure("PostgreSQL", pg))
    print(f"\n/metrics on a ledger of {JOBS:,} jobs (book of {JOBS:,} LLMBatchJobs); best / median of 5, ms")
    print(
        "| ledger | items | full GROUP BY (baseline) | ledger.metric_rows | GET /metrics | target | "
        "GET vs baseline | met |"
    )
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | --- |")
    for r in results:
        (b_min, b_med), (r_min, r_med), (h_min, h_med) = r["baseline"], r["rows"], r["http"]
        print(
            f"| {r['ledger']} | {r['items']:,} | {b_min:.0f} / {b_med:.0f} | {r_min:.0f} / {r_med:.0f} "
            f"| {h_min:.0f} / {h_med:.0f} | < {TARGET_MS:.0f} | {h_med / b_med:.2f}x | "
            f"{'yes' if h_med < TARGET_MS else 'NO'} |"
        )
    print(f"\nWhat keeping the counts costs the writes: {WRITES:,} items planned then applied, 5,000 per transaction")
    print("| ledger | plan items/s with counts | without | apply results/s with counts | without | apply cost |")
    print("| --- | ---: | ---: | ---: | ---: | ---: |")
    for r in results:
        (p_with, a_with), (p_without, a_without) = r["writes"]["with counts"], r["writes"]["without"]
        print(
            f"| {r['ledger']} | {p_with:,.0f} | {p_without:,.0f} | {a_with:,.0f} | {a_without:,.0f} "
            f"| {a_without / a_with - 1:+.0%} time |"
        )
    filled = ", ".join(f"{r['ledger']} {r['build_s']:.0f} s" for r in results)
    print(
        f"(ledger filled in {filled}, counting triggers on; response {results[0]['kb']:.0f} KB; the baseline is "
        "only the two GROUP BYs over the items, not a whole scrape; machine shared with other work)"
    )


if __name__ == "__main__":
    main()
