"""The same scenarios through `barge.providers`: domain outcomes, errors, streaming, for every provider."""

from __future__ import annotations

import asyncio
from collections import Counter

import pytest

from barge.emulator.core import REPLY_PREFIX
from barge.providers import (
    BatchInfo,
    BatchProvider,
    Fatal,
    Invalid,
    Outcome,
    Request,
    Result,
    Transient,
    jsonl,
    make_provider,
)
from barge.providers.anthropic_provider import result_from_line as anthropic_line
from barge.providers.openai_provider import result_from_line as openai_line
from tests.conftest import Factory, state

KINDS = ["anthropic", "openai", "azure-openai"]
MODELS = {"anthropic": "claude-sonnet-4-6", "openai": "gpt-4o-mini", "azure-openai": "gpt-4o-mini-batch"}


def base_url(kind: str, url: str) -> str:
    return f"{url}/v1" if kind == "openai" else url


def provider(kind: str, url: str, key: str = "k") -> BatchProvider:
    return make_provider(kind, key, base_url=base_url(kind, url), sync_retries=0)


def requests(kind: str, n: int) -> list[Request]:
    return [
        Request(f"id-{i:04d}", MODELS[kind], f"item {i} text", 64, system="Summarise.", cache_system=True)
        for i in range(n)
    ]


async def wait_ended(p: BatchProvider, batch_id: str) -> BatchInfo:
    while not (info := await p.retrieve(batch_id)).ended:  # noqa: ASYNC110 - polling a remote batch
        await asyncio.sleep(0.05)
    return info


async def run_batch(p: BatchProvider, reqs: list[Request], metadata: dict[str, str] | None = None) -> list[Result]:
    info = await p.create_batch((p.encode(r) for r in reqs), metadata or {})
    await wait_ended(p, info.id)
    return [r async for r in p.results(info.id)]


@pytest.mark.parametrize("kind", KINDS)
async def test_results_join_by_custom_id_with_usage(start_emulator: Factory, kind: str) -> None:
    emu = start_emulator()
    p = provider(kind, emu.url)
    reqs = requests(kind, 40)
    results = await run_batch(p, reqs, {"barge_job": "ns/j"})
    by_id = {r.custom_id: r for r in results}
    assert set(by_id) == {r.custom_id for r in reqs}
    for r in reqs:
        got = by_id[r.custom_id]
        assert got.outcome is Outcome.SUCCEEDED
        assert got.text == f"{REPLY_PREFIX}{r.user}"
        assert got.usage.input_tokens > 0
        assert got.usage.output_tokens > 0
    if kind == "anthropic":  # the cached system block: one write, then reads
        assert sum(r.usage.cache_write_tokens > 0 for r in results) == 1
        assert sum(r.usage.cache_read_tokens > 0 for r in results) == 39
    recent = await p.list_recent(10)
    assert recent[0].ended
    if kind != "anthropic":
        assert recent[0].metadata == {"barge_job": "ns/j"}
    await p.close()


async def test_anthropic_results_after_a_poll_cost_one_get(start_emulator: Factory) -> None:
    """The poll that saw the batch end already has its results_url: reading the results is one GET of that URL,
    not the SDK's `results()` (which retrieves the batch again first). Without a poll, `results()` still works."""
    emu = start_emulator()
    p = provider("anthropic", emu.url)
    reqs = requests("anthropic", 5)
    retrieve, results = "GET /v1/messages/batches/{batch_id}", "GET /v1/messages/batches/{batch_id}/results"
    for polled in (True, False):
        info = await p.create_batch((p.encode(r) for r in reqs), {})
        await wait_ended(p, info.id)
        if not polled:
            p = provider("anthropic", emu.url)  # a new process: nothing remembered
        before = state(emu)["requests"]
        got = [r async for r in p.results(info.id)]
        after = state(emu)["requests"]
        assert sorted(r.custom_id for r in got) == [r.custom_id for r in reqs]
        assert after[results] - before.get(results, 0) == 1
        assert after.get(retrieve, 0) - before.get(retrieve, 0) == (0 if polled else 1)
    await p.close()


@pytest.mark.parametrize("kind", KINDS)
async def test_outcomes_map_to_the_domain(start_emulator: Factory, kind: str) -> None:
    emu = start_emulator(
        {"batch": {"outcomes": {"server_error": 0.2, "invalid_request": 0.2, "expired": 0.2, "refusal": 0.2}}}
    )
    p = provider(kind, emu.url)
    results = await run_batch(p, requests(kind, 300))
    assert len(results) == 300
    seen = Counter(r.outcome for r in results)
    assert set(seen) == {Outcome.SUCCEEDED, Outcome.REFUSED, Outcome.TRANSIENT, Outcome.INVALID, Outcome.EXPIRED}
    assert all(r.error_type for r in results if r.outcome is not Outcome.SUCCEEDED)
    await p.close()


