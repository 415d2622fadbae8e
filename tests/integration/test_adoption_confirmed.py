"""Orphan adoption against the emulator with the real SDKs: an operator clock that is off (M6), and an Anthropic
workspace shared with another ledger (M7). A batch that landed must be adopted whatever the operator's clock
says (else the shard is created and billed twice); another ledger's batch of the same size must be neither
taken at once, nor ingested when its ids are not all ours, nor deleted."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from barge.batch import prices
from barge.batch.job import Job
from barge.batch.runner import JobRunner
from barge.ledger import Ledger
from tests.conftest import Factory, state
from tests.integration.test_engine import FAST, provider_for, run_to_end
from tests.integration.test_robustness_money import job_of

MODELS = {"anthropic": "claude-sonnet-4-6", "openai": "gpt-4o-mini"}


class Crash(Exception):
    """The process dies (after the create was accepted, or before it was sent)."""


def crash(*_: object, **__: object) -> Any:
    raise Crash


def numbered(ids: list[str]) -> Callable[[], Iterator[tuple[int, bytes]]]:
    return lambda: ((n, json.dumps({"id": i, "text": f"claim {i}"}).encode()) for n, i in enumerate(ids, start=1))


def runner(job: Job, ledger: Ledger, url: str, events: list[tuple[str, str]] | None = None) -> JobRunner:
    kind = job.spec.provider.type
    on_event = (lambda r, m, k: events.append((r, m))) if events is not None else None
    return JobRunner(job, provider_for(kind, url), ledger, prices.load(), FAST, on_event=on_event)


def shift_intents(ledger: Ledger, seconds: float) -> None:
    """The operator's clock was `seconds` fast when it wrote its intents."""
    with ledger.engine.begin() as conn:
        conn.exec_driver_sql("UPDATE intents SET created_at = created_at + ?", (float(seconds),))


@pytest.mark.parametrize(("kind", "fast"), [("openai", 120), ("openai", 3600), ("anthropic", 120)])
async def test_a_batch_that_landed_is_adopted_with_the_operator_clock_fast(
    start_emulator: Factory, tmp_path: Path, kind: str, fast: int
) -> None:
    emu = start_emulator({"batch": {"processingSeconds": 0.5}})
    ledger = Ledger(str(tmp_path / "l.db"))
    job = job_of(tmp_path, kind, MODELS[kind], numbered([f"c{i}" for i in range(10)]))
    doomed = runner(job, ledger, emu.url)
    doomed._record = crash  # type: ignore[method-assign]  # created at the provider, not recorded
    with contextlib.suppress(Crash):
        await doomed.step()
    assert len(state(emu)["batches"]) == 1
    shift_intents(ledger, fast)
    events: list[tuple[str, str]] = []
    snap = await run_to_end(runner(job, ledger, emu.url, events))
    assert snap.phase == "Succeeded", snap.message
    assert len(state(emu)["batches"]) == 1, "the shard was created a second time"
    assert [r for r, _ in events].count("Adopted") == 1


async def test_a_lone_same_sized_batch_of_another_ledger_is_not_taken_nor_deleted(
    start_emulator: Factory, tmp_path: Path
) -> None:
    """Probe A.20 with the SDK: team B's batch (its own ledger, the same default custom ids) is the only one of
    that size in team A's window when A restarts after dying between its intent and its create."""
    # B's batch must still run when A restarts (the case under test): 1 s was too short on a loaded machine,
    # where A's first step came after B's batch had ended (then it is confirmed by its results and adopted)
    emu = start_emulator({"batch": {"processingSeconds": 15.0}})
    ids = [str(i) for i in range(1, 11)]
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    job_a = job_of(tmp_path / "a", "anthropic", MODELS["anthropic"], numbered(ids))
    job_b = job_of(tmp_path / "b", "anthropic", MODELS["anthropic"], numbered(ids))
    ledger_a, ledger_b = Ledger(str(tmp_path / "a.db")), Ledger(str(tmp_path / "b.db"))
    team_b = runner(job_b, ledger_b, emu.url)
    await team_b.step()
    (theirs,) = [b["batch_id"] for b in ledger_b.batches_of(job_b.key)]
    doomed = runner(job_a, ledger_a, emu.url)
    doomed.provider.create_batch = crash  # type: ignore[method-assign]  # dies before its create is sent
    with contextlib.suppress(Crash):
        await doomed.step()
    assert ledger_a.intents_open(job_a.key)

    events: list[tuple[str, str]] = []
    team_a = runner(job_a, ledger_a, emu.url, events)
    await team_a.step()
    assert "Adopted" not in [r for r, _ in events], "a lone candidate still running was taken at once"
    assert "AdoptionPending" in [r for r, _ in events]
    snap_a = await run_to_end(team_a)
    assert snap_a.phase == "Succeeded", snap_a.message
    assert theirs in {b["id"] for b in state(emu)["batches"]}, "team A's cleanup deleted team B's batch"
    snap_b = await run_to_end(team_b)
    assert snap_b.phase == "Succeeded", snap_b.message
    assert ledger_b.counts(job_b.key).get("succeeded", 0) + ledger_b.counts(job_b.key).get("refused", 0) == 10


async def test_a_candidate_whose_results_name_other_ids_is_left_to_its_owner(
    start_emulator: Factory, tmp_path: Path
) -> None:
    """B's batch shares nine of A's ten custom ids: its first result is one of A's, but it is not A's batch."""
    emu = start_emulator({"batch": {"processingSeconds": 0.5}})
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    job_a = job_of(tmp_path / "a", "anthropic", MODELS["anthropic"], numbered([str(i) for i in range(1, 10)] + ["x"]))
    job_b = job_of(
        tmp_path / "b",
        "anthropic",
        MODELS["anthropic"],
        numbered([str(i) for i in range(1, 11)]),
        retention={"deleteProviderCopies": False},  # B's batch stays listed after B's end
    )
    ledger_a, ledger_b = Ledger(str(tmp_path / "a.db")), Ledger(str(tmp_path / "b.db"))
    team_b = runner(job_b, ledger_b, emu.url)
    await team_b.step()
    (theirs,) = [b["batch_id"] for b in ledger_b.batches_of(job_b.key)]
    assert (await run_to_end(team_b)).phase == "Succeeded"  # ended: its results exist when A looks
    doomed = runner(job_a, ledger_a, emu.url)
    doomed.provider.create_batch = crash  # type: ignore[method-assign]
    with contextlib.suppress(Crash):
        await doomed.step()
    snap_a = await run_to_end(runner(job_a, ledger_a, emu.url))
    assert snap_a.phase == "Succeeded", snap_a.message
    assert theirs not in [b["batch_id"] for b in ledger_a.batches_of(job_a.key)], "A adopted B's batch"
    assert ledger_a.counts(job_a.key).get("succeeded", 0) + ledger_a.counts(job_a.key).get("refused", 0) == 10
