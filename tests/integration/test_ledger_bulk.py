"""Bulk item updates (ledger/bulk.py) on both backends: rows in any order land on their own items, every field is
written, `attempts` None keeps the count, and a batch's usage and expired count are added once per apply."""

from __future__ import annotations

import random
import time
from pathlib import Path

import pytest

from barge.ledger import ItemUpdate, Ledger
from barge.ledger.bulk import COPY_MIN
from barge.providers.base import MAX_USAGE
from tests.conftest import fresh_database

N = COPY_MIN * 2 + 7  # over the COPY threshold on PostgreSQL


def submitted(url: str, job: str, size: int) -> tuple[Ledger, str]:
    """A ledger holding `job`'s items c0..c<size-1>, all submitted in batch b0."""
    ledger = Ledger(url)
    ledger.ensure_job(job, "h")
    ledger.add_items(job, ({"custom_id": f"c{i}", "line": i + 1, "state": "pending"} for i in range(size)))
    ledger.open_intent(job, "s0", 1, 1, size, size)
    ledger.record_batch(job, "s0", "b0", "anthropic", 1, size, "ended", time.time())
    return ledger, job


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
@pytest.mark.parametrize("size", [3, N], ids=["few", "many"])
def test_bulk_apply_lands_every_row(tmp_path: Path, backend: str, size: int, request: pytest.FixtureRequest) -> None:
    url = str(tmp_path / "l.db") if backend == "sqlite" else request.getfixturevalue("postgres_url")
    ledger, job = submitted(url, f"ns/bulk/{backend}-{size}-{time.time_ns()}", size)
    changes = []
    for i in range(size):
        if i % 3 == 0:
            changes.append(ItemUpdate(f"c{i}", "succeeded", "", "", 1, "batch", f"out\t{i}\n\\", (i, 2, 3, 4)))
        elif i % 3 == 1:
            changes.append(ItemUpdate(f"c{i}", "pending", "expired", "window passed", 1))
        else:  # attempts None: the item's count is kept (it was 0)
            changes.append(ItemUpdate(f"c{i}", "pending", "canceled", "batch cancelled by Barge", None))
    random.Random(7).shuffle(changes)
    ledger.apply(job, changes, "b0")
    ledger.apply(job, [], "b0")  # nothing to apply: nothing counted

    rows = {
        r[0]: r[1:]
        for r in ledger._rows(
            "SELECT custom_id, state, error_type, reason, attempts, via, output, input_tokens, output_tokens, "
            "cache_read_tokens, cache_write_tokens FROM items WHERE job = ?",
            (job,),
        )
    }
    for i in range(size):
        if i % 3 == 0:
            assert rows[f"c{i}"] == ("succeeded", "", "", 1, "batch", f"out\t{i}\n\\", i, 2, 3, 4)
        elif i % 3 == 1:
            assert rows[f"c{i}"] == ("pending", "expired", "window passed", 1, "", None, 0, 0, 0, 0)
        else:
            assert rows[f"c{i}"] == ("pending", "canceled", "batch cancelled by Barge", 0, "", None, 0, 0, 0, 0)
    batch = ledger.batches_of(job)[0]
    succeeded = range(0, size, 3)
    assert (batch["input_tokens"], batch["output_tokens"]) == (sum(succeeded), 2 * len(succeeded))
    assert (batch["cache_read_tokens"], batch["cache_write_tokens"]) == (3 * len(succeeded), 4 * len(succeeded))
    assert batch["expired"] == len(range(1, size, 3))
    ledger.close()


