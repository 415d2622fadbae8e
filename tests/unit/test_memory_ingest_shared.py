"""Ingestions running at once share one bound on the result text they hold (batch/memory.py INGEST_TEXT, C2).

Each ingestion alone cuts its chunks at ingest.CHUNK_BYTES; several batches ending together (two tenants' jobs on
the same engine loop) each held a chunk, so the operator's memory grew with the number of batches ending at once.
Here two batches of 2,000 results of 8 KB (16 MiB of text each, a whole chunk apiece) are ingested at once from a
fake provider whose pages interleave: together they never hold more than the shared bound and a page each.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterable
from datetime import UTC, datetime
from pathlib import Path

import pytest

from barge.batch import ingest, memory
from barge.ledger import Ledger
from barge.ledger.bulk import Row
from barge.providers.base import BatchInfo, Outcome, Parsed

N, SIZE, PAGE = 2_000, 8192, 50


HELD = {"now": 0, "most": 0}  # result text handed to ingestion and not yet written to the ledger, both batches


class Interleaved:
    name = "anthropic"

    async def parsed_pages(self, batch_id: str) -> AsyncIterator[list[Parsed]]:
        for start in range(0, N, PAGE):
            await asyncio.sleep(0)  # a network read: the other ingestion runs meanwhile
            HELD["now"] += PAGE * SIZE
            HELD["most"] = max(HELD["most"], HELD["now"])
            text = "x" * SIZE
            yield [
                (f"{batch_id}-{i}", Outcome.SUCCEEDED, text, 10, SIZE // 4, 0, 0, "", "")
                for i in range(start, start + PAGE)
            ]


def setup(ledger: Ledger, job: str, batch_id: str) -> None:
    ledger.ensure_job(job, "h", "t", "m")
    rows = [
        {"custom_id": f"{batch_id}-{i}", "line": i + 1, "state": "pending", "payload": "p", "est_tokens": 1, "size": 10}
        for i in range(N)
    ]
    ledger.add_items(job, rows)
    ledger.open_intent(job, "s00000", 1, 1, N, N)
    ledger.record_batch(job, "s00000", batch_id, "anthropic", 1, N, "in_progress", 0.0)


def test_two_ingestions_at_once_hold_the_shared_bound_not_a_chunk_each(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    shared = memory.TextBudget(ingest.CHUNK_BYTES)  # room for one full chunk between the two of them
    monkeypatch.setattr(memory, "INGESTING", shared)
    ledger = Ledger(str(tmp_path / "l.db"))
    setup(ledger, "a/j1/u", "b1")
    setup(ledger, "b/j2/u", "b2")
    parts: list[int] = []
    apply_rows = ledger.apply_rows

    def applied(job: str, rows: list[Row], batch_id: str | None = None) -> None:
        apply_rows(job, rows, batch_id)
        HELD["now"] -= sum(len(r[6] or "") for r in rows)

    monkeypatch.setattr(ledger, "apply_rows", applied)

    def write_part(_name: str, lines: Iterable[bytes]) -> None:
        parts.append(sum(1 for _ in lines))

    async def both() -> list[ingest.Report]:
        def one(job: str, batch_id: str) -> asyncio.Future[ingest.Report]:
            info = BatchInfo(batch_id, "ended", True, datetime.now(UTC), N, {}, [])
            return asyncio.ensure_future(ingest.ingest(ledger, job, Interleaved(), info, 3, write_part))

        return list(await asyncio.gather(one("a/j1/u", "b1"), one("b/j2/u", "b2")))

    reports = asyncio.run(both())
    assert [r.states for r in reports] == [{"succeeded": N}, {"succeeded": N}]
    page = PAGE * SIZE
    assert HELD["most"] <= ingest.CHUNK_BYTES + 2 * page, f"{HELD['most'] >> 20} MiB held at once"  # a page each over
    assert sum(parts) == 2 * N
    assert len(parts) > 2  # committed in more, smaller chunks than one per batch
    assert ledger.counts("a/j1/u")["succeeded"] == N
