"""Provider cleanup end to end: after a job ends, the emulator holds nothing of it (OpenAI and Azure files deleted,
Anthropic batches deleted), nothing is deleted before the outputs are written, and a SIGKILL between ingestion
and deletion is finished by the next run. The real SDK adapters, a real SQLite ledger, `barge run` as a process."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from sqlalchemy import func, select

from barge.batch import prices, retention
from barge.batch.runner import JobRunner
from barge.config import OperatorConfig
from barge.emulator.server import EmulatorThread
from barge.ledger import Ledger
from barge.ledger.pages import spans
from barge.ledger.schema import items, payload_pages, payloads
from barge.operator import purge
from barge.operator.jobs import Context, delete_job
from barge.operator.metrics import BargeCollector
from barge.operator.purge import purge_once
from tests.conftest import Factory, fresh_database, state
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


def cleanup_metrics(path: Path) -> dict[str, float]:
    """The operator's collector over this ledger (its Context holds no API client: these metrics need none)."""
    ctx = Context(OperatorConfig(), Ledger(str(path)), None, prices.load())  # type: ignore[arg-type]
    registry = CollectorRegistry()
    registry.register(BargeCollector(ctx))
    text = generate_latest(registry).decode()
    ctx.ledger.close()
    wanted = ("barge_provider_batches_deleted_total{", "barge_provider_cleanups_pending{")
    return {line.split("{")[0]: float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(wanted)}


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
        assert cleanup_metrics(ledger) == {
            "barge_provider_batches_deleted_total": 0,
            "barge_provider_cleanups_pending": len(ids),
        }
    done = barge_run(path, ledger)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["phase"] == "Succeeded"
    assert left_at_provider(emu, ids) == []
    assert {cleanup for _, _, cleanup in ledger_cleanup(ledger)} == {"done"}
    assert cleanup_metrics(ledger) == {
        "barge_provider_batches_deleted_total": len(ids),
        "barge_provider_cleanups_pending": 0,
    }
    results = (tmp_path / "out" / "results.jsonl").read_text().splitlines()
    assert sorted(json.loads(r)["id"] for r in results) == [f"i{n:03d}" for n in range(N_ITEMS)]


def stored_prompts(conn: Any, job: str | None = None) -> list[str]:
    """Every rendered prompt the ledger holds (of one job, or of all), read straight from the tables: the payload
    pages Barge writes (ledger/pages.py) and the per-line rows of ledgers written before them."""
    paged = select(payload_pages.c.lines, payload_pages.c.text)
    legacy = select(payloads.c.payload)
    if job is not None:
        paged, legacy = paged.where(payload_pages.c.job == job), legacy.where(payloads.c.job == job)
    found = [p for (p,) in conn.execute(legacy)]
    for lines, text in conn.execute(paged):
        found += [bytes(text)[start:end].decode() for start, end in spans(bytes(lines)).values()]
    return found


def ledger_texts(url: str, job: str) -> tuple[int, int]:
    """(prompts held, outputs not null) of a job, read straight from the tables."""
    db = Ledger(url)
    try:
        with db.engine.connect() as conn:
            held = len(stored_prompts(conn, job))
            written = conn.execute(
                select(func.count()).select_from(items).where(items.c.job == job, items.c.output.is_not(None))
            ).scalar()
    finally:
        db.close()
    return held, int(written or 0)


def file_bytes(directory: Path, pattern: str) -> bytes:
    """The SQLite database with its -wal and -shm files."""
    return b"".join(p.read_bytes() for p in sorted(directory.glob(pattern)))


async def finish(tmp_path: Path, url: str, emu: EmulatorThread, **retention: str) -> tuple[Any, Any, list[str]]:
    out = tmp_path / ("kept" if retention else "dropped")
    out.mkdir()
    job = make_job(out, "openai", 40, retry={"maxAttempts": 5}, retention=retention)
    snap = await run_to_end(JobRunner(job, provider_for("openai", emu.url), Ledger(url), prices.load(), FAST))
    files = [(out / "out" / name).read_text() for name in ("results.jsonl", "failures.jsonl")]
    return job, snap, files


