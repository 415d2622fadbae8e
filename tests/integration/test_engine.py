"""The batch engine end to end, in-process: real SDK adapters against the emulator, a real ledger.

Each scenario runs a JobRunner to a terminal phase and then checks the three things a user relies on: every
input line is in exactly one of results.jsonl / failures.jsonl, the emulator saw exactly the batches the
ledger says it created, and usage/cost were counted once.
"""

from __future__ import annotations

import asyncio
import json
import re
import time
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from barge.api.batchjob import LLMBatchJobSpec
from barge.batch import prices
from barge.batch.job import EngineSettings, Job
from barge.batch.runner import JobRunner
from barge.batch.snapshot import Snapshot
from barge.ledger import Ledger
from barge.providers import make_provider
from barge.storage import StoragePolicy
from tests.conftest import Factory, state

MODELS = {"anthropic": "claude-sonnet-4-6", "openai": "gpt-4o-mini", "azure-openai": "gpt-4o-mini-batch"}
FAST = EngineSettings(min_batch_window=0)


def make_job(tmp_path: Path, kind: str, n: int, **spec: Any) -> Job:
    raw: dict[str, Any] = {
        "provider": {"type": kind, "model": MODELS[kind], "secretRef": {"name": "k"}},
        "input": {"url": "unused"},
        "output": {"url": str(tmp_path / "out")},
        "request": {"system": "Classify.", "template": "{{ text }}", "maxTokens": 50},
        "successRatio": "0.5",
    }
    raw.update(spec)
    lines = [(i + 1, json.dumps({"id": f"c{i:04d}", "text": f"claim text {i}"}).encode()) for i in range(n)]
    return Job(
        key=f"test/{tmp_path.name}/{kind}",
        spec=LLMBatchJobSpec.model_validate(raw),
        tenant="t",
        run_date="2026-11-30",
        model=MODELS[kind],
        lines=lambda: iter(lines),
        storage=StoragePolicy(),
    )


def provider_for(kind: str, url: str, key: str = "k") -> Any:
    return make_provider(kind, key, base_url=f"{url}/v1" if kind == "openai" else url, sync_retries=0)


async def run_to_end(runner: JobRunner, limit: float = 60) -> Snapshot:
    async with asyncio.timeout(limit):
        while True:
            snap = await runner.step()
            if snap.terminal or snap.phase == "Pending":
                return snap
            await asyncio.sleep(0.05)


def outputs(tmp_path: Path) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    def read(name: str) -> list[dict[str, Any]]:
        path = tmp_path / "out" / name
        return [json.loads(x) for x in path.read_text().splitlines()] if path.exists() else []

    return read("results.jsonl"), read("failures.jsonl")


def check_accounting(tmp_path: Path, snap: Snapshot, n: int) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    ok, bad = outputs(tmp_path)
    assert len(ok) + len(bad) == n
    assert sorted([r["id"] for r in ok] + [f["id"] for f in bad]) == [f"c{i:04d}" for i in range(n)]
    assert snap.counts["total"] == n
    assert snap.counts["succeeded"] + snap.counts["refused"] == len(ok)
    assert snap.counts["invalid"] + snap.counts["failed"] == len(bad)
    # usage counted exactly once: the job's totals equal the sum over the results file
    assert snap.usage["outputTokens"] == sum(r["usage"]["output_tokens"] for r in ok)
    assert snap.usage["inputTokens"] == sum(r["usage"]["input_tokens"] for r in ok)
    return ok, bad


