"""The synchronous path's memory: at most a few pages of payloads held, whatever the job (REVIEW-3 C2).

`JobRunner._fallback` listed every pending item's payload before its first call: 5,000 prompts of 50 KB (238 MiB,
ordinary RAG-sized input on an engine pool, or any job's leftovers at its deadline) were held for the whole pass,
+496 MiB of RSS. Here the job is planned in the test's process, then a fresh process runs the synchronous pass
against `barge emulator` (the real OpenAI SDK, 16 calls in flight) and its peak RSS (VmHWM) is measured against its
RSS just before the step, as in test_memory_ingest.py (which says why RLIMIT_AS is not the measure).

Runtime: ~60 s on this shared 2-core machine.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

from tests.conftest import Factory, state
from tests.integration.test_memory_ingest import MIB, emulator, run_measured, runner_for

#: 16 calls in flight of 50 KB each are under 1 MiB; what the pass may add is then its buffers, not its input.
FALLBACK_GROWTH_MIB = 64


async def test_a_sync_pass_over_5000_prompts_of_50kb_holds_a_page_not_the_job(tmp_path: Path) -> None:
    n, size = 5_000, 50_000
    with emulator(tmp_path, "sync: {latencyMs: 1}\n") as url:
        runner = runner_for(tmp_path, url, "openai", n, size, sync=True)
        runner.ledger.ensure_job(runner.job.key, runner.job.spec_hash, runner.job.tenant, runner.job.model)
        await runner._plan()  # planned here: the measured process only sends
        assert runner.ledger.counts(runner.job.key)["pending"] == n
        report = run_measured(tmp_path, url, "openai", n, size, sync=True)
    assert isinstance(report, dict), report.stderr[-3000:]
    growth = (report["after"]["VmHWM"] - report["before"]["VmRSS"]) / MIB
    print(f"sync pass of {n} x {size} B: RSS {report['before']['VmRSS'] / MIB:.0f} MiB, peak +{growth:.0f} MiB")
    assert report["phase"] == "Succeeded"
    assert report["counts"]["succeeded"] == n
    assert report["counts"]["viaFallback"] == n
    results = (tmp_path / "out" / "results.jsonl").read_text().splitlines()
    assert len(results) == n
    assert {json.loads(r)["via"] for r in results} == {"sync"}
    assert growth < FALLBACK_GROWTH_MIB, f"the synchronous pass grew the process by {growth:.0f} MiB"


async def test_leftovers_without_a_sync_fallback_are_failed_page_by_page(
    start_emulator: Factory, tmp_path: Path
) -> None:
    """`fallback.sync: false` at the deadline: every pending item failed `deadline_exceeded`, no call made, in
    transactions of FAIL_PAGE ids (no payload read)."""
    from barge.batch import prices
    from barge.batch.fallback import FAIL_PAGE
    from barge.batch.runner import JobRunner
    from barge.ledger import Ledger
    from tests.integration.test_engine import FAST, make_job, provider_for, run_to_end

    n = FAIL_PAGE + 200
    emu = start_emulator()
    past = (datetime.now(UTC) - timedelta(minutes=1)).isoformat()
    job = make_job(tmp_path, "openai", n, deadline=past, fallback={"sync": False})
    runner = JobRunner(job, provider_for("openai", emu.url), Ledger(str(tmp_path / "l.db")), prices.load(), FAST)
    snap = await run_to_end(runner)
    assert snap.phase == "Failed"
    failures = [json.loads(x) for x in (tmp_path / "out" / "failures.jsonl").read_text().splitlines()]
    assert len(failures) == n
    assert {f["error_type"] for f in failures} == {"deadline_exceeded"}
    seen = state(emu)
    assert not seen["batches"]
    assert seen["sync_requests"] == 0
