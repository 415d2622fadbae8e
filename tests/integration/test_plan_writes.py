"""The plan's ledger writes: payload pages go in transactions of about `WRITE_BYTES`, the item rows in far fewer,
of about `WRITE_ROW_BYTES` of rows (~15,000-20,000). `items` is clustered on custom_id, so rows whose ids do not
sort by line touch pages all over it, and each transaction wrote every page it touched again (100k random ids: 1.7 s
of the writer's CPU with a transaction every ~2,000 rows of ~2 KB payloads, 1.0 s by 20,000). Counted on a real
plan (planner server, planner process, SQLite ledger); every item still lands."""

from __future__ import annotations

import asyncio
import json
import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from barge.batch import planner
from barge.ledger import Ledger

JOB = "ns/plan-writes/1"
SPEC = {
    "provider": {"type": "anthropic", "model": "claude-haiku-4-5", "secretRef": {"name": "k"}},
    "input": {"url": "unused"},
    "output": {"url": "unused"},
    "request": {"template": "{{ text }}", "maxTokens": 50},
}
N = 6000  # ~12 MB of ~2 KB payloads: three page writes' worth


def lines() -> Iterator[tuple[int, bytes]]:
    rng = random.Random(6)
    pad = "".join(rng.choices("abcdefghijklmnopqrstuvwxyz ", k=2000))
    for i in range(N):
        yield i + 1, json.dumps({"id": f"{rng.getrandbits(64):016x}", "text": f"{i} {pad}"}).encode()


def test_rows_are_written_in_few_transactions_and_pages_by_bytes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ledger = Ledger(str(tmp_path / "ledger.db"))
    ledger.ensure_job(JOB, "h", tenant="t", model="claude-haiku-4-5")
    writes: list[tuple[int, int]] = []  # (rows, payload pages) per add_frames call: one transaction each
    add_frames = ledger.add_frames

    def counted(job: str, frames: Any, pages: Any) -> int:
        writes.append((sum(len(json.loads(f)) for f in frames), len(pages)))
        return add_frames(job, frames, pages)

    monkeypatch.setattr(ledger, "add_frames", counted)
    what = planner.PlanInput(SPEC, "2026-11-30", "t", "claude-haiku-4-5", "anthropic")
    assert asyncio.run(planner.plan(JOB, what, lines, ledger)) == N
    with_rows = [w for w in writes if w[0]]
    assert sum(w[0] for w in writes) == N
    assert len(with_rows) == 1  # the 6,000 rows together (under WRITE_ROW_BYTES of JSON)
    assert len([w for w in writes if w[1]]) >= 3  # the ~12 MB of pages in writes of ~4 MB
    assert ledger.counts(JOB)["pending"] == N
    assert ledger._rows("SELECT COUNT(*) FROM items WHERE job = ?", (JOB,)) == [(N,)]
    ledger.close()