@pytest.mark.parametrize("kind", ["anthropic", "openai", "azure-openai"])
async def test_outcome_routing_under_faults(start_emulator: Factory, tmp_path: Path, kind: str) -> None:
    emu = start_emulator(
        {"batch": {"outcomes": {"server_error": 0.05, "invalid_request": 0.05, "expired": 0.05, "refusal": 0.05}}}
    )
    ledger = Ledger(str(tmp_path / "ledger.db"))
    runner = JobRunner(make_job(tmp_path, kind, 400), provider_for(kind, emu.url), ledger, prices.load(), FAST)
    snap = await run_to_end(runner)
    assert snap.phase == "Succeeded"
    ok, bad = check_accounting(tmp_path, snap, 400)
    batches = state(emu)["batches"]
    assert len(batches) >= 2, "transient and expired items must have been resubmitted"
    submissions: dict[str, int] = {}
    for b in batches:
        for cid in b["custom_ids"]:
            submissions[cid] = submissions.get(cid, 0) + 1
    assert [f for f in bad if f["status"] == "invalid"]
    assert [r for r in ok if r["status"] == "refused"], "a refusal is a result"
    ordered = sorted(emu.store.batches.values(), key=lambda b: b.created_at)
    for n, batch in enumerate(ordered):
        final = {
            item.custom_id
            for item, ans in batch.answers()
            if ans.outcome in ("invalid_request", "refusal", "succeeded")
        }
        later = {item.custom_id for b in ordered[n + 1 :] for item in b.items}
        assert not final & later, "an answered or invalid request was submitted again"
    assert max(submissions.values()) <= 3  # retry.maxAttempts
    assert Decimal(snap.usage["costUSD"]) > 0
    assert Decimal(snap.usage["savedUSD"]) == Decimal(snap.usage["costUSD"])  # batch price is half the sync one
    assert [b["id"] for b in snap.batches] == [b["id"] for b in batches]


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
async def test_both_ledger_backends(
    start_emulator: Factory, tmp_path: Path, backend: str, request: pytest.FixtureRequest
) -> None:
    url = str(tmp_path / "l.db") if backend == "sqlite" else request.getfixturevalue("postgres_url")
    emu = start_emulator({"batch": {"outcomes": {"server_error": 0.1, "refusal": 0.1}}})
    job = make_job(tmp_path, "openai", 400)  # over ledger.bulk.COPY_MIN: PostgreSQL takes the COPY path
    ledger = Ledger(url)
    snap = await run_to_end(JobRunner(job, provider_for("openai", emu.url), ledger, prices.load(), FAST))
    assert snap.phase == "Succeeded"
    check_accounting(tmp_path, snap, 400)
    again = await JobRunner(job, provider_for("openai", emu.url), Ledger(url), prices.load(), FAST).step()
    assert again.usage == snap.usage  # a terminal job is not recounted
    assert len(state(emu)["batches"]) == len(snap.batches)


@pytest.mark.parametrize("kind", ["anthropic", "openai", "azure-openai"])
async def test_duplicate_create_trap_yields_one_batch(start_emulator: Factory, tmp_path: Path, kind: str) -> None:
    emu = start_emulator({"batch": {"createFailuresAfterAccept": 1}})
    job = make_job(tmp_path, kind, 30)
    snap = await run_to_end(
        JobRunner(job, provider_for(kind, emu.url), Ledger(str(tmp_path / "l.db")), prices.load(), FAST)
    )
    assert snap.phase == "Succeeded"
    batches = state(emu)["batches"]
    assert len(batches) == 1, "the batch stored before the 500 must be adopted, not duplicated"
    assert snap.batches[0]["id"] == batches[0]["id"]
    check_accounting(tmp_path, snap, 30)


@pytest.mark.parametrize(
    ("profile", "key", "needle"),
    [
        ({"billingError": True}, "k", "(credit|quota)"),
        ({}, "invalid", "(api.key|x-api-key)"),
    ],
    ids=["billing", "authentication"],
)
async def test_job_wide_errors_fail_the_job(
    start_emulator: Factory, tmp_path: Path, profile: dict[str, Any], key: str, needle: str
) -> None:
    emu = start_emulator(profile)
    snap = await run_to_end(
        JobRunner(
            make_job(tmp_path, "anthropic", 10),
            provider_for("anthropic", emu.url, key),
            Ledger(str(tmp_path / "l.db")),
            prices.load(),
            FAST,
        )
    )
    assert snap.phase == "Failed"
    assert re.search(needle, snap.message, re.IGNORECASE), snap.message
    failed = next(c for c in snap.conditions if c["type"] == "Failed")
    assert failed["status"] == "True"
    assert failed["reason"] == "Fatal"
    assert state(emu)["batches"] == []
    _, bad = outputs(tmp_path)
    assert len(bad) == 0  # nothing is lost: the items stay pending in the ledger, the condition says why