async def test_finished_job_leaves_no_text_in_the_ledger(start_emulator: Factory, tmp_path: Path) -> None:
    """Same seed, same job: with the default lifetime and with texts kept, the outputs, counts and cost agree;
    only the default ledger is free of prompts and outputs, down to the bytes of the SQLite file and its WAL."""
    profile = {"batch": {"outcomes": {"server_error": 0.2, "invalid_request": 0.1}}}
    dropped_url, kept_url = str(tmp_path / "dropped.db"), str(tmp_path / "kept.db")
    job, snap, files = await finish(tmp_path, dropped_url, start_emulator(profile))
    kept_job, kept_snap, kept_files = await finish(
        tmp_path, kept_url, start_emulator(profile), keepPayloadsFor="7d", keepOutputsFor="1h"
    )
    assert snap.phase == kept_snap.phase == "Succeeded"
    assert files == kept_files
    assert "claim text" in files[0], "the emulator's replies quote the prompt: the check below can fail"
    assert (snap.counts, snap.usage) == (kept_snap.counts, kept_snap.usage)
    assert ledger_texts(dropped_url, job.key) == (0, 0)
    assert ledger_texts(kept_url, kept_job.key) == (40, snap.counts["succeeded"] + snap.counts["refused"])
    assert b"claim text" not in file_bytes(tmp_path, "dropped.db*"), "a prompt or an output is still in the file"
    assert b"claim text" in file_bytes(tmp_path, "kept.db*")


async def test_payloads_dropped_while_outputs_are_kept(start_emulator: Factory, tmp_path: Path) -> None:
    """keepOutputsFor without keepPayloadsFor: the prompts go beside the writing of results.jsonl (runner
    `_write_outputs`), the outputs stay, and no prompt is left in the SQLite file nor in its WAL (the WAL is
    truncated at the job's end even though that last drop found no prompt left). The replies quote 5 characters of
    each prompt ("claim"), so "claim text" can only be a prompt."""
    url = str(tmp_path / "dropped.db")
    job, snap, files = await finish(tmp_path, url, start_emulator({"batch": {"replyChars": 5}}), keepOutputsFor="1h")
    assert snap.phase == "Succeeded"
    assert "claim text" not in files[0]
    assert "claim" in files[0]
    assert ledger_texts(url, job.key) == (0, snap.counts["succeeded"] + snap.counts["refused"])
    assert b"claim text" not in file_bytes(tmp_path, "dropped.db*"), "a prompt is still in the file or its WAL"


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
async def test_ledger_purge_command(
    start_emulator: Factory, tmp_path: Path, backend: str, request: pytest.FixtureRequest
) -> None:
    url = str(tmp_path / "l.db") if backend == "sqlite" else fresh_database(request.getfixturevalue("postgres_url"))
    job, snap, _ = await finish(tmp_path, url, start_emulator(), keepPayloadsFor="30d", keepOutputsFor="30d")
    assert snap.phase == "Succeeded"
    assert ledger_texts(url, job.key) == (40, 40)

    def purge(older_than: str) -> str:
        done = subprocess.run(
            [sys.executable, "-m", "barge.cli", "ledger", "purge", "--older-than", older_than, "--ledger", url],
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        )
        return done.stdout.strip()

    assert purge("30d") == "dropped 0 prompts and 0 outputs"  # ended just now, kept for 30 days
    assert ledger_texts(url, job.key) == (40, 40)
    assert purge("0s") == "dropped 40 prompts and 40 outputs"
    assert ledger_texts(url, job.key) == (0, 0)
    db = Ledger(url)  # the audit trail stays: items, states, usage, batches
    assert db.counts(job.key)["succeeded"] == 40
    assert db.usage(job.key) != ((0, 0, 0, 0), (0, 0, 0, 0))
    assert db.batches_of(job.key)
    db.close()


