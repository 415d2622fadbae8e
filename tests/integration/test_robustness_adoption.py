"""Orphan adoption on a shared Anthropic workspace: two jobs with shards of the same size both die between
creating their batch and recording it. Anthropic batches carry no metadata, so time window and size cannot tell
the two apart; each job must still end up with its own batch (confirmed by its results' custom ids), and
nothing may be submitted twice."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Callable, Iterator
from pathlib import Path

from barge.batch import prices
from barge.batch.runner import JobRunner
from barge.ledger import Ledger
from tests.conftest import Factory, state
from tests.integration.test_engine import FAST, provider_for
from tests.integration.test_robustness_money import job_of


def items(prefix: str, n: int) -> Callable[[], Iterator[tuple[int, bytes]]]:
    return lambda: ((i + 1, json.dumps({"id": f"{prefix}{i}", "text": f"claim {i}"}).encode()) for i in range(n))


class Crash(Exception):
    """The process dies right after the provider accepted the batch, before the ledger recorded it."""


def crash(*_: object) -> None:
    raise Crash


async def test_two_jobs_crashed_at_once_each_adopt_their_own_batch(start_emulator: Factory, tmp_path: Path) -> None:
    emu = start_emulator({"batch": {"processingSeconds": 1.5}})
    ledger = Ledger(str(tmp_path / "l.db"))
    jobs = {}
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
        jobs[name] = job_of(tmp_path / name, "anthropic", "claude-sonnet-4-6", items(f"{name}-", 25))
    for name in ("a", "b"):  # a creates first, then b: both die before recording
        doomed = JobRunner(jobs[name], provider_for("anthropic", emu.url), ledger, prices.load(), FAST)
        doomed._record = crash  # type: ignore[method-assign]
        with contextlib.suppress(Crash):
            await doomed.step()
    assert len(state(emu)["batches"]) == 2
    # Restarted, b resumes first: the earliest same-sized batch in its window is a's.
    runners = {n: JobRunner(jobs[n], provider_for("anthropic", emu.url), ledger, prices.load(), FAST) for n in "ba"}
    async with asyncio.timeout(60):
        while True:
            snaps = [await r.step() for r in runners.values()]
            assert all(s.phase != "Failed" for s in snaps), [s.message for s in snaps]
            if all(s.terminal for s in snaps):
                break
            await asyncio.sleep(0.1)
    batches = {b["id"]: set(b["custom_ids"]) for b in state(emu)["batches"]}
    assert len(batches) == 2, "nothing was submitted twice"
    for name in "ab":
        (own,) = ledger.batches_of(jobs[name].key)
        assert all(cid.startswith(f"{name}-") for cid in batches[own["batch_id"]]), "each job adopted its own batch"
        assert ledger.counts(jobs[name].key).get("succeeded", 0) + ledger.counts(jobs[name].key).get("refused", 0) == 25