async def test_deadline_cutoff_cancels_and_falls_back(start_emulator: Factory, tmp_path: Path) -> None:
    emu = start_emulator({"batch": {"processingSeconds": 4, "cancelSeconds": 0.2}})
    deadline = datetime.now(UTC) + timedelta(hours=1)
    job = make_job(
        tmp_path,
        "anthropic",
        120,
        deadline=deadline.isoformat(),
        successRatio="1",
        fallback={"sync": True, "concurrency": 16},
    )
    now = [time.time()]  # the engine's clock: moved past the deadline once the batch is half done
    runner = JobRunner(
        job,
        provider_for("anthropic", emu.url),
        Ledger(str(tmp_path / "l.db")),
        prices.load(),
        FAST,
        clock=lambda: now[0],
    )
    assert (await runner.step()).phase == "Running"
    await asyncio.sleep(2)
    now[0] = deadline.timestamp() + 1
    snap = await run_to_end(runner)
    assert snap.phase == "Succeeded"
    ok, _ = check_accounting(tmp_path, snap, 120)
    via = {r["via"] for r in ok}
    assert via == {"batch", "sync"}, "partial batch results kept, leftovers finished synchronously"
    assert snap.counts["viaFallback"] == sum(r["via"] == "sync" for r in ok)
    assert state(emu)["sync_requests"] == snap.counts["viaFallback"]
    assert next(c for c in snap.conditions if c["type"] == "DeadlineExceeded")["status"] == "True"
    assert state(emu)["batches"][0]["status"] == "ended"


async def test_success_ratio_is_judged(start_emulator: Factory, tmp_path: Path) -> None:
    emu = start_emulator({"batch": {"outcomes": {"invalid_request": 0.3}}})
    job = make_job(tmp_path, "openai", 100, successRatio="0.99")
    snap = await run_to_end(
        JobRunner(job, provider_for("openai", emu.url), Ledger(str(tmp_path / "l.db")), prices.load(), FAST)
    )
    assert snap.phase == "Failed"
    assert next(c for c in snap.conditions if c["type"] == "Failed")["reason"] == "SuccessRatioNotMet"
    _, bad = check_accounting(tmp_path, snap, 100)
    assert 10 < len(bad) < 60


async def test_budget_refuses_to_submit(start_emulator: Factory, tmp_path: Path) -> None:
    emu = start_emulator()
    job = make_job(tmp_path, "anthropic", 50, budget={"maxCostUSD": "0.0001"})
    snap = await run_to_end(
        JobRunner(job, provider_for("anthropic", emu.url), Ledger(str(tmp_path / "l.db")), prices.load(), FAST)
    )
    assert snap.phase == "Pending"
    assert next(c for c in snap.conditions if c["type"] == "BudgetExceeded")["status"] == "True"
    assert "over spec.budget.maxCostUSD" in snap.message
    assert state(emu)["batches"] == []


async def test_expired_items_are_resubmitted_alone(start_emulator: Factory, tmp_path: Path) -> None:
    emu = start_emulator({"batch": {"outcomes": {"expired": 0.3}}})
    job = make_job(tmp_path, "anthropic", 100, retry={"maxAttempts": 6})
    snap = await run_to_end(
        JobRunner(job, provider_for("anthropic", emu.url), Ledger(str(tmp_path / "l.db")), prices.load(), FAST)
    )
    assert snap.phase == "Succeeded"
    first, second = state(emu)["batches"][:2]
    ok, _ = check_accounting(tmp_path, snap, 100)
    first_try = {r["custom_id"] for r in ok if r["attempt"] == 1}
    assert set(second["custom_ids"]) == set(first["custom_ids"]) - first_try
    assert all(r["attempt"] >= 1 for r in ok)
