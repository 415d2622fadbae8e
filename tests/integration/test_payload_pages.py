"""Payloads stored by pages (ledger/pages.py): every reader gets back exactly the text that was planned, across page
and read-page boundaries, with gaps (lines without a payload) and non-ASCII text; a re-plan writes nothing twice;
ledgers written before pages (one `payloads` row per line) are read, submitted, measured and dropped as before.
On SQLite and a real PostgreSQL server (where a large enough write goes through COPY)."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest

from barge.batch import prices
from barge.batch.runner import JobRunner
from barge.ledger import Ledger, pages
from barge.ledger.bulk import COPY_MIN
from barge.ledger.lifetime import drop_texts, held_bytes
from tests.conftest import Factory
from tests.integration.test_engine import FAST, check_accounting, make_job, provider_for, run_to_end
from tests.integration.test_ledger_counts import check

JOB = "ns/pages/1"


def text_of(line: int) -> str:
    """Payloads of different lengths, some not ASCII (offsets are in bytes, lengths in characters)."""
    return f"line {line} " + "é☃😀"[line % 3] * (line % 17) + "x" * (line % 5)


def planned(lines: range, every_invalid: int = 7) -> tuple[list[tuple[Any, ...]], dict[int, str]]:
    """Rows as the planner hands them over, every `every_invalid`-th line invalid (no payload)."""
    rows: list[tuple[Any, ...]] = []
    texts: dict[int, str] = {}
    for line in lines:
        if line % every_invalid == 0:
            rows.append((f"#line-{line}", line, None, "invalid", "malformed_json", "bad", 0, 0))
        else:
            texts[line] = text_of(line)
            rows.append((f"c{line:05d}", line, f"c{line:05d}", "pending", "", "", 3, 40))
    return rows, texts


def write(ledger: Ledger, lines: range, page_lines: int) -> dict[int, str]:
    """Plan `lines` as the planner does: one transaction per chunk, one page per frame of `page_lines` lines."""
    rows, texts = planned(lines)
    frames = [
        pages.build((n, texts[n]) for n in range(start, min(start + page_lines, lines.stop)) if n in texts)
        for start in range(lines.start, lines.stop, page_lines)
    ]
    ledger.add_planned(JOB, rows, [p for p in frames if p is not None])
    return texts


def test_pages_hold_exact_bytes() -> None:
    page = pages.build([(3, "a"), (5, "é😀"), (9, "")])
    assert page is not None
    first, last, n, lines, text = page
    assert (first, last, n) == (3, 9, 3)
    assert text == "aé😀".encode()
    assert pages.spans(lines) == {3: (0, 1), 5: (1, 7), 9: (7, 7)}
    assert pages.build([]) is None


def test_payloads_read_back_across_pages(ledger_url: str) -> None:
    ledger = Ledger(ledger_url)
    ledger.ensure_job(JOB, "h")
    texts = write(ledger, range(1, 400), page_lines=37)  # one chunk over COPY_MIN rows: COPY on PostgreSQL
    texts |= write(ledger, range(400, 450), page_lines=11)  # under it: executemany
    assert len(texts) > COPY_MIN
    write(ledger, range(1, 400), page_lines=37)  # a re-plan after a crash: nothing written twice
    check(ledger)
    assert ledger.counts(JOB)["pending"] == len(texts)
    for page_size in (1, 7, 1000):  # read pages ending inside payload pages, and one read for all
        got = {
            line: text
            for line, _, text in ledger.iter_items(JOB, "custom_id, payload", ("pending",), page_size=page_size)
        }
        assert got == texts
    # columns around the payload stay in place; items without a payload are left out, as the join did
    rows = list(ledger.iter_items(JOB, "custom_id, payload, est_tokens, attempts", ("pending", "invalid")))
    assert [(r[0], r[2], r[3], r[4]) for r in rows] == [(n, texts[n], 3, 0) for n in sorted(texts)]
    assert {r[1] for r in rows} == {f"c{n:05d}" for n in texts}
    held = held_bytes(ledger, 0.0).bytes
    assert held[("", "payload")] == sum(len(t.encode()) for t in texts.values())
    ledger.set_job(JOB, phase="Succeeded", payloads_until=0.0, outputs_until=0.0)
    assert drop_texts(ledger, 1.0, job=JOB) == (len(texts), 0)
    assert list(ledger.iter_items(JOB, "custom_id, payload", ("pending",))) == []
    assert held_bytes(ledger, 0.0).bytes[("", "payload")] == 0
    check(ledger)


def to_legacy(ledger: Ledger, job: str) -> int:
    """Rewrite a job's payload pages as an older Barge stored payloads: one `payloads` row per line."""
    with ledger.engine.begin() as conn:
        rows = conn.exec_driver_sql(
            ledger._sql("SELECT lines, text FROM payload_pages WHERE job = ?"), (job,)
        ).fetchall()
        legacy = [
            (job, line, bytes(text)[start:end].decode())
            for lines, text in rows
            for line, (start, end) in pages.spans(bytes(lines)).items()
        ]
        conn.exec_driver_sql(ledger._sql("DELETE FROM payload_pages WHERE job = ?"), (job,))
        conn.exec_driver_sql(ledger._sql("INSERT INTO payloads (job, line, payload) VALUES (?, ?, ?)"), legacy)
    return len(legacy)


