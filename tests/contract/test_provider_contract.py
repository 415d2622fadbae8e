"""The `providers` contract: what the engine relies on from every adapter, run on each one (cases.CASES) with its
real SDK against `barge emulator`. Create, poll, results joined by custom_id, every outcome routed (expired,
errored, refused), cancel with partial results, deletion (retention) idempotent, creates never retried, fatal
errors, the synchronous fallback, and a crash between create and record adopted: one provider batch per shard."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from barge.api.batchjob import LLMBatchJobSpec
from barge.batch import prices
from barge.batch.job import EngineSettings, Job
from barge.batch.runner import JobRunner
from barge.emulator.core import REPLY_PREFIX
from barge.ledger import Ledger
from barge.providers import BatchInfo, BatchProvider, Fatal, Outcome, Request, Result, Transient
from tests.conftest import Factory, state
from tests.contract.cases import CASES, Case

pytestmark = pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])


def requests(case: Case, n: int) -> list[Request]:
    return [Request(f"id-{i:04d}", case.model, f"item {i} text", 64, system="Summarise.") for i in range(n)]


async def wait_ended(p: BatchProvider, batch_id: str) -> BatchInfo:
    async with asyncio.timeout(30):
        while not (info := await p.retrieve(batch_id)).ended:  # noqa: ASYNC110 - polling a remote batch
            await asyncio.sleep(0.05)
    return info


async def create(p: BatchProvider, reqs: list[Request], metadata: dict[str, str] | None = None) -> BatchInfo:
    return await p.create_batch((p.encode(r) for r in reqs), metadata or {})


async def results(p: BatchProvider, batch_id: str) -> list[Result]:
    return [r async for r in p.results(batch_id)]


async def test_create_poll_results(start_emulator: Factory, case: Case) -> None:
    emu = start_emulator()
    p = case.provider(emu.url)
    reqs = requests(case, 25)
    info = await create(p, reqs, {"barge_job": "ns/j", "barge_shard": "s00000"})
    assert not info.ended
    ended = await wait_ended(p, info.id)
    assert ended.id == info.id
    assert ended.request_count in (None, 25)
    by_id = {r.custom_id: r for r in await results(p, info.id)}
    assert set(by_id) == {r.custom_id for r in reqs}, "results join by custom_id, one per request"
    for r in reqs:
        got = by_id[r.custom_id]
        assert got.outcome is Outcome.SUCCEEDED
        assert got.text == f"{REPLY_PREFIX}{r.user}"
        assert got.usage.input_tokens > 0
        assert got.usage.output_tokens > 0
    assert info.id in [b.id for b in await p.list_recent(10)]
    await p.close()


async def test_expired_errored_and_refused_are_routed(start_emulator: Factory, case: Case) -> None:
    emu = start_emulator(
        {"batch": {"outcomes": {"server_error": 0.2, "invalid_request": 0.2, "expired": 0.2, "refusal": 0.2}}}
    )
    p = case.provider(emu.url)
    info = await create(p, requests(case, 200))
    await wait_ended(p, info.id)
    got = await results(p, info.id)
    assert len(got) == 200
    seen = Counter(r.outcome for r in got)
    expected = {Outcome.SUCCEEDED, Outcome.TRANSIENT, Outcome.INVALID, Outcome.EXPIRED}
    assert set(seen) == expected | ({Outcome.REFUSED} if case.refusals else set())
    assert all(r.error_type for r in got if r.outcome is not Outcome.SUCCEEDED)
    await p.close()


async def test_cancel_leaves_partial_results(start_emulator: Factory, case: Case) -> None:
    emu = start_emulator({"batch": {"processingSeconds": 1.5, "cancelSeconds": 0.2}})
    p = case.provider(emu.url)
    info = await create(p, requests(case, 80))
    await asyncio.sleep(0.8)
    await p.cancel(info.id)
    await wait_ended(p, info.id)
    outcomes = Counter(r.outcome for r in await results(p, info.id))
    assert outcomes[Outcome.CANCELED] > 0
    assert outcomes[Outcome.SUCCEEDED] > 0, "what finished before the cancel is a result"
    assert sum(outcomes.values()) == 80
    assert (await p.cancel(info.id)).ended, "cancelling an ended batch is not an error"
    await p.close()


async def test_delete_objects_is_idempotent(start_emulator: Factory, case: Case) -> None:
    emu = start_emulator()
    p = case.provider(emu.url)
    info = await create(p, requests(case, 3), {"barge_job": "t", "barge_shard": "s00000"})
    await wait_ended(p, info.id)
    assert len(await results(p, info.id)) == 3
    assert await p.delete_objects(info.id) == case.objects
    assert await p.delete_objects(info.id) == 0, "what is already gone counts as deleted"
    left = state(emu)
    assert not [f for f in left["files"] if f["batch"] == info.id]
    batch = next(b for b in left["batches"] if info.id in (b["id"], f"{info.id.rsplit('/', 1)[0]}/{b['id']}"))
    assert batch["archived"] or case.kind not in ("anthropic", "mistral")
    await p.close()


async def test_create_is_never_retried(start_emulator: Factory, case: Case) -> None:
    emu = start_emulator({"batch": {"createFailuresAfterAccept": 1}})
    p = case.provider(emu.url, sync_retries=2)  # reads and sync calls may retry; creates not
    if case.idempotent_create:  # retried under the same idempotency key: the one job it created, not a second
        info = await create(p, requests(case, 1))
        assert [b["id"] for b in state(emu)["batches"]] == [info.id.rsplit("/", 1)[-1]]
        assert sum(n for route, n in state(emu)["requests"].items() if route.startswith("POST")) >= 2
        await p.close()
        return
    with pytest.raises(Transient):
        await create(p, requests(case, 1))
    assert len(state(emu)["batches"]) == 1
    await p.close()


async def test_auth_and_billing_are_fatal(start_emulator: Factory, case: Case) -> None:
    emu = start_emulator()
    bad = case.provider(emu.url, key="invalid")
    with pytest.raises(Fatal):
        await bad.list_recent()
    with pytest.raises(Fatal):
        await bad.complete(requests(case, 1)[0])
    broke = start_emulator({"billingError": True})
    p = case.provider(broke.url)
    with pytest.raises(Fatal, match=r"(?i)credit|quota|billing"):
        await create(p, requests(case, 1))
    assert state(broke)["batches"] == []
    await bad.close()
    await p.close()


#: Known gaps of the vertex rows (issue #32 open): AsyncAnthropicVertex's 429 carries its retry delay in a
#: google.rpc RetryInfo the adapter does not read yet; a Gemini-on-Vertex orphan is not yet found by list_recent.
GAPS: set[tuple[str, str]] = set()


def gap(case: Case, test: str) -> None:
    if (test, case.id) in GAPS:
        pytest.xfail(f"known gap of {case.id}: see GAPS")


async def test_sync_fallback_through_the_same_provider(start_emulator: Factory, case: Case) -> None:
    gap(case, "sync")
    emu = start_emulator({"sync": {"quota": {"requestsPerMinute": 1}}})
    p = case.provider(emu.url)
    req = requests(case, 1)[0]
    ok = await p.complete(req)
    assert ok.outcome is Outcome.SUCCEEDED
    assert ok.text == f"{REPLY_PREFIX}{req.user}"
    assert ok.usage.output_tokens > 0
    limited = await p.complete(req)
    assert limited.outcome is Outcome.TRANSIENT
    assert limited.retry_after is not None
    broken = start_emulator({"sync": {"outcomes": {"server_error": 1.0}}})
    assert (await case.provider(broken.url).complete(req)).outcome is Outcome.TRANSIENT
    bad = await p.complete(Request("x", case.model, "u", max_tokens=0))
    assert bad.outcome is Outcome.INVALID
    await p.close()


class Crash(Exception):
    """The process dies after the provider accepted the create, before the batch id is in the ledger."""


def crash(*_: object, **__: object) -> Any:
    raise Crash


def job_of(tmp_path: Path, case: Case, n: int) -> Job:
    spec = LLMBatchJobSpec.model_validate(
        {
            "provider": {"type": case.kind, "model": case.model, "secretRef": {"name": "k"}, "baseURL": "x"},
            "input": {"url": "unused"},
            "output": {"url": str(tmp_path / "out")},
            "request": {"system": "Classify.", "template": "{{ text }}", "maxTokens": 50},
            "successRatio": "1",
        }
    )

    def lines() -> Iterator[tuple[int, bytes]]:
        return ((i + 1, json.dumps({"id": f"c{i:03d}", "text": f"claim {i}"}).encode()) for i in range(n))

    return Job(f"t/{tmp_path.name}/{case.kind}", spec, "t", "2026-12-01", case.model, lines)


async def test_orphan_adopted_after_a_crash_between_create_and_record(
    start_emulator: Factory, tmp_path: Path, case: Case
) -> None:
    gap(case, "orphan")
    emu = start_emulator({"batch": {"processingSeconds": 0.5}})
    ledger = Ledger(str(tmp_path / "l.db"))
    settings = EngineSettings(min_batch_window=0, max_shard_requests=10)
    job = job_of(tmp_path, case, 30)
    doomed = JobRunner(job, case.provider(emu.url), ledger, prices.load(), settings)
    doomed._record = crash  # type: ignore[method-assign]  # created at the provider, never recorded
    with contextlib.suppress(Crash):
        await doomed.step()
    assert len(state(emu)["batches"]) == 1
    events: list[str] = []
    again = JobRunner(
        job, case.provider(emu.url), ledger, prices.load(), settings, on_event=lambda r, m, k: events.append(r)
    )
    async with asyncio.timeout(60):
        while not (snap := await again.step()).terminal:  # noqa: ASYNC110 - stepping the engine
            await asyncio.sleep(0.05)
    assert snap.phase == "Succeeded", snap.message
    batches = state(emu)["batches"]
    assert len(batches) == 3, "one provider batch per shard: the orphan was adopted, not created again"
    seen = Counter(cid for b in batches for cid in b["custom_ids"])
    assert len(seen) == 30
    assert set(seen.values()) == {1}
    assert events.count("Adopted") == 1
