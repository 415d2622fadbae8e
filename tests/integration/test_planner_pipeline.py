"""The planner pipeline under a bad input or a failing ledger (review 3: H7, M12), with the real planner server
and process. An input that gives nothing (a FIFO nobody writes) fails the plan after `read_seconds`, without a
thread of the event loop's default executor; a ledger write error is raised as itself at once, instead of a
deadlock of the two pipes ended only by the wall limit as "planning took longer than"."""

from __future__ import annotations

import asyncio
import json
import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy.exc import OperationalError

from barge.batch import faults, planner
from barge.batch.plan_input import InputStalled
from barge.ledger import Ledger
from barge.storage import StorageError, StoragePolicy, read_lines

SPEC = {
    "provider": {"type": "anthropic", "model": "claude-haiku-4-5", "secretRef": {"name": "k"}},
    "input": {"url": "unused"},
    "output": {"url": "unused"},
    "request": {"template": "{{ text }}", "maxTokens": 50},
}
WHAT = planner.PlanInput(SPEC, "2026-11-30", "acme", "claude-haiku-4-5", "anthropic")


def executor_threads() -> int:
    return sum(t.name.startswith("asyncio_") for t in threading.enumerate())


def test_h7_an_input_that_gives_nothing_fails_the_plan_and_takes_no_loop_thread(tmp_path: Path) -> None:
    fifo = tmp_path / "claims.jsonl"
    os.mkfifo(fifo)

    def lines() -> Iterator[tuple[int, bytes]]:
        with open(fifo, "rb") as handle:  # open(2) of a FIFO nobody writes blocks
            for n, line in enumerate(handle, start=1):
                yield n, line.rstrip(b"\n")

    ledger = Ledger(str(tmp_path / "l.db"))
    ledger.ensure_job("acme/j/u", "h", "acme", "claude-haiku-4-5")
    limits = planner.PlanLimits(wall_seconds=60, read_seconds=1)

    async def attempts() -> list[str]:
        out = []
        for _ in range(3):  # every retry, as the engine re-plans
            with pytest.raises(InputStalled) as caught:
                await planner.plan("acme/j/u", WHAT, lines, ledger, limits)
            fault = faults.classify(caught.value)
            out.append(f"{caught.value} {fault.reason} transient={fault.transient} loop threads={executor_threads()}")
        return out

    try:
        said = asyncio.run(attempts())
    finally:
        release_readers(fifo)
    assert all("the input gave nothing for 1 s" in s and "StorageError transient=True" in s for s in said), said
    # the loop's default executor does not grow with the attempts (ba0610c: one more blocked thread each)
    assert len({s.rsplit("=", 1)[1] for s in said}) == 1, said


def test_h7_the_reviews_probe_a_fifo_under_the_tenants_prefix_is_refused_before_it_is_opened(tmp_path: Path) -> None:
    """p_fifo.py as the review ran it: `read_lines` of a FIFO under the tenant's own file:// prefix."""
    root = tmp_path / "data" / "acme" / "in"
    root.mkdir(parents=True)
    os.mkfifo(root / "claims.jsonl")
    policy = StoragePolicy(prefixes=(f"file://{tmp_path}/data/acme/",))
    url = f"file://{root}/claims.jsonl"
    ledger = Ledger(str(tmp_path / "l.db"))
    ledger.ensure_job("acme/j/u", "h", "acme", "claude-haiku-4-5")
    limits = planner.PlanLimits(wall_seconds=60, read_seconds=30)
    try:
        with pytest.raises(StorageError, match="not a regular file"):
            asyncio.run(planner.plan("acme/j/u", WHAT, lambda: read_lines(url, policy), ledger, limits))
    finally:
        release_readers(root / "claims.jsonl")


def release_readers(fifo: Path) -> None:
    """Let every open(2) blocked on the FIFO return (a writer appears, then goes: they read EOF). In the operator
    a FIFO is refused before it is opened (barge/storage/local.py)."""
    for _ in range(50):
        try:
            os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        except OSError:  # ENXIO: nobody has it open for reading any more
            return
        time.sleep(0.02)


class FullLedger(Ledger):
    """The ledger's disk fills up after the first write."""

    writes = 0

    def add_frames(self, job: str, frames: Any, payload_pages: Any) -> int:
        self.writes += 1
        if self.writes > 1:
            raise OperationalError("INSERT", {}, Exception("database or disk is full"))
        return super().add_frames(job, frames, payload_pages)


def test_m12_a_ledger_error_while_planning_is_raised_not_a_wall_timeout(tmp_path: Path) -> None:
    pad = "p" * 2000

    def lines() -> Iterator[tuple[int, bytes]]:  # ~60 MB: far more than both pipes and the child's buffer hold
        for i in range(30_000):
            yield i + 1, json.dumps({"id": f"c{i}", "text": f"{i} {pad}"}).encode()

    ledger = FullLedger(str(tmp_path / "l.db"))
    ledger.ensure_job("acme/full/u", "h", "acme", "claude-haiku-4-5")
    limits = planner.PlanLimits(wall_seconds=30)
    with pytest.raises(OperationalError, match="disk is full"):
        asyncio.run(planner.plan("acme/full/u", WHAT, lines, ledger, limits))
    assert ledger.writes == 2
