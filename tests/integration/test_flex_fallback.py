"""spec.fallback.serviceTier on the synchronous path (batch/tier.py, batch/fallback.py), the runner against
`barge emulator` with the real OpenAI SDK: a job too close to its deadline for a batch sends its items at flex
while the deadline leaves room for flex's pace (its 429s retried with backoff), then drops to standard; each
answer is priced at the tier it reports (flex at the batch rate)."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from barge.batch import prices, tenant_budget, tier
from barge.batch.job import EngineSettings
from barge.batch.runner import JobRunner
from barge.emulator import flex
from barge.ledger import Ledger, spend
from barge.providers.base import Usage
from tests.conftest import Factory
from tests.integration.test_engine import make_job, outputs, provider_for, run_to_end

#: The deadline is inside it: the runner goes straight to the synchronous path.
NEAR = EngineSettings(min_batch_window=3600)


def usage_of(lines: list[dict[str, object]]) -> Usage:
    total = Usage()
    for line in lines:
        u = line["usage"]
        assert isinstance(u, dict)
        total = total + Usage(u["input_tokens"], u["output_tokens"], u["cache_read_tokens"], u["cache_write_tokens"])
    return total


async def test_auto_uses_flex_then_standard_as_the_deadline_nears_and_prices_each_answer_at_its_tier(
    start_emulator: Factory, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # seed 8: the first flex call is answered 429 resource_unavailable (then 5 served of the next 5 draws)
    emu = start_emulator({"seed": 8, "sync": {"latencyMs": 5, "flex": {"latencyMs": 300, "unavailableRate": 0.4}}})
    # a small prior, so that the pass starts at flex; what it measures of flex then moves it to standard
    monkeypatch.setattr(tier, "FLEX_PRIOR_SECONDS", 0.05)
    n = 24
    created = time.time()
    deadline = datetime.fromtimestamp(created, UTC) + timedelta(seconds=4)
    job = make_job(
        tmp_path, "openai", n, deadline=deadline.isoformat(), fallback={"concurrency": 2, "serviceTier": "auto"}
    )
    events: list[tuple[str, str]] = []
    table = prices.load()
    planned = [0.0]  # the runner's clock leaves out the time planning took (seconds on this shared machine)
    runner = JobRunner(
        job,
        provider_for("openai", emu.url),
        Ledger(str(tmp_path / "ledger.db")),
        table,
        NEAR,
        on_event=lambda reason, message, kind: events.append((reason, message)),
        clock=lambda: time.time() - planned[0],
    )
    runner.ledger.ensure_job(job.key, job.spec_hash, job.tenant, job.model)
    await runner._plan()
    planned[0] = time.time() - created  # the pass starts 4 s before the deadline, as if planning took no time
    snap = await run_to_end(runner)
    ok, failed = outputs(tmp_path)
    assert snap.phase == "Succeeded", (snap.message, events)
    assert failed == []
    assert len(ok) == n
    flexed = [r for r in ok if r["via"] == "flex"]
    standard = [r for r in ok if r["via"] == "sync"]
    print(f"{len(flexed)} answers at flex, {len(standard)} at standard; {flex.unavailable_count(emu.store)} flex 429s")
    assert flexed, "auto started at flex"
    assert standard, "auto dropped to standard as the deadline neared"
    assert len(flexed) + len(standard) == n
    assert flex.unavailable_count(emu.store) >= 1  # the 429 was retried: every item still succeeded
    assert snap.counts["viaFallback"] == n
    assert "batches" not in {reason for reason, _ in events if reason == "Submitted"}
    # priced per answer's reported tier: flex at the batch rate, standard at the list price
    flex_usage, sync_usage = usage_of(flexed), usage_of(standard)
    expected = table.cost(job.model, flex_usage, batch=True) + table.cost(job.model, sync_usage, batch=False)
    everything_standard = table.cost(job.model, flex_usage + sync_usage, batch=False)
    assert snap.usage["costUSD"] == prices.money(expected)
    assert expected < everything_standard
    assert snap.usage["savedUSD"] == prices.money(everything_standard - expected)
    assert snap.usage["inputTokens"] == flex_usage.input_tokens + sync_usage.input_tokens
    # the tenant's spend (tenant budgets, cost reports) records the flex answers apart, at the batch rate
    month = spend.tenant_usage(runner.ledger, "t", 0, time.time() + 3600)
    assert {via for _, via, _, _ in month} == {"flex", "sync"}
    assert tenant_budget.cost_of(table, month) == expected
    # what /metrics reads: the flex answers as a path of their own (barge_cost_usd{path="flex"}, at the batch rate)
    metric = runner.ledger.metric_rows()
    assert [Usage(*map(int, r[2:])) for r in metric["flex"]] == [flex_usage]
    assert [Usage(*map(int, r[2:])) for r in metric["sync"]] == [sync_usage]


async def test_flex_on_a_provider_without_it_is_sent_at_standard_and_said(
    start_emulator: Factory, tmp_path: Path
) -> None:
    emu = start_emulator()
    deadline = (datetime.now(UTC) + timedelta(minutes=5)).isoformat()
    job = make_job(tmp_path, "anthropic", 3, deadline=deadline, fallback={"serviceTier": "flex"})
    events: list[tuple[str, str]] = []
    runner = JobRunner(
        job,
        provider_for("anthropic", emu.url),
        Ledger(str(tmp_path / "ledger.db")),
        prices.load(),
        NEAR,
        on_event=lambda reason, message, kind: events.append((reason, message)),
    )
    snap = await run_to_end(runner)
    ok, _ = outputs(tmp_path)
    assert snap.phase == "Succeeded"
    assert {r["via"] for r in ok} == {"sync"}
    ignored = [m for reason, m in events if reason == "FlexIgnored"]
    assert len(ignored) == 1
    assert "has no flex tier" in ignored[0]


async def test_the_default_standard_tier_never_asks_for_flex(start_emulator: Factory, tmp_path: Path) -> None:
    emu = start_emulator({"sync": {"flex": {"unavailableRate": 1.0}}})  # a flex call would be refused
    deadline = (datetime.now(UTC) + timedelta(minutes=5)).isoformat()
    job = make_job(tmp_path, "openai", 3, deadline=deadline)
    runner = JobRunner(job, provider_for("openai", emu.url), Ledger(str(tmp_path / "ledger.db")), prices.load(), NEAR)
    snap = await run_to_end(runner)
    ok, _ = outputs(tmp_path)
    assert snap.phase == "Succeeded"
    assert {r["via"] for r in ok} == {"sync"}
    assert flex.unavailable_count(emu.store) == 0
