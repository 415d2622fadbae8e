"""CascadeRunner (barge/cascade/runner.py) with the real Anthropic adapter against the emulator and a real SQLite
ledger: a downstream job is not judged while its input is open, takes later results in a later wave, ends on an
empty night as its upstream did, and stops waiting at its own deadline, saying what it left."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from barge.api.batchjob import FromJobSpec, LLMBatchJobSpec
from barge.batch import prices
from barge.batch.job import Job
from barge.batch.runner import JobRunner
from barge.cascade.lines import inline_lines
from barge.cascade.runner import CascadeRunner
from barge.cascade.select import Selector
from barge.cascade.source import Upstream
from barge.ledger import Ledger
from barge.storage import StoragePolicy
from tests.conftest import Factory, state
from tests.integration.test_engine import FAST, provider_for, run_to_end

MODEL = "claude-haiku-4-5"
FIRE = "status == 'succeeded' && input.text.contains('fire')"


def items(n: int) -> list[dict[str, Any]]:
    return [{"id": f"c{i}", "text": "a pan fire" if i % 4 == 0 else "a burst pipe"} for i in range(1, n + 1)]


#: An upstream that ended keeps its outputs in the ledger here, as a running one has them (by default they are
#: dropped at its end, and read from its results.jsonl then: tests/unit/test_cascade.py).
KEEP = {"retention": {"keepOutputsFor": "1d"}}


def job(tmp_path: Path, name: str, lines: Callable[[], Iterator[tuple[int, bytes]]], **spec: Any) -> Job:
    raw: dict[str, Any] = {
        "provider": {"type": "anthropic", "model": MODEL, "secretRef": {"name": "k"}},
        "input": {"inline": [{"id": "x"}]},
        "output": {"url": str(tmp_path / f"{name}-out")},
        "request": {"template": "{{ text }}", "maxTokens": 20},
        "successRatio": "0.5",
        **spec,
    }
    return Job(f"t/{name}/u-{name}", LLMBatchJobSpec.model_validate(raw), "t", "2026-12-01", MODEL, lines)


def downstream(
    tmp_path: Path, ledger: Ledger, url: str, up: Upstream, name: str = "down", **spec: Any
) -> CascadeRunner:
    source = {"name": up.name, "select": FIRE, "fields": {"text": "input.text"}}
    down = job(tmp_path, name, inline_lines([]), input={"fromJob": source}, **spec)
    return CascadeRunner(
        down,
        provider_for("anthropic", url),
        ledger,
        prices.load(),
        FAST,
        upstream=up,
        selector=Selector.compile(FromJobSpec.model_validate(source)),
    )


def upstream_of(runner: JobRunner, inputs: list[dict[str, Any]], *, terminal: bool, phase: str) -> Upstream:
    spec = runner.job.spec
    return Upstream("up", runner.job.key, phase, terminal, spec.output.url, StoragePolicy(), inline_lines(inputs))


def ids(path: Path) -> set[str]:
    return {json.loads(x)["id"] for x in path.read_text().splitlines()} if path.exists() else set()


async def test_open_input_is_not_judged_and_a_later_wave_takes_the_rest(
    start_emulator: Factory, tmp_path: Path
) -> None:
    emu = start_emulator()
    ledger = Ledger(str(tmp_path / "l.db"))
    first = items(8)
    up = JobRunner(
        job(tmp_path, "up", inline_lines(first), **KEEP),
        provider_for("anthropic", emu.url),
        ledger,
        prices.load(),
        FAST,
    )
    assert (await run_to_end(up)).phase == "Succeeded"
    # seen while the upstream "runs": its first 8 results are final, more may come
    down = downstream(tmp_path, ledger, emu.url, upstream_of(up, first, terminal=False, phase="Running"))
    for _ in range(100):
        snap = await down.step()
        if snap.counts["succeeded"] == 2:
            break
        await asyncio.sleep(0.1)
    assert snap.counts["succeeded"] == 2, snap.message  # c4 and c8: every item it has is done ...
    assert not snap.terminal  # ... and it is not judged: more input may come
    assert "taking results from LLMBatchJob 'up' (Running)" in snap.message
    # the upstream ends: the last wave finds nothing new, the input is closed, the job is judged
    closed = downstream(tmp_path, ledger, emu.url, upstream_of(up, first, terminal=True, phase="Succeeded"))
    assert (await run_to_end(closed)).phase == "Succeeded"
    assert ids(tmp_path / "down-out" / "results.jsonl") == {"c4", "c8"}
    sent = [
        cid for b in state(emu)["batches"] for cid in b["custom_ids"] if cid.startswith("c4-") or cid.startswith("c8-")
    ]
    assert len(sent) == 4  # c4 and c8 once upstream, once downstream: never twice


async def test_an_empty_night_ends_as_its_upstream_did(start_emulator: Factory, tmp_path: Path) -> None:
    emu = start_emulator()
    ledger = Ledger(str(tmp_path / "l.db"))
    calm = [{"id": f"c{i}", "text": "a burst pipe"} for i in range(1, 4)]
    up = JobRunner(
        job(tmp_path, "up", inline_lines(calm)), provider_for("anthropic", emu.url), ledger, prices.load(), FAST
    )
    assert (await run_to_end(up)).phase == "Succeeded"
    ok = downstream(tmp_path, ledger, emu.url, upstream_of(up, calm, terminal=True, phase="Succeeded"))
    snap = await run_to_end(ok)
    assert snap.phase == "Succeeded"
    assert (tmp_path / "down-out" / "results.jsonl").read_text() == ""
    failed = downstream(tmp_path, ledger, emu.url, upstream_of(up, calm, terminal=True, phase="Failed"), "down2")
    snap = await run_to_end(failed)
    assert snap.phase == "Failed"
    assert "LLMBatchJob 'up' is Failed and gave this job no item" in snap.message


async def test_at_its_deadline_it_stops_waiting_and_says_what_it_left(start_emulator: Factory, tmp_path: Path) -> None:
    emu = start_emulator()
    ledger = Ledger(str(tmp_path / "l.db"))
    first = items(4)
    up = JobRunner(
        job(tmp_path, "up", inline_lines(first), **KEEP),
        provider_for("anthropic", emu.url),
        ledger,
        prices.load(),
        FAST,
    )
    assert (await run_to_end(up)).phase == "Succeeded"
    past = (datetime.now(UTC) - timedelta(minutes=1)).isoformat()
    events: list[tuple[str, str]] = []
    down = downstream(tmp_path, ledger, emu.url, upstream_of(up, first, terminal=False, phase="Running"), deadline=past)
    down.on_event = lambda reason, message, kind: events.append((reason, message))
    snap = await run_to_end(down)
    assert snap.phase == "Succeeded"  # c4 went through the synchronous path: the deadline had passed
    assert ids(tmp_path / "down-out" / "results.jsonl") == {"c4"}
    assert any(r == "UpstreamOpenAtDeadline" and "'up' is Running" in m for r, m in events)
