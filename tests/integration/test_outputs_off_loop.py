"""A job's output write runs off its engine loop (review 3, M10): while results.jsonl is being written to a slow
store, the other jobs of the loop go on. The write is made to block until a task on the same loop has run; with
the write on the loop (ba0610c) that task cannot run, and the write gives up after 10 s."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Any

import pytest

from barge.batch import prices, runner
from barge.batch.runner import JobRunner
from barge.ledger import Ledger
from tests.conftest import Factory
from tests.integration.test_engine import FAST, make_job, outputs, provider_for, run_to_end


async def test_a_slow_output_write_does_not_stall_the_loop(
    start_emulator: Factory, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    emu = start_emulator({"batch": {"processingSeconds": 0.2}})
    writing, other_job_ran = threading.Event(), threading.Event()
    write = runner.write_outputs
    seen: list[bool] = []

    def slow_store(*args: Any) -> Any:
        writing.set()
        seen.append(other_job_ran.wait(10))  # a stalled mount: returns once the loop has run something else
        return write(*args)

    async def other_job() -> None:
        while not writing.is_set():  # noqa: ASYNC110 - the write runs in another thread
            await asyncio.sleep(0.01)
        other_job_ran.set()

    monkeypatch.setattr(runner, "write_outputs", slow_store)
    job = make_job(tmp_path, "openai", 5)
    ticker = asyncio.create_task(other_job())
    snap = await run_to_end(
        JobRunner(job, provider_for("openai", emu.url), Ledger(str(tmp_path / "l.db")), prices.load(), FAST)
    )
    ticker.cancel()
    assert snap.phase == "Succeeded"
    assert seen == [True]  # the loop ran another job's work while the write was blocked
    assert len(outputs(tmp_path)[0]) == 5  # and the write completed
