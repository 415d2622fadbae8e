"""What the provider contract does not reach of type gemini, with the real google-genai SDK against the emulator:
a shard over the SDK's 8 MB upload chunk (the resumable protocol's `upload` then `upload, finalize`), an EXPIRED
batch (with its responses file, and without one, as the real API documents: no results, no error), Barge's
metadata in the display name beside a batch Barge did not name, and the listing sorted newest first."""

from __future__ import annotations

import asyncio
from collections import Counter

from google import genai
from google.genai import types

from barge.providers import BatchInfo, Outcome, Request, make_provider
from barge.providers.gemini_provider import GeminiProvider
from tests.conftest import Factory, state

MODEL = "gemini-2.5-flash"


def provider(url: str) -> GeminiProvider:
    p = make_provider("gemini", "k", base_url=url + "/gemini", sync_retries=0)
    assert isinstance(p, GeminiProvider)
    return p


async def ended(p: GeminiProvider, batch_id: str) -> BatchInfo:
    async with asyncio.timeout(60):
        while not (info := await p.retrieve(batch_id)).ended:  # noqa: ASYNC110 - polling a remote batch
            await asyncio.sleep(0.05)
    return info


async def test_a_shard_over_one_upload_chunk_arrives_whole(start_emulator: Factory) -> None:
    emu = start_emulator()
    p = provider(emu.url)
    text = "x" * 3000
    reqs = [Request(f"big-{i:05d}", MODEL, f"{i} {text}", 16) for i in range(3200)]  # ~9.9 MB of lines
    assert sum(len(p.encode(r)) + 1 for r in reqs) > 8 * 1024 * 1024
    info = await p.create_batch((p.encode(r) for r in reqs), {"barge_job": "t", "barge_shard": "s00000"})
    await ended(p, info.id)
    got = [r async for r in p.results(info.id)]
    assert {r.custom_id for r in got} == {r.custom_id for r in reqs}
    assert {r.outcome for r in got} == {Outcome.SUCCEEDED}
    await p.close()


async def test_an_expired_batch_with_and_without_its_results(start_emulator: Factory) -> None:
    emu = start_emulator({"batch": {"outcomes": {"expired": 0.5}}})
    p = provider(emu.url)
    reqs = [Request(f"e-{i:03d}", MODEL, f"item {i}", 16) for i in range(40)]
    info = await p.create_batch((p.encode(r) for r in reqs), {})
    done = await ended(p, info.id)
    assert done.status == "JOB_STATE_EXPIRED"
    seen = Counter([r.outcome async for r in p.results(info.id)])
    assert seen[Outcome.EXPIRED] > 0
    assert seen[Outcome.SUCCEEDED] > 0
    assert sum(seen.values()) == 40
    job = await p.aio.batches.get(name=info.id)
    assert job.dest is not None
    assert job.dest.file_name
    await p.aio.files.delete(name=job.dest.file_name)  # the real API: "no retrievable results"
    assert [r async for r in p.results(info.id)] == [], "nothing to read is no error: the engine retries them"
    await p.close()


async def test_metadata_rides_in_the_display_name_and_the_listing_is_newest_first(start_emulator: Factory) -> None:
    emu = start_emulator()
    p = provider(emu.url)
    req = Request("only", MODEL, "hello", 16)
    first = await p.create_batch([p.encode(req)], {"barge_job": "a" * 32, "barge_shard": "s00001"})
    raw = genai.Client(api_key="k", http_options=types.HttpOptions(base_url=emu.url + "/gemini"))
    uploaded = await p.aio.files.get(name=str(first.metadata["input"]))
    assert uploaded.name == first.metadata["input"]
    theirs = await raw.aio.batches.create(
        model=MODEL, src=str(uploaded.name), config=types.CreateBatchJobConfig(display_name="nightly")
    )
    listed = await p.list_recent(10)
    assert [b.id for b in listed] == [theirs.name, first.id]
    assert listed[1].metadata == {"barge_job": "a" * 32, "barge_shard": "s00001", "input": uploaded.name}
    assert listed[0].metadata == {}, "a batch Barge did not name carries none of its metadata"
    assert len(state(emu)["batches"]) == 2
    await raw.aio.aclose()
    await p.close()


async def test_a_failed_batch_has_no_results_and_names_no_error_the_sdk_dropped(start_emulator: Factory) -> None:
    emu = start_emulator()
    p = provider(emu.url)
    line = p.encode(Request("twice", MODEL, "hello", 16))
    info = await p.create_batch([line, line], {})  # the same key twice: the input is refused
    done = await ended(p, info.id)
    assert done.status == "JOB_STATE_FAILED"
    assert done.errors == [], "the SDK's Developer-API BatchJob drops the operation's error: the engine retries"
    assert [r async for r in p.results(info.id)] == []
    await p.close()
