"""Money paths of the engine: real SDK adapters against the emulator, a real ledger. Shards cut by bytes, a
budget that can trigger (prices required, enforced on the synchronous path too), live batches cancelled and
collected on a fatal answer, and a batch the provider no longer knows not blocking the deadline."""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from barge.api.batchjob import LLMBatchJobSpec
from barge.batch import prices
from barge.batch.job import Job
from barge.batch.runner import JobRunner
from barge.ledger import Ledger
from tests.conftest import Factory, state
from tests.integration.test_engine import FAST, provider_for, run_to_end


def job_of(tmp_path: Path, kind: str, model: str, lines: Callable[[], Iterator[tuple[int, bytes]]], **spec: Any) -> Job:
    raw: dict[str, Any] = {
        "provider": {"type": kind, "model": model, "secretRef": {"name": "k"}},
        "input": {"url": "unused"},
        "output": {"url": str(tmp_path / "out")},
        "request": {"system": "Classify.", "template": "{{ text }}", "maxTokens": 50},
        "successRatio": "0.5",
    }
    raw.update(spec)
    return Job(f"t/{tmp_path.name}/{kind}", LLMBatchJobSpec.model_validate(raw), "t", "2026-11-30", model, lines)


def claims(n: int, size: int) -> Callable[[], Iterator[tuple[int, bytes]]]:
    body = ("The insured reports water damage in the kitchen after a pipe burst. " * (size // 70 + 1))[:size]
    prefix, suffix = b'{"id":"c', ('","text":"' + body + '"}').encode()
    return lambda: ((i + 1, prefix + b"%06d" % i + suffix) for i in range(n))


def shard_bytes(runner: JobRunner, ledger: Ledger) -> list[int]:
    """Each created batch's encoded size, measured again from the payloads (not from the stored sizes)."""
    key = runner.job.key
    sizes: dict[str, int] = {}
    for _, cid, payload, batch_id in ledger.iter_items(
        key, "custom_id, payload, batch_id", ("submitted", "succeeded", "refused", "invalid", "failed", "pending")
    ):
        if batch_id:
            sizes[batch_id] = sizes.get(batch_id, 0) + len(runner.provider.encode(runner.factory(cid, payload))) + 1
    return [sizes[b["batch_id"]] for b in ledger.batches_of(key)]


@pytest.mark.parametrize("kind", ["anthropic", "openai"])
async def test_shards_are_cut_by_bytes_under_a_lowered_limit(
    start_emulator: Factory, tmp_path: Path, kind: str
) -> None:
    emu = start_emulator()
    ledger = Ledger(str(tmp_path / "l.db"))
    model = "claude-sonnet-4-6" if kind == "anthropic" else "gpt-4o-mini"
    # shard_bytes re-measures from the payloads after the end: keep them (by default they leave the ledger)
    job = job_of(tmp_path, kind, model, claims(60, 2000), retention={"keepPayloadsFor": "1h"})
    runner = JobRunner(
        job, provider_for(kind, emu.url), ledger, prices.load(), dataclasses.replace(FAST, max_shard_bytes=30_000)
    )
    snap = await run_to_end(runner)
    assert snap.phase == "Succeeded"
    sizes = shard_bytes(runner, ledger)
    assert all(s <= 30_000 for s in sizes), sizes
    assert len(sizes) == len(state(emu)["batches"]) >= math.ceil(sum(sizes) / 30_000)
    assert sum(len(b["custom_ids"]) for b in state(emu)["batches"]) == 60


async def test_100k_claims_of_3kb_fit_the_anthropic_byte_limit(start_emulator: Factory, tmp_path: Path) -> None:
    """300 MB of requests: the provider refuses one batch over 256 MB, so the engine must cut by bytes."""
    emu = start_emulator({"batch": {"processingSeconds": 600}})
    ledger = Ledger(str(tmp_path / "l.db"))
    job = job_of(tmp_path, "anthropic", "claude-sonnet-4-6", claims(100_000, 3000))
    runner = JobRunner(job, provider_for("anthropic", emu.url), ledger, prices.load(), FAST)
    events: list[tuple[str, str]] = []
    runner.on_event = lambda reason, message, kind: events.append((reason, message))
    snap = await runner.step()
    assert not [e for e in events if e[0] == "BatchRejected"], events
    assert snap.counts["submitted"] == 100_000
    sizes = shard_bytes(runner, ledger)
    assert len(sizes) >= 2
    assert sum(sizes) > runner.provider.max_bytes
    assert all(s + len(b'{"requests":[]}') <= 256 * 1024 * 1024 for s in sizes), sizes
    assert [len(b["custom_ids"]) for b in state(emu)["batches"]] == [b["requests"] for b in ledger.batches_of(job.key)]


async def test_budget_on_a_model_without_price_is_not_admitted(start_emulator: Factory, tmp_path: Path) -> None:
    emu = start_emulator()
    lines = claims(20, 200)
    job = job_of(tmp_path, "azure-openai", "claims-eu-deployment", lines, budget={"maxCostUSD": "5"})
    ledger = Ledger(str(tmp_path / "l.db"))
    snap = await JobRunner(job, provider_for("azure-openai", emu.url), ledger, prices.load(), FAST).step()
    admitted = next(c for c in snap.conditions if c["type"] == "Admitted")
    assert snap.phase == "Pending"
    assert admitted["status"] == "False"
    assert admitted["reason"] == "PriceMissing"
    assert "'claims-eu-deployment'" in admitted["message"]
    assert state(emu)["batches"] == []
    priced = job_of(
        tmp_path,
        "azure-openai",
        "claims-eu-deployment",
        lines,
        budget={"maxCostUSD": "5", "price": {"input": "0.15", "output": "0.6"}},
    )
    snap = await run_to_end(JobRunner(priced, provider_for("azure-openai", emu.url), ledger, prices.load(), FAST))
    assert snap.phase == "Succeeded"
    assert float(snap.usage["costUSD"]) > 0


async def test_sync_fallback_stops_at_the_budget(start_emulator: Factory, tmp_path: Path) -> None:
    """Past the deadline everything goes synchronously at full price: only what the budget covers is sent."""
    emu = start_emulator()
    past = (datetime.now(UTC) - timedelta(minutes=1)).isoformat()
    table = prices.load()
    price = table.price("claude-sonnet-4-6")
    assert price is not None
    per_item_upper = (53 * price.input + 50 * price.output) / 1_000_000  # est. input tokens + maxTokens out
    # The batch estimate (half price) of 40 items fits, so the job is admitted; at the synchronous (full) price
    # only 20 fit.
    budget = per_item_upper * 20 + per_item_upper / 2
    job = job_of(
        tmp_path,
        "anthropic",
        "claude-sonnet-4-6",
        claims(40, 200),
        deadline=past,
        budget={"maxCostUSD": str(budget)},
        successRatio="0.9",
    )
    ledger = Ledger(str(tmp_path / "l.db"))
    runner = JobRunner(job, provider_for("anthropic", emu.url), ledger, table, FAST)
    snap = await run_to_end(runner)
    assert snap.phase == "Failed"
    assert state(emu)["sync_requests"] == 20
    assert state(emu)["batches"] == []
    assert float(snap.usage["costUSD"]) <= budget
    failures = [json.loads(x) for x in (tmp_path / "out" / "failures.jsonl").read_text().splitlines()]
    assert len(failures) == 40 - state(emu)["sync_requests"]
    assert {f["error_type"] for f in failures} == {"budget_exceeded"}


async def test_fatal_answer_cancels_and_collects_live_batches(start_emulator: Factory, tmp_path: Path) -> None:
    emu = start_emulator({"batch": {"processingSeconds": 30, "cancelSeconds": 0.3}})
    job = job_of(tmp_path, "anthropic", "claude-sonnet-4-6", claims(40, 100))
    ledger = Ledger(str(tmp_path / "l.db"))
    runner = JobRunner(
        job, provider_for("anthropic", emu.url), ledger, prices.load(), dataclasses.replace(FAST, max_shard_requests=20)
    )

    def on_event(reason: str, message: str, kind: str) -> None:
        if reason == "Submitted":  # the credit runs out right after the first batch was created
            emu.store.profile = dataclasses.replace(emu.store.profile, billing_error=True)

    runner.on_event = on_event
    snap = await run_to_end(runner, limit=60)
    assert snap.phase == "Failed"
    assert "credit" in snap.message.lower()
    (batch,) = state(emu)["batches"]
    assert emu.store.batches[batch["id"]].cancel_at is not None, "the live batch was cancelled"
    (row,) = ledger.batches_of(job.key)
    assert row["ingested"], "and its results collected before the job failed"
    assert ledger.counts(job.key).get("submitted", 0) == 0


async def test_batch_unknown_to_the_provider_does_not_block_the_deadline(
    start_emulator: Factory, tmp_path: Path
) -> None:
    emu = start_emulator({"batch": {"processingSeconds": 600}})
    deadline = datetime.now(UTC) + timedelta(hours=2)
    job = job_of(
        tmp_path, "anthropic", "claude-sonnet-4-6", claims(30, 100), deadline=deadline.isoformat(), successRatio="0.9"
    )
    ledger = Ledger(str(tmp_path / "l.db"))
    now = [datetime.now(UTC).timestamp()]
    runner = JobRunner(job, provider_for("anthropic", emu.url), ledger, prices.load(), FAST, clock=lambda: now[0])
    events: list[str] = []
    runner.on_event = lambda reason, message, kind: events.append(reason)
    snap = await runner.step()
    assert snap.phase == "Running"
    (batch,) = state(emu)["batches"]
    del emu.store.batches[batch["id"]]  # the provider answers 404 for it from now on
    snap = await runner.step()
    assert "PollFailed" in events
    assert not snap.terminal
    now[0] = deadline.timestamp() + 1
    snap = await run_to_end(runner, limit=30)
    assert snap.phase == "Failed"
    assert "BatchLost" in events
    assert snap.counts["failed"] == 30
    assert state(emu)["sync_requests"] == 0, "items of a lost batch are never paid a second time"


async def test_deletion_stops_the_synchronous_path(start_emulator: Factory, tmp_path: Path) -> None:
    """A job deleted while its leftovers go through the synchronous path stops paying for further calls."""
    emu = start_emulator({"sync": {"latencyMs": 100}})
    past = (datetime.now(UTC) - timedelta(minutes=1)).isoformat()
    job = job_of(
        tmp_path, "anthropic", "claude-sonnet-4-6", claims(60, 100), deadline=past, fallback={"concurrency": 2}
    )
    runner = JobRunner(
        job,
        provider_for("anthropic", emu.url),
        Ledger(str(tmp_path / "l.db")),
        prices.load(),
        FAST,
        halted=lambda: emu.store.sync_requests >= 4,  # the delete handler started after the 4th call
    )
    snap = await runner.step()
    assert snap.counts["pending"] > 0
    assert state(emu)["sync_requests"] <= 4 + 2, "at most the calls already in flight finish"