@pytest.mark.parametrize("kind", KINDS)
async def test_cancel_gives_canceled_and_partial(start_emulator: Factory, kind: str) -> None:
    emu = start_emulator({"batch": {"processingSeconds": 1.5, "cancelSeconds": 0.2}})
    p = provider(kind, emu.url)
    info = await p.create_batch((p.encode(r) for r in requests(kind, 80)), {})
    await asyncio.sleep(0.8)
    await p.cancel(info.id)
    info = await wait_ended(p, info.id)
    outcomes = Counter([r.outcome async for r in p.results(info.id)])
    assert outcomes[Outcome.CANCELED] > 0
    assert outcomes[Outcome.SUCCEEDED] > 0
    assert sum(outcomes.values()) == 80
    assert (await p.cancel(info.id)).ended  # cancelling an ended batch is not an error
    await p.close()


@pytest.mark.parametrize("kind", KINDS)
async def test_sync_path_outcomes_and_errors(start_emulator: Factory, kind: str) -> None:
    emu = start_emulator({"sync": {"quota": {"requestsPerMinute": 1}}})
    p = provider(kind, emu.url)
    req = requests(kind, 1)[0]
    ok = await p.complete(req)
    assert ok.outcome is Outcome.SUCCEEDED
    assert ok.text == f"{REPLY_PREFIX}{req.user}"
    limited = await p.complete(req)
    assert limited.outcome is Outcome.TRANSIENT
    assert limited.retry_after is not None
    assert limited.retry_after >= 1
    refusing = start_emulator({"sync": {"outcomes": {"refusal": 1.0}}})
    assert (await provider(kind, refusing.url).complete(req)).outcome is Outcome.REFUSED
    broken = start_emulator({"sync": {"outcomes": {"server_error": 1.0}}})
    assert (await provider(kind, broken.url).complete(req)).outcome is Outcome.TRANSIENT
    bad = await p.complete(Request("x", MODELS[kind], "u", max_tokens=0))
    assert bad.outcome is Outcome.INVALID
    await p.close()


@pytest.mark.parametrize("kind", KINDS)
async def test_auth_and_billing_are_fatal(start_emulator: Factory, kind: str) -> None:
    emu = start_emulator()
    bad_key = provider(kind, emu.url, key="invalid")
    with pytest.raises(Fatal):
        await bad_key.list_recent()
    with pytest.raises(Fatal):
        await bad_key.complete(requests(kind, 1)[0])
    broke = start_emulator({"billingError": True})
    p = provider(kind, broke.url)
    with pytest.raises(Fatal, match=r"(?i)credit|quota"):
        await p.create_batch([p.encode(requests(kind, 1)[0])], {})
    assert state(broke)["batches"] == []


@pytest.mark.parametrize("kind", KINDS)
async def test_create_never_retries(start_emulator: Factory, kind: str) -> None:
    emu = start_emulator({"batch": {"createFailuresAfterAccept": 1}})
    p = make_provider(kind, "k", base_url=base_url(kind, emu.url), sync_retries=2)  # reads may retry; creates not
    with pytest.raises(Transient):
        await p.create_batch([p.encode(requests(kind, 1)[0])], {})
    assert len(state(emu)["batches"]) == 1


async def test_unknown_batch_is_invalid(start_emulator: Factory) -> None:
    emu = start_emulator()
    with pytest.raises(Invalid):
        await provider("anthropic", emu.url).retrieve("msgbatch_nope")


async def test_jsonl_lines_survive_crlf_split_across_chunks() -> None:
    async def chunks():  # type: ignore[no-untyped-def]
        for part in [b'{"a":1}\r', b'\n{"b":', b"2}\r\n\r\n", b'{"c":3}']:
            yield part

    assert [x async for x in jsonl.lines(chunks())] == [b'{"a":1}', b'{"b":2}', b'{"c":3}']


def test_line_mapping_covers_every_documented_shape() -> None:
    assert anthropic_line({"custom_id": "a", "result": {"type": "expired"}}).outcome is Outcome.EXPIRED
    assert anthropic_line({"custom_id": "a", "result": {"type": "canceled"}}).outcome is Outcome.CANCELED
    errored = {
        "custom_id": "a",
        "result": {
            "type": "errored",
            "error": {"type": "error", "error": {"type": "overloaded_error", "message": "busy"}},
        },
    }
    assert anthropic_line(errored).outcome is Outcome.TRANSIENT
    errored["result"]["error"]["error"] = {
        "type": "invalid_request_error",  # type: ignore[index]
        "message": "Your credit balance is too low",
    }
    assert anthropic_line(errored).outcome is Outcome.FATAL
    four_hundred = {
        "custom_id": "b",
        "error": None,
        "response": {"status_code": 400, "body": {"error": {"type": "invalid_request_error", "message": "bad"}}},
    }
    assert openai_line(four_hundred).outcome is Outcome.INVALID
    assert (
        openai_line({"custom_id": "b", "response": None, "error": {"code": "batch_expired", "message": ""}}).outcome
        is Outcome.EXPIRED
    )
    assert (
        openai_line({"custom_id": "b", "response": {"status_code": 429, "body": {}}, "error": None}).outcome
        is Outcome.TRANSIENT
    )