def test_legacy_payload_rows_are_read_measured_and_dropped(ledger_url: str) -> None:
    ledger = Ledger(ledger_url)
    ledger.ensure_job(JOB, "h")
    texts = write(ledger, range(1, 60), page_lines=10)
    assert to_legacy(ledger, JOB) == len(texts)
    texts |= write(ledger, range(60, 90), page_lines=10)  # a job half planned before an upgrade, half after
    got = {line: text for line, _, text in ledger.iter_items(JOB, "custom_id, payload", ("pending",), page_size=9)}
    assert got == texts
    assert held_bytes(ledger, 0.0).bytes[("", "payload")] == sum(len(t.encode()) for t in texts.values())
    ledger.set_job(JOB, phase="Failed", payloads_until=0.0, outputs_until=0.0)
    assert drop_texts(ledger, 1.0, job=JOB) == (len(texts), 0)
    assert list(ledger.iter_items(JOB, "custom_id, payload", ("pending", "invalid"))) == []


@pytest.mark.parametrize("kind", ["anthropic", "openai"])
async def test_a_job_planned_before_pages_is_submitted_after_the_upgrade(
    start_emulator: Factory, tmp_path: Path, kind: str
) -> None:
    """Planned by an older Barge (per-line payload rows, and before sizes were recorded), then measured, cut into
    shards by bytes, submitted, ingested and finished by this one."""
    emu = start_emulator()
    ledger = Ledger(str(tmp_path / "l.db"))
    job = make_job(tmp_path, kind, 30)
    settings = dataclasses.replace(FAST, max_shard_bytes=2_000)
    runner = JobRunner(job, provider_for(kind, emu.url), ledger, prices.load(), settings)
    ledger.ensure_job(job.key, job.spec_hash, job.tenant, job.model)
    await runner._plan()
    assert to_legacy(ledger, job.key) == 30
    with ledger.engine.begin() as conn:
        conn.exec_driver_sql("UPDATE items SET size = 0")
    expected = [(f"c{i:04d}-v1-2026-11-30", f"claim text {i}") for i in range(30)]
    assert [(cid, text) for _, cid, text in ledger.iter_items(job.key, "custom_id, payload", ("pending",))] == expected
    snap = await run_to_end(runner)
    assert snap.phase == "Succeeded"
    results, failures = check_accounting(tmp_path, snap, 30)
    assert len(results) == 30
    assert failures == []
    assert len(emu.store.batches) >= 3, "shards were cut by the measured sizes (each request is ~150 bytes)"
    assert min(size for _, size in ledger.iter_items(job.key, "size", ("succeeded",))) > 0
    # what the provider was sent is the planned text, item by item
    received = {item.custom_id: item.last_user for batch in emu.store.batches.values() for item in batch.items}
    assert sorted(received.items()) == expected
