"""C1 (REVIEW-3): one tenant must not fill the ledger every tenant shares. Real plans (planner server, planner
processes) into a real SQLite ledger, through the runner the operator steps and through batch/capacity.py:
blank and invalid lines past the first `listedInvalidLines` are counted, not stored; a job over the per-job or the
per-tenant item limit, or planned while the volume is under its free-space floor, is refused with no row left;
a deleted job's audit rows are purged after `deletedJobsKeptFor`, their counts kept for the metrics."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from barge.api.batchjob import LLMBatchJobSpec
from barge.batch import capacity, planner, prices
from barge.batch.job import EngineSettings, Job
from barge.batch.runner import JobRunner
from barge.ledger import Ledger, lifetime, space
from barge.limits import LedgerLimits
from barge.operator.jobs import _text_lines
from barge.policy import Refused
from barge.providers import make_provider
from barge.storage import StoragePolicy

MODEL = "gpt-4o-mini"
SPEC: dict[str, Any] = {
    "provider": {"type": "openai", "model": MODEL, "secretRef": {"name": "k", "key": "k"}},
    "input": {"configMapRef": {"name": "cm", "key": "in"}},
    "output": {"url": "unused"},
    "request": {"template": "{{ text }}"},
}


def items(ledger: Ledger, key: str) -> int:
    return int(ledger._rows("SELECT COUNT(*) FROM items WHERE job = ?", (key,))[0][0])


def pages(ledger: Ledger, key: str) -> int:
    return int(ledger._rows("SELECT COUNT(*) FROM payload_pages WHERE job = ?", (key,))[0][0])


def valid(n: int, tag: str = "x") -> Any:
    def lines() -> Iterator[tuple[int, bytes]]:
        for i in range(1, n + 1):
            yield i, json.dumps({"id": f"{tag}{i}", "text": f"item {i} " + "p" * 200}).encode()

    return lines


class Reads:
    """A job's input that records whether it was read at all."""

    def __init__(self, lines: Any) -> None:
        self.lines, self.opened = lines, 0

    def __call__(self) -> Iterator[tuple[int, bytes]]:
        self.opened += 1
        return self.lines()  # type: ignore[no-any-return]


def what(tenant: str) -> planner.PlanInput:
    return planner.PlanInput(SPEC, "2026-12-01", tenant, MODEL, "openai")


def plan(ledger: Ledger, key: str, tenant: str, lines: Any, limits: LedgerLimits, **kw: Any) -> capacity.Planned:
    ledger.ensure_job(key, "h", tenant, MODEL)
    return asyncio.run(capacity.plan(key, what(tenant), lines, ledger, limits, **kw))


def test_a_configmap_of_newlines_leaves_a_counter_not_a_row_per_line(tmp_path: Path) -> None:
    """The reproduction of A.1 at 1/20 scale, through the runner with the default limits: 50,000 blank lines
    were 50,000 `invalid` rows that outlived the job; now the first 1,000 are rows, the rest one counter, and the
    job's counts, status and failures.jsonl still say 50,000 invalid."""
    ledger = Ledger(str(tmp_path / "ledger.db"))
    out = tmp_path / "out"
    job = Job(
        key="team-a/fill/u1",
        spec=LLMBatchJobSpec.model_validate({**SPEC, "output": {"url": f"file://{out}/"}}),
        tenant="team-a",
        run_date="2026-12-01",
        model=MODEL,
        lines=_text_lines("\n" * 50_000),
        storage=StoragePolicy(),
    )
    provider = make_provider("openai", "k", base_url="http://127.0.0.1:9/v1")  # never called: nothing to send

    async def step() -> Any:
        try:
            return await JobRunner(job, provider, ledger, prices.load(), EngineSettings()).step()
        finally:
            await provider.close()

    snap = asyncio.run(step())
    assert items(ledger, job.key) <= 1_000, f"{items(ledger, job.key)} rows for 50,000 blank lines"
    assert ledger.counts(job.key)["invalid"] == 50_000
    assert (snap.counts["invalid"], snap.counts["total"]) == (50_000, 50_000)
    failures = (out / "failures.jsonl").read_text().splitlines()
    assert len(failures) == 1_001
    assert json.loads(failures[-1])["unlisted"] == 49_000
    assert json.loads(failures[0])["line"] == 1


def test_invalid_lines_of_any_kind_past_the_listed_ones_are_counted(ledger_url: str) -> None:
    ledger = Ledger(ledger_url)

    def mixed() -> Iterator[tuple[int, bytes]]:
        for i in range(1, 3_001):
            yield i, (b"{not json" if i % 3 else json.dumps({"id": f"v{i}", "text": "ok"}).encode())

    done = plan(ledger, "a/mixed/1", "a", mixed, LedgerLimits(listed_invalid_lines=10))
    assert (done.lines, done.rows, done.unlisted) == (3_000, 1_010, 1_990)
    assert ledger.counts("a/mixed/1")["pending"] == 1_000
    assert ledger._rows("SELECT COUNT(*) FROM items WHERE job = ? AND state = 'invalid'", ("a/mixed/1",)) == [(10,)]