async def test_deleting_a_job_drops_its_texts_and_keeps_its_audit_rows(start_emulator: Factory, tmp_path: Path) -> None:
    """The operator's finalizer on a job that kept its texts: they go, the audit rows stay. No batch is in flight,
    so the finalizer needs no API server (its Context holds none)."""
    url = str(tmp_path / "l.db")
    job, snap, _ = await finish(tmp_path, url, start_emulator(), keepPayloadsFor="30d", keepOutputsFor="30d")
    assert ledger_texts(url, job.key) == (40, 40)
    namespace, name, uid = job.key.split("/")
    ctx = Context(OperatorConfig(), Ledger(url), None, prices.load())  # type: ignore[arg-type]
    events: list[str] = []
    body = {"metadata": {"namespace": namespace, "name": name, "uid": uid}, "spec": {}}
    await delete_job(ctx, body, lambda reason, message, kind: events.append(reason))
    assert ledger_texts(url, job.key) == (0, 0)
    assert ctx.ledger.counts(job.key)["succeeded"] == snap.counts["succeeded"] == 40
    assert len(ctx.ledger.batches_of(job.key)) == len(snap.batches)
    assert events == []
    ctx.ledger.close()


async def test_operator_purge_drops_texts_when_their_keep_time_has_passed(
    start_emulator: Factory, tmp_path: Path
) -> None:
    url = str(tmp_path / "l.db")
    job, _, _ = await finish(tmp_path, url, start_emulator(), keepPayloadsFor="1h", keepOutputsFor="3h")
    ledger, now = Ledger(url), time.time()
    assert purge_once(OperatorConfig(), ledger, now) == (0, 0)
    assert purge_once(OperatorConfig(), ledger, now + 2 * 3600) == (40, 0)
    assert ledger_texts(url, job.key) == (0, 40)
    assert purge_once(OperatorConfig(ledger_purge_older_than="1h"), ledger, now + 2 * 3600) == (0, 40)
    assert ledger_texts(url, job.key) == (0, 0)
    ledger.close()


@pytest.mark.parametrize("kind", ["anthropic", "openai"])
async def test_a_failed_delete_holds_the_final_phase_until_it_is_retried(
    start_emulator: Factory, tmp_path: Path, kind: str
) -> None:
    emu = start_emulator({"batch": {"deleteFailures": 1}})
    job = make_job(tmp_path, kind, 20)
    ledger = Ledger(str(tmp_path / "l.db"))
    events: list[str] = []
    runner = JobRunner(
        job, provider_for(kind, emu.url), ledger, prices.load(), FAST, on_event=lambda r, m, k: events.append(r)
    )
    snap = await run_to_end(runner)
    assert snap.phase == "Succeeded"
    assert events.index("CleanupPending") < events.index("ProviderCopiesDeleted") < events.index("Completed")
    ids = {b["batch_id"] for b in ledger.batches_of(job.key)}
    assert left_at_provider(emu, ids) == []
    assert {b["cleanup"] for b in ledger.batches_of(job.key)} == {"done"}


async def test_a_refused_delete_is_reported_and_the_job_still_ends(start_emulator: Factory, tmp_path: Path) -> None:
    emu = start_emulator({"batch": {"deleteForbidden": True}})
    job = make_job(tmp_path, "openai", 20)
    ledger = Ledger(str(tmp_path / "l.db"))
    events: list[str] = []
    runner = JobRunner(
        job, provider_for("openai", emu.url), ledger, prices.load(), FAST, on_event=lambda r, m, k: events.append(r)
    )
    snap = await run_to_end(runner)
    assert snap.phase == "Succeeded"
    assert "ProviderCopiesKept" in events
    assert "ProviderCopiesDeleted" not in events
    assert {b["cleanup"] for b in ledger.batches_of(job.key)} == {"failed"}
    ids = {b["batch_id"] for b in ledger.batches_of(job.key)}
    assert left_at_provider(emu, ids) != []


