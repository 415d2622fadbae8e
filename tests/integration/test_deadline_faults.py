"""REVIEW-3 M5: a transient fault just after the deadline (a PostgreSQL restart, an S3 503, a provider hiccup)
used to fail the job at once and abandon its live batches, paid and never ingested; and when the ledger itself
was failing, the CR said Failed over a ledger that said Running. Real OpenAI SDK against the emulator."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from sqlalchemy.exc import OperationalError

from barge.batch import faults, prices
from barge.batch import runner as runner_
from barge.batch.runner import JobRunner
from barge.ledger import Ledger
from barge.operator import jobs
from barge.providers.errors import Transient
from barge.storage import StorageError
from tests.conftest import Factory, state
from tests.integration.test_engine import FAST, provider_for, run_to_end
from tests.integration.test_robustness_money import job_of

DEADLINE = datetime.now(UTC).replace(microsecond=0) + timedelta(hours=1)
S3_503 = faults.classify(StorageError("PUT parts/b.jsonl: 503 Slow Down"))


def lines(n: int) -> Any:
    return lambda: ((i + 1, json.dumps({"id": f"c{i}", "text": f"claim {i}"}).encode()) for i in range(n))


async def submitted(start_emulator: Factory, tmp_path: Path) -> tuple[Any, Ledger, Any]:
    """A job whose one batch is in flight at the provider (it runs for a minute), its deadline an hour away."""
    emu = start_emulator({"batch": {"processingSeconds": 60, "cancelSeconds": 0.3}})
    ledger = Ledger(str(tmp_path / "l.db"))
    job = job_of(tmp_path, "openai", "gpt-4o-mini", lines(10), deadline=DEADLINE.isoformat())
    await JobRunner(job, provider_for("openai", emu.url), ledger, prices.load(), FAST).step()
    assert len(ledger.batches_of(job.key, live_only=True)) == 1
    return emu, ledger, job


async def test_a_transient_fault_just_after_the_deadline_is_retried(start_emulator: Factory, tmp_path: Path) -> None:
    _, ledger, job = await submitted(start_emulator, tmp_path)
    now = DEADLINE.timestamp() + 30
    assert S3_503.transient
    assert not faults.fail_at_deadline(ledger, job.key, job.spec, "t", now, S3_503), "failed 30 s past the deadline"
    assert (ledger.job(job.key) or {})["phase"] not in ("Failed", runner_.STOPPING)
    assert ledger.counts(job.key).get("submitted") == 10, "its items stay with their batch"


async def test_past_the_grace_live_batches_are_cancelled_and_collected(start_emulator: Factory, tmp_path: Path) -> None:
    emu, ledger, job = await submitted(start_emulator, tmp_path)
    now = DEADLINE.timestamp() + 7200  # past any grace (faults.deadline_grace)
    assert not faults.fail_at_deadline(ledger, job.key, job.spec, "t", now, S3_503), "Failed with a paid batch live"
    assert (ledger.job(job.key) or {})["phase"] == runner_.STOPPING == faults.STOPPING
    events: list[str] = []
    runner = JobRunner(
        job,
        provider_for("openai", emu.url),
        ledger,
        prices.load(),
        FAST,
        clock=lambda: now + 5,
        on_event=lambda r, m, k: events.append(r),
    )
    snap = await run_to_end(runner, 30)
    assert snap.phase == "Failed"
    assert "deadline passed while the job could not make progress" in snap.message
    (at_provider,) = state(emu)["batches"]
    assert at_provider["status"] in ("cancelling", "cancelled"), at_provider["status"]
    (batch,) = ledger.batches_of(job.key)
    assert batch["canceled"], "the paid batch was left running"
    assert batch["ingested"], "the paid batch's results were abandoned"
    assert "Stopping" in events


def test_a_job_with_nothing_at_the_provider_still_fails_at_the_deadline(tmp_path: Path) -> None:
    ledger = Ledger(str(tmp_path / "l.db"))
    job = job_of(tmp_path, "openai", "gpt-4o-mini", lines(3), deadline=DEADLINE.isoformat())
    assert faults.fail_at_deadline(ledger, job.key, job.spec, "t", DEADLINE.timestamp() + 1, S3_503)
    assert (ledger.job(job.key) or {})["phase"] == "Failed"


class DownLedger:
    """PostgreSQL restarting: every call fails."""

    def __getattr__(self, name: str) -> Any:
        def fail(*_: object, **__: object) -> Any:
            raise OperationalError("SELECT", {}, ConnectionRefusedError("connection refused"))

        return fail


class Kube:
    def __init__(self) -> None:
        self.patched: list[dict[str, Any]] = []

    async def namespace(self, name: str) -> Any:
        raise ConnectionError("API server unreachable")

    async def patch_status(self, plural: str, namespace: str, name: str, status: dict[str, Any]) -> None:
        self.patched.append(status)


async def test_no_failed_status_is_written_when_the_ledger_cannot_record_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    job = job_of(tmp_path, "openai", "gpt-4o-mini", lines(1), deadline=DEADLINE.isoformat())
    kube, posted = Kube(), []
    ctx: Any = SimpleNamespace(ledger=DownLedger(), kube=kube, config=SimpleNamespace(poll_seconds=30.0))
    meta = {"namespace": "team-a", "name": "j", "uid": "u"}
    fault = faults.classify(OperationalError("SELECT", {}, ConnectionRefusedError("connection refused")))
    monkeypatch.setattr(jobs, "time", SimpleNamespace(time=lambda: DEADLINE.timestamp() + 3600))  # an hour late
    done = await jobs._deadline(ctx, meta, job.spec, fault, {}, 1, lambda *a: posted.append(a))
    assert not done, "the daemon ended on a Failed status the ledger never took"
    assert kube.patched == []
    assert posted == []


async def test_a_stopping_job_whose_collection_keeps_failing_fails_after_the_stop_grace(
    start_emulator: Factory, tmp_path: Path
) -> None:
    """The results of its ended batch cannot be downloaded (the provider's file store keeps failing): retried
    within STOP_GRACE, then the job fails naming the batch it could not collect, instead of failing forever."""
    emu = start_emulator({"batch": {"processingSeconds": 0.3}})
    ledger = Ledger(str(tmp_path / "l.db"))
    job = job_of(tmp_path, "openai", "gpt-4o-mini", lines(10), deadline=DEADLINE.isoformat())
    await JobRunner(job, provider_for("openai", emu.url), ledger, prices.load(), FAST).step()
    await asyncio.sleep(1.0)  # the batch has ended at the provider, not yet ingested
    now = DEADLINE.timestamp() + 7200
    assert not faults.fail_at_deadline(ledger, job.key, job.spec, "t", now, S3_503)
    clock = [now + 5]
    runner = JobRunner(job, provider_for("openai", emu.url), ledger, prices.load(), FAST, clock=lambda: clock[0])

    async def unreachable(batch_id: str) -> AsyncIterator[Any]:
        raise Transient(f"GET files/{batch_id}/content: 503", error_type="server_error")
        yield  # an async generator, as the adapters' parsed_pages

    runner.provider.parsed_pages = unreachable  # type: ignore[method-assign]
    with pytest.raises(Transient):  # within the grace: a failed step, retried
        await runner.step()
    clock[0] = now + runner_.STOP_GRACE + 1
    snap = await runner.step()
    assert snap.phase == "Failed", snap.message
    assert "batches not collected" in snap.message