def test_postgres_keeps_outputs_in_the_item_row(postgres_url: str) -> None:
    """A ~3 KB output stays in its item's heap row: not compressed, nothing in the TOAST table (PostgreSQL's default
    moved anything past ~2 KB out of line, five WAL records more per result). A ledger whose `items` lost the
    setting (made by an older Barge) gets it back when opened."""
    ledger = Ledger(postgres_url)
    ledger._rows("SELECT 1", ())
    with ledger.engine.begin() as conn:
        conn.exec_driver_sql("ALTER TABLE items RESET (toast_tuple_target)")
    ledger.close()
    size = COPY_MIN + 10
    ledger, job = submitted(postgres_url, f"ns/inline/{time.time_ns()}", size)
    rng = random.Random(3)
    outputs = [" ".join("".join(rng.choices("abcdefghij", k=7)) for _ in range(375)) for _ in range(size)]
    toast = "SELECT pg_relation_size(reltoastrelid) FROM pg_class WHERE oid = 'items'::regclass"
    toast_before = ledger._rows(toast, ())
    ledger.apply(job, [ItemUpdate(f"c{i}", "succeeded", "", "", 1, "batch", outputs[i]) for i in range(size)], "b0")
    found = ledger._rows(
        "SELECT COUNT(*), COUNT(pg_column_compression(output)), MIN(length(output)) FROM items WHERE job = ?", (job,)
    )
    assert found == [(size, 0, min(map(len, outputs)))]
    assert ledger._rows(toast, ()) == toast_before  # nothing moved out of line
    stored = dict(ledger._rows("SELECT custom_id, output FROM items WHERE job = ?", (job,)))
    assert stored == {f"c{i}": outputs[i] for i in range(size)}
    ledger.close()


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
@pytest.mark.parametrize("size", [3, N], ids=["few", "many"])
def test_nul_in_provider_text_is_stored_as_a_replacement_character(
    tmp_path: Path, backend: str, size: int, request: pytest.FixtureRequest
) -> None:
    """A provider's output, reason or error type holding NUL (U+0000) is stored with U+FFFD in its place, on both
    ledgers: PostgreSQL's text cannot hold NUL, and the whole chunk used to fail (every step of the job again)."""
    url = str(tmp_path / "l.db") if backend == "sqlite" else request.getfixturevalue("postgres_url")
    ledger, job = submitted(url, f"ns/nul/{backend}-{size}-{time.time_ns()}", size)
    rows = [(f"c{i}", "succeeded", "", "", 1, "batch", f"out {i}", 1, 1, 0, 0) for i in range(size)]
    rows[1] = ("c1", "succeeded", "", "", 1, "batch", "a\x00b\x00", 1, 1, 0, 0)
    rows[2] = ("c2", "invalid", "bad\x00type", "why\x00not", 1, "batch", None, 0, 0, 0, 0)
    ledger.apply_rows(job, rows, "b0")
    stored = {
        r[0]: r[1:]
        for r in ledger._rows("SELECT custom_id, state, error_type, reason, output FROM items WHERE job = ?", (job,))
    }
    assert stored["c1"] == ("succeeded", "", "", "a\ufffdb\ufffd")
    assert stored["c2"] == ("invalid", "bad\ufffdtype", "why\ufffdnot", None)
    assert all(stored[f"c{i}"] == ("succeeded", "", "", f"out {i}") for i in (0, *range(3, size)))
    ledger.close()


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_a_batch_counts_past_two_billion_tokens(tmp_path: Path, backend: str, request: pytest.FixtureRequest) -> None:
    """300 results of MAX_USAGE input tokens: their batch holds 3e9 (a batch of 100,000 requests of 30,000 tokens
    does too). PostgreSQL's integer columns refused the sum, and every later step of the job with it."""
    url = str(tmp_path / "l.db") if backend == "sqlite" else request.getfixturevalue("postgres_url")
    ledger, job = submitted(url, f"ns/big/{backend}-{time.time_ns()}", 300)
    usage = (MAX_USAGE, 7, MAX_USAGE, 0)
    ledger.apply(job, [ItemUpdate(f"c{i}", "succeeded", "", "", 1, "batch", "o", usage) for i in range(300)], "b0")
    batch = ledger.batches_of(job)[0]
    assert (batch["input_tokens"], batch["output_tokens"], batch["cache_read_tokens"]) == (
        300 * MAX_USAGE,
        2100,
        300 * MAX_USAGE,
    )
    assert ledger.usage(job)[0] == (300 * MAX_USAGE, 2100, 300 * MAX_USAGE, 0)


def test_a_postgresql_ledger_made_with_32_bit_batch_usage_is_widened(postgres_url: str) -> None:
    url = fresh_database(postgres_url)
    ledger = Ledger(url)
    with ledger.engine.begin() as conn:  # as a ledger made before the columns were 64-bit
        conn.exec_driver_sql("ALTER TABLE batches ALTER COLUMN input_tokens TYPE integer")
    narrow = "SELECT data_type FROM information_schema.columns WHERE table_name = 'batches' AND column_name = ?"
    assert ledger._rows(narrow, ("input_tokens",)) == [("integer",)]
    ledger.close()
    ledger = Ledger(url)
    assert [ledger._rows(narrow, (c,))[0][0] for c in ("input_tokens", "output_tokens")] == ["bigint", "bigint"]