def test_batches_from_before_the_upgrade_are_legacy(tmp_path: Path) -> None:
    """A ledger written before cleanups existed: its batches get `legacy`, still cleaned if their job is stepped again
    but not counted as pending (jobs that had ended are never stepped again)."""
    path = tmp_path / "old.db"
    ledger = Ledger(str(path))
    ledger.ensure_job("ns/old/uid", "h", "t", "m")
    ledger.record_batch("ns/old/uid", "s00000", "msgbatch_old", "anthropic", 1, 10, "ended", 1.0)
    ledger.set_batch("ns/old/uid", "msgbatch_old", ingested=True)
    ledger.close()
    with sqlite3.connect(path) as db:
        db.execute("ALTER TABLE batches DROP COLUMN cleanup")  # what an older Barge wrote
    upgraded = Ledger(str(path))
    assert [b["cleanup"] for b in upgraded.batches_of("ns/old/uid")] == ["legacy"]
    assert retention.pending(upgraded, "ns/old/uid") == ["msgbatch_old"]
    upgraded.record_batch("ns/old/uid", "s00001", "msgbatch_new", "anthropic", 1, 10, "ended", 2.0)
    assert [b["cleanup"] for b in upgraded.batches_of("ns/old/uid")] == ["legacy", ""]
    upgraded.close()
    assert cleanup_metrics(path)["barge_provider_cleanups_pending"] == 0


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
async def test_ledger_text_bytes_per_tenant(
    start_emulator: Factory, tmp_path: Path, backend: str, request: pytest.FixtureRequest
) -> None:
    """The purge timer's measurement, exported by /metrics: the UTF-8 bytes of the texts a job kept, then 0."""
    url = str(tmp_path / "l.db") if backend == "sqlite" else fresh_database(request.getfixturevalue("postgres_url"))
    job, snap, _ = await finish(tmp_path, url, start_emulator(), keepPayloadsFor="30d", keepOutputsFor="30d")
    assert snap.phase == "Succeeded"
    ctx = Context(OperatorConfig(), Ledger(url), None, prices.load())  # type: ignore[arg-type]
    registry = CollectorRegistry()
    registry.register(BargeCollector(ctx))

    def scrape() -> dict[str, float]:
        text = generate_latest(registry).decode()
        return {
            line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1])
            for line in text.splitlines()
            if line.startswith("barge_ledger_text_bytes")
        }

    assert scrape() == {}, "nothing is exported before the first measurement"
    with ctx.ledger.engine.connect() as conn:
        prompts = sum(len(p.encode()) for p in stored_prompts(conn))
        outputs = sum(
            len(o.encode()) for (o,) in conn.execute(select(items.c.output).where(items.c.output.is_not(None)))
        )
    tenant = job.tenant
    purge.measure(ctx, time.time())
    held = scrape()
    assert prompts > 0
    assert outputs > 0
    assert held[f'barge_ledger_text_bytes{{kind="payload",tenant="{tenant}"}}'] == prompts
    assert held[f'barge_ledger_text_bytes{{kind="output",tenant="{tenant}"}}'] == outputs
    assert held["barge_ledger_text_bytes_age_seconds"] >= 0
    assert purge.purge_once(OperatorConfig(ledger_purge_older_than="0s"), ctx.ledger, time.time()) == (40, 40)
    purge.measure(ctx, time.time())
    held = scrape()
    assert held[f'barge_ledger_text_bytes{{kind="payload",tenant="{tenant}"}}'] == 0
    assert held[f'barge_ledger_text_bytes{{kind="output",tenant="{tenant}"}}'] == 0
    ctx.ledger.close()
