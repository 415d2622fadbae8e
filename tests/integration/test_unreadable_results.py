"""Result lines that cannot be read (cut short, invalid UTF-8, a lone surrogate, JSON of the wrong shape) end in a
visible state, not in a job that fails every step.

Ingestion parses the provider's JSONL itself (issue 14). Before, one such line raised out of the whole ingestion,
and every later step downloaded the results again and failed on the same line: the job held its items `submitted`
until its deadline, or for ever. The emulator's `garbled` outcome answers (and bills) a request as succeeded and
serves its results line unreadable, one of four ways (`emulator.core.garble`).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from barge.batch import prices
from barge.batch.runner import JobRunner
from barge.ledger import Ledger
from tests.conftest import Factory
from tests.integration.test_engine import FAST, check_accounting, make_job, provider_for, run_to_end

N = 200


def garbled_ids(emu: object, batch_index: int) -> set[str]:
    ordered = sorted(emu.store.batches.values(), key=lambda b: b.created_at)  # type: ignore[attr-defined]
    return {item.custom_id for item, ans in ordered[batch_index].answers() if ans.garbled}


@pytest.mark.parametrize("kind", ["anthropic", "openai"])
async def test_unreadable_lines_are_retried_and_announced(start_emulator: Factory, tmp_path: Path, kind: str) -> None:
    emu = start_emulator({"batch": {"outcomes": {"garbled": 0.1}}})
    events: list[tuple[str, str, str]] = []
    runner = JobRunner(
        make_job(tmp_path, kind, N),
        provider_for(kind, emu.url),
        Ledger(str(tmp_path / "ledger.db")),
        prices.load(),
        FAST,
        on_event=lambda *e: events.append(e),
    )
    snap = await run_to_end(runner)
    first = garbled_ids(emu, 0)
    assert 0 < len(first) < N
    assert snap.phase == "Succeeded"
    ok, bad = check_accounting(tmp_path, snap, N)
    unreadable = [m for reason, m, kind_ in events if reason == "UnreadableResults" and kind_ == "Warning"]
    ordered = sorted(emu.store.batches.values(), key=lambda b: b.created_at)
    garbled = [(b.id, sum(a.garbled for _, a in b.answers())) for b in ordered]
    assert [m.split(" could not")[0] for m in unreadable] == [
        f"{n} result lines of batch {batch_id}" for batch_id, n in garbled if n
    ]  # one event per batch with such lines, each with its count
    second = ordered[1]
    assert {item.custom_id for item in second.items} == first  # exactly the unreadable ones went again
    attempts = {r["custom_id"]: r["attempt"] for r in ok}
    assert all(attempts[c] >= 2 for c in first if c in attempts)
    assert not [f for f in bad if f["error_type"] != "unreadable_result"]


async def test_a_wholly_unreadable_results_file_fails_its_items_after_their_attempts(
    start_emulator: Factory, tmp_path: Path
) -> None:
    emu = start_emulator({"batch": {"outcomes": {"garbled": 1.0}}})
    events: list[tuple[str, str, str]] = []
    runner = JobRunner(
        make_job(tmp_path, "openai", 40, retry={"maxAttempts": 2}),
        provider_for("openai", emu.url),
        Ledger(str(tmp_path / "ledger.db")),
        prices.load(),
        FAST,
        on_event=lambda *e: events.append(e),
    )
    snap = await run_to_end(runner)
    assert snap.phase == "Failed"  # nothing could be read: the success ratio is not met
    ok, bad = check_accounting(tmp_path, snap, 40)
    assert not ok
    assert {(f["status"], f["error_type"]) for f in bad} == {("failed", "unreadable_result")}
    assert "could not be read" in bad[0]["reason"]
    assert len(emu.store.batches) == 2  # maxAttempts, no more
    assert [r for r, _, _ in events].count("UnreadableResults") == 2


@pytest.mark.parametrize("kind", ["anthropic", "openai"])
async def test_unreadable_synchronous_answers_are_retried_not_raised(
    start_emulator: Factory, tmp_path: Path, kind: str
) -> None:
    """The synchronous path (engine pools, the deadline fallback): a 200 whose body cannot be read is a transient
    `unreadable_response`, retried; before, it raised out of the whole synchronous pass, and every later step paid
    for the same request again."""
    emu = start_emulator({"sync": {"latencyMs": 1, "outcomes": {"garbled": 0.25}}})
    runner = JobRunner(
        make_job(tmp_path, kind, 40),
        provider_for(kind, emu.url),
        Ledger(str(tmp_path / "ledger.db")),
        prices.load(),
        FAST,
        sync_only=True,
    )
    snap = await run_to_end(runner)
    assert snap.phase == "Succeeded"
    ok, bad = check_accounting(tmp_path, snap, 40)
    assert all(r["via"] == "sync" for r in ok)
    assert not [f for f in bad if f["error_type"] != "unreadable_response"]
    calls = emu.store.sync_requests
    assert calls > 40  # the unreadable answers were asked again
    assert calls <= 40 * 3 * 3  # and no more than sync tries x retry.maxAttempts per item


async def test_an_orphan_batch_whose_first_lines_are_unreadable_is_still_adopted(
    start_emulator: Factory, tmp_path: Path
) -> None:
    """Anthropic orphans are confirmed by the ids in their results (batch/adoption.py). With unreadable first lines,
    reading only the first line called the batch not ours, and the shard was created a second time."""
    emu = start_emulator(
        {"seed": 5, "batch": {"createFailuresAfterAccept": 1, "processingSeconds": 0.01, "outcomes": {"garbled": 0.5}}}
    )  # ended by the next step: confirmed by its results
    runner = JobRunner(
        make_job(tmp_path, "anthropic", 30),
        provider_for("anthropic", emu.url),
        Ledger(str(tmp_path / "ledger.db")),
        prices.load(),
        FAST,
    )
    snap = await run_to_end(runner)
    ordered = sorted(emu.store.batches.values(), key=lambda b: b.created_at)
    assert [a.garbled for _, a in ordered[0].answers()[:2]] == [True, True]  # the case: its first two lines
    assert snap.batches[0]["id"] == ordered[0].id  # the orphan, adopted
    unreadable: set[str] = set()
    for batch in ordered:  # no item went again unless its line in an earlier batch could not be read
        assert {item.custom_id for item in batch.items} <= unreadable or batch is ordered[0]
        unreadable = {item.custom_id for item, a in batch.answers() if a.garbled}
    check_accounting(tmp_path, snap, 30)