def test_a_job_over_the_per_job_limit_is_refused_whole_and_not_read_again(ledger_url: str) -> None:
    ledger = Ledger(ledger_url)
    limits = LedgerLimits(max_items_per_job=2_500)
    reads = Reads(valid(6_000))
    with pytest.raises(Refused) as refused:
        plan(ledger, "a/big/1", "a", reads, limits)
    assert refused.value.policy == "ItemLimit"
    assert "more than 2500 lines" in refused.value.message
    assert (items(ledger, "a/big/1"), pages(ledger, "a/big/1")) == (0, 0)  # never half-written
    assert not (ledger.job("a/big/1") or {})["planned"]
    with pytest.raises(Refused, match="ItemLimit"):
        plan(ledger, "a/big/1", "a", reads, limits)
    assert reads.opened == 1  # the second try was refused before reading
    assert plan(ledger, "a/small/1", "a", valid(2_500), limits).rows == 2_500


def test_a_tenant_over_its_limit_is_refused_until_deleted_jobs_are_purged(ledger_url: str) -> None:
    ledger = Ledger(ledger_url)
    limits = LedgerLimits(max_items_per_tenant=5_000, deleted_jobs_kept_seconds=3_600)
    assert plan(ledger, "a/one/1", "a", valid(4_000), limits).rows == 4_000
    second = Reads(valid(3_000, "y"))
    with pytest.raises(Refused) as refused:
        plan(ledger, "a/two/1", "a", second, limits)
    assert refused.value.policy == "ItemLimit"
    assert "tenant 'a' holds 4000 items" in refused.value.message
    assert items(ledger, "a/two/1") == 0
    with pytest.raises(Refused, match="ItemLimit"):
        plan(ledger, "a/two/1", "a", second, limits)
    assert second.opened == 1  # it needs more room than there is: not read again
    assert plan(ledger, "b/other/1", "b", valid(4_000), limits).rows == 4_000  # another tenant is not held
    lifetime.forget_job(ledger, "a/one/1", now=1_000.0)
    assert lifetime.purge_deleted(ledger, 1_000.0 + 3_599, 3_600) == 0
    assert space.tenant_items(ledger, "a") == 4_000  # a deleted job's rows count until they are purged
    assert lifetime.purge_deleted(ledger, 1_000.0 + 3_600, 3_600) == 1
    assert space.tenant_items(ledger, "a") == 0
    assert plan(ledger, "a/two/1", "a", second, limits).rows == 3_000


def test_planning_is_refused_under_the_free_space_floor_before_and_while_reading(tmp_path: Path) -> None:
    ledger = Ledger(str(tmp_path / "ledger.db"))
    limits = LedgerLimits(min_free_bytes=100 << 20)
    reads = Reads(valid(10))
    with pytest.raises(Refused) as refused:
        plan(ledger, "a/j/1", "a", reads, limits, free_bytes=lambda _ledger: 50 << 20)
    assert refused.value.policy == "LedgerFull"
    assert "50 MiB free, under the 100 MiB" in refused.value.message
    assert reads.opened == 0
    asked = iter([200 << 20, 200 << 20, 10 << 20])  # plenty at first, then the volume fills up

    with pytest.raises(Refused, match="LedgerFull"):
        plan(ledger, "a/k/1", "a", valid(20_000), limits, free_bytes=lambda _ledger: next(asked, 10 << 20))
    assert (items(ledger, "a/k/1"), pages(ledger, "a/k/1")) == (0, 0)
    assert int((ledger.job("a/k/1") or {})["total"]) == 0  # space, not size: retried in full once there is room


def test_the_real_volume_is_measured(tmp_path: Path) -> None:
    ledger = Ledger(str(tmp_path / "ledger.db"))
    free = space.free_bytes(ledger)
    assert free is not None
    assert free > 0
    with pytest.raises(Refused, match="LedgerFull"):
        plan(ledger, "a/j/1", "a", valid(10), LedgerLimits(min_free_bytes=free + (1 << 30)))
    assert plan(ledger, "a/j/1", "a", valid(10), LedgerLimits(min_free_bytes=0)).rows == 10
    assert (space.size_bytes(ledger) or 0) > 0


