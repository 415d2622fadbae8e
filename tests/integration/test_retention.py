"""Provider cleanup end to end: after a job ends, the emulator holds nothing of it (OpenAI and Azure files deleted,
Anthropic batches deleted), nothing is deleted before the outputs are written, and a SIGKILL between ingestion
and deletion is finished by the next run. The real SDK adapters, a real SQLite ledger, `barge run` as a process."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from barge.batch import prices
from barge.batch.runner import JobRunner
from barge.emulator.server import EmulatorThread
from barge.ledger import Ledger
from tests.conftest import Factory, state
from tests.integration.test_crash_safety import N_ITEMS, barge_run, manifest
from tests.integration.test_engine import FAST, check_accounting, make_job, provider_for, run_to_end

FOURTEEN_DAYS = {"anchor": "created_at", "seconds": 14 * 86400}
# some requests fail and are retried: several batches per job, with error files
MIXED = {"batch": {"outcomes": {"server_error": 0.2}}}


def left_at_provider(emu: EmulatorThread, batch_ids: set[str]) -> list[Any]:
    """Files and (not deleted) batches the emulator still holds for these batches."""
    now = state(emu)
    files = [f for f in now["files"] if f["batch"] in batch_ids]
    live = [
        b["id"] for b in now["batches"] if b["id"] in batch_ids and b["provider"] == "anthropic" and not b["archived"]
    ]
    return files + live


def ledger_cleanup(path: Path) -> list[tuple[Any, ...]]:
    with sqlite3.connect(path) as db:
        return db.execute("SELECT batch_id, ingested, cleanup FROM batches").fetchall()


@pytest.mark.parametrize("kind", ["anthropic", "openai", "azure-openai"])
async def test_nothing_left_at_the_provider_after_success(start_emulator: Factory, tmp_path: Path, kind: str) -> None:
    emu = start_emulator(MIXED)
    job = make_job(tmp_path, kind, 60, retry={"maxAttempts": 5})
    ledger = Ledger(str(tmp_path / "l.db"))
    snap = await run_to_end(JobRunner(job, provider_for(kind, emu.url), ledger, prices.load(), FAST))
    assert snap.phase == "Succeeded"
    check_accounting(tmp_path, snap, 60)
    ids = {b["batch_id"] for b in ledger.batches_of(job.key)}
    assert len(ids) >= 2, "the profile should make retries, hence several batches"
    assert {b["id"] for b in state(emu)["batches"]} == ids
    assert left_at_provider(emu, ids) == []
    assert {b["cleanup"] for b in ledger.batches_of(job.key)} == {"done"}
    if kind != "anthropic":  # the 14-day expiry was asked for on every batch
        assert [b["output_expires_after"] for b in state(emu)["batches"]] == [FOURTEEN_DAYS] * len(ids)


async def test_retention_off_keeps_the_provider_copies(start_emulator: Factory, tmp_path: Path) -> None:
    emu = start_emulator()
    job = make_job(tmp_path, "openai", 20, retention={"deleteProviderCopies": False, "outputExpiresAfterDays": 30})
    ledger = Ledger(str(tmp_path / "l.db"))
    snap = await run_to_end(JobRunner(job, provider_for("openai", emu.url), ledger, prices.load(), FAST))
    assert snap.phase == "Succeeded"
    ids = {b["batch_id"] for b in ledger.batches_of(job.key)}
    kinds = sorted(f["kind"] for f in state(emu)["files"] if f["batch"] in ids)
    assert "input" in kinds
    assert "output" in kinds
    assert {b["cleanup"] for b in ledger.batches_of(job.key)} == {"kept"}
    assert state(emu)["batches"][0]["output_expires_after"]["seconds"] == 30 * 86400


@pytest.mark.parametrize("kind", ["anthropic", "openai"])
@pytest.mark.parametrize("failpoint", ["mid-ingest", "before-cleanup"])
def test_sigkill_around_cleanup(start_emulator: Factory, tmp_path: Path, kind: str, failpoint: str) -> None:
    emu = start_emulator({"batch": {"processingSeconds": 0.3}})
    path = manifest(tmp_path, kind, emu.url)
    ledger = tmp_path / "ledger.db"
    killed = barge_run(path, ledger, failpoint)
    assert killed.returncode == -9, killed.stderr
    ids = {row[0] for row in ledger_cleanup(ledger)}
    # nothing deleted early: every batch and its input file is still at the provider
    assert {b["id"] for b in state(emu)["batches"] if not b["archived"]} == ids
    if kind == "openai":
        assert {f["batch"] for f in state(emu)["files"] if f["kind"] == "input"} == ids
    if failpoint == "before-cleanup":  # outputs written, ingestion recorded, deletion pending in the ledger
        assert all(ingested and cleanup == "" for _, ingested, cleanup in ledger_cleanup(ledger))
        assert len((tmp_path / "out" / "results.jsonl").read_text().splitlines()) == N_ITEMS
    done = barge_run(path, ledger)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["phase"] == "Succeeded"
    assert left_at_provider(emu, ids) == []
    assert {cleanup for _, _, cleanup in ledger_cleanup(ledger)} == {"done"}
    results = (tmp_path / "out" / "results.jsonl").read_text().splitlines()
    assert sorted(json.loads(r)["id"] for r in results) == [f"i{n:03d}" for n in range(N_ITEMS)]