def test_a_purged_jobs_counts_are_folded_and_its_rows_gone(ledger_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(lifetime, "PURGE_ITEMS", 7)  # 30 items: five transactions, each folding what it deletes
    ledger = Ledger(ledger_url)
    key = "a/done/1"
    done = plan(ledger, key, "a", valid(30), LedgerLimits())
    assert done.rows == 30
    ledger.set_job(key, unlisted=5, planned=True, phase="Failed")
    ledger.record_batch(key, "s0", "batch_1", "openai", 1, 30, "completed", 1.0)
    ledger.set_batch(key, "batch_1", input_tokens=300, output_tokens=60, ingested=True)
    lifetime.forget_job(ledger, key, now=10.0)
    assert lifetime.purge_deleted(ledger, 10.0, 0) == 1
    for table in ("items", "payload_pages", "batches", "intents", "item_counts", "jobs"):
        assert ledger._rows(f"SELECT COUNT(*) FROM {table} WHERE job = ?", (key,)) == [(0,)], table  # noqa: S608
    folded = lifetime.counted_elsewhere(ledger)
    assert sorted(folded["items"]) == [("a", MODEL, "invalid", 5), ("a", MODEL, "pending", 30)]
    assert folded["batch"] == [("a", MODEL, 300, 60, 0, 0)]


def test_barge_ledger_purge_removes_deleted_jobs(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from barge.cli.main import app

    url = str(tmp_path / "ledger.db")
    ledger = Ledger(url)
    plan(ledger, "a/old/1", "a", valid(20), LedgerLimits())
    plan(ledger, "a/kept/1", "a", valid(20), LedgerLimits())
    lifetime.forget_job(ledger, "a/old/1", now=1.0)  # deleted long ago
    lifetime.forget_job(ledger, "a/kept/1")  # deleted just now
    ledger.close()
    out = CliRunner().invoke(app, ["ledger", "purge", "--ledger", url, "--deleted-older-than", "7d"])
    assert out.exit_code == 0, out.output
    assert "removed 1 deleted jobs" in out.output
    ledger = Ledger(url)
    assert (items(ledger, "a/old/1"), items(ledger, "a/kept/1")) == (0, 20)


@pytest.fixture
def small_volume(tmp_path: Path) -> Iterator[Path]:
    """A 64 MiB tmpfs standing in for the ledger's PVC (REVIEW-3 A.3), unmounted afterwards."""
    import subprocess

    where = tmp_path / "pvc"
    where.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64m", "tmpfs", str(where)], capture_output=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.decode().strip()}")
    try:
        yield where
    finally:
        subprocess.run(["umount", str(where)], check=True)


def test_a_tenant_cannot_fill_the_volume_other_tenants_write_to(
    small_volume: Path, request: pytest.FixtureRequest
) -> None:
    """A.3: team-a's job filled a 64 MiB volume and team-b's next intent and new job failed with 'database or disk
    is full'. Now team-a's blank lines cost a counter, its large job is refused at the floor with its rows removed,
    and team-b's writes go on."""
    ledger = Ledger(str(small_volume / "ledger.db"))
    request.addfinalizer(ledger.close)  # before the volume is unmounted
    limits = LedgerLimits(min_free_bytes=16 << 20)
    ledger.ensure_job("team-b/nightly/u", "h", "team-b", MODEL)
    ledger.add_items(
        "team-b/nightly/u",
        [
            {"custom_id": f"c{i}", "line": i, "state": "pending", "payload": "p", "est_tokens": 1, "size": 10}
            for i in range(1, 11)
        ],
    )
    blank = plan(ledger, "team-a/fill/u", "team-a", _text_lines("\n" * 200_000), limits)
    assert (blank.rows, blank.unlisted) == (1_000, 199_000)

    def big() -> Iterator[tuple[int, bytes]]:
        pad = "q" * 2_000
        for i in range(1, 40_001):  # ~80 MB of prompts for a 64 MiB volume
            yield i, json.dumps({"id": f"b{i}", "text": f"{i} {pad}"}).encode()

    with pytest.raises(Refused) as refused:
        plan(ledger, "team-a/big/u", "team-a", big, limits)
    assert refused.value.policy == "LedgerFull"
    assert (items(ledger, "team-a/big/u"), pages(ledger, "team-a/big/u")) == (0, 0)
    ledger.open_intent("team-b/nightly/u", "s00000", 1, 1, 10, 10)  # what failed in A.3
    ledger.ensure_job("team-b/other/u", "h", "team-b", MODEL)
    with pytest.raises(Refused, match="LedgerFull"):  # the floor holds until space is freed ...
        plan(
            ledger, "team-c/j/u", "team-c", valid(10), LedgerLimits(min_free_bytes=(space.free_bytes(ledger) or 0) + 1)
        )
    assert plan(ledger, "team-c/j/u", "team-c", valid(10), limits).rows == 10  # ... and small plans still fit
