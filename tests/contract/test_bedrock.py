"""What only Bedrock has, with boto3 against `barge emulator` and moto's S3 (the shared contract runs in
test_provider_contract.py): the minimum number of records per job (refused before anything is sent; the engine
sends so few synchronously), the emulator's own validation of it, the clientRequestToken that makes a repeated
create the same job, and the output objects as Bedrock writes them."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import boto3
import pytest

from barge.batch import prices
from barge.batch.job import EngineSettings
from barge.batch.runner import JobRunner
from barge.emulator import bedrock_api
from barge.emulator.core import REPLY_PREFIX
from barge.ledger import Ledger
from barge.providers import Invalid, Outcome, Request, make_provider
from barge.providers.bedrock_provider import BedrockProvider
from tests.conftest import Factory, state
from tests.contract.bedrock_case import BUCKET, s3_endpoint, secret
from tests.contract.cases import CASES
from tests.contract.test_provider_contract import create, job_of, results, wait_ended

CASE = next(c for c in CASES if c.kind == "bedrock")
MODEL = CASE.model


@pytest.fixture
def emulator_s3(monkeypatch: pytest.MonkeyPatch) -> str:
    url = s3_endpoint()
    monkeypatch.setenv(bedrock_api.S3_ENV, url)
    monkeypatch.delenv(bedrock_api.MIN_RECORDS_ENV, raising=False)  # Bedrock's default: 100
    return url


def provider(emu_url: str, prefix: str, min_records: int = 100) -> BedrockProvider:
    p = make_provider("bedrock", secret(min_records=min_records, prefix=prefix), base_url=emu_url + "/bedrock")
    assert isinstance(p, BedrockProvider)
    return p


def reqs(n: int) -> list[Request]:
    return [Request(f"r-{i:04d}", MODEL, f"item {i}", 32, system="Summarise.") for i in range(n)]


def objects(prefix: str) -> list[str]:
    s3 = boto3.client(
        "s3", endpoint_url=s3_endpoint(), region_name="us-east-1", aws_access_key_id="t", aws_secret_access_key="t"
    )
    listed = s3.list_objects_v2(Bucket=BUCKET, Prefix=f"{prefix}/")
    return sorted(o["Key"] for o in listed.get("Contents", []))


async def test_a_shard_under_the_minimum_is_refused_before_anything_is_sent(
    start_emulator: Factory, emulator_s3: str
) -> None:
    emu = start_emulator()
    p = provider(emu.url, "under")
    with pytest.raises(Invalid, match=r"25 records: under Bedrock's minimum of 100") as refused:
        await create(p, reqs(25))
    assert refused.value.error_type == "below_minimum_records"
    assert state(emu)["batches"] == []
    assert objects("under") == [], "nothing uploaded"
    await p.close()


async def test_the_emulator_fails_a_job_under_its_minimum_as_bedrock_validates(
    start_emulator: Factory, emulator_s3: str
) -> None:
    """A Secret whose minRecordsPerJob is below the account's quota: Bedrock's validation fails the job; its records
    come back transient with the job's message, never missing."""
    emu = start_emulator()
    p = provider(emu.url, "quota", min_records=1)
    info = await create(p, reqs(5))
    ended = await wait_ended(p, info.id)
    assert ended.status == "Failed"
    assert "minimum number of records" in ended.errors[0]["message"]
    got = await results(p, info.id)
    assert sorted(r.custom_id for r in got) == [f"r-{i:04d}" for i in range(5)]
    assert {r.outcome for r in got} == {Outcome.TRANSIENT}
    assert all("minimum number of records" in r.message for r in got)
    await p.close()


async def test_the_same_intent_creates_the_same_job(start_emulator: Factory, emulator_s3: str) -> None:
    """A create repeated after a crash (same job tag, shard and records) answers the job the first one made."""
    emu = start_emulator()
    p = provider(emu.url, "token")
    metadata = {"barge_job": "0123456789abcdef0123456789abcdef", "barge_shard": "s00000"}
    first = await create(p, reqs(120), metadata)
    again = await create(p, reqs(120), metadata)
    assert again.id == first.id
    assert len(state(emu)["batches"]) == 1
    assert again.metadata == metadata, "the job name carries the job tag and shard (adoption reads them)"
    other = await create(p, reqs(121), metadata)  # other records: another job, never the first one's results
    assert other.id != first.id
    await p.close()


async def test_output_objects_are_bedrocks(start_emulator: Factory, emulator_s3: str) -> None:
    emu = start_emulator()
    p = provider(emu.url, "shape")
    info = await create(p, reqs(100), {"barge_job": "abc", "barge_shard": "s00001"})
    await wait_ended(p, info.id)
    job_id = info.id.rsplit("/", 1)[-1]
    keys = objects("shape")
    name = keys[0].split("/")[2]
    assert keys == [
        f"shape/in/{name}/records.jsonl",
        f"shape/out/{name}/{job_id}/manifest.json.out",
        f"shape/out/{name}/{job_id}/records.jsonl.out",
    ]
    s3 = boto3.client(
        "s3", endpoint_url=s3_endpoint(), region_name="us-east-1", aws_access_key_id="t", aws_secret_access_key="t"
    )
    sent = s3.get_object(Bucket=BUCKET, Key=keys[0])["Body"].read().splitlines()
    assert set(json.loads(sent[0])) == {"recordId", "modelInput"}, "the model is the job's, stripped from records"
    assert json.loads(sent[0])["modelInput"]["anthropic_version"] == "bedrock-2023-05-31"
    out = [json.loads(x) for x in s3.get_object(Bucket=BUCKET, Key=keys[2])["Body"].read().splitlines()]
    assert len(out) == 100
    assert {tuple(sorted(line)) for line in out} == {("modelInput", "modelOutput", "recordId")}
    manifest = json.loads(s3.get_object(Bucket=BUCKET, Key=keys[1])["Body"].read())
    assert manifest["totalRecordCount"] == manifest["successRecordCount"] == 100
    assert (await p.retrieve(info.id)).request_count == 100
    assert await p.delete_objects(info.id) == 3
    assert objects("shape") == []
    await p.close()


async def test_a_job_under_the_minimum_runs_on_the_synchronous_path(
    start_emulator: Factory, emulator_s3: str, tmp_path: Path
) -> None:
    """30 items, Bedrock's minimum of 100: no batch is created; the engine says why and sends them synchronously."""
    emu = start_emulator()
    job = job_of(tmp_path, CASE, 30)
    events: list[tuple[str, str]] = []
    runner = JobRunner(
        job,
        provider(emu.url, "small"),
        Ledger(str(tmp_path / "l.db")),
        prices.load(),
        EngineSettings(min_batch_window=0),
        on_event=lambda r, m, k: events.append((r, m)),
    )
    async with asyncio.timeout(60):
        while not (snap := await runner.step()).terminal:  # noqa: ASYNC110 - stepping the engine
            await asyncio.sleep(0.05)
    assert snap.phase == "Succeeded", snap.message
    assert state(emu)["batches"] == []
    assert state(emu)["sync_requests"] == 30
    reasons = [m for r, m in events if r == "BelowBatchMinimum"]
    assert reasons == [
        "30 pending requests, under bedrock's minimum of 100 per batch: sent through the synchronous path"
    ]
    assert snap.counts["viaFallback"] == 30


async def test_other_models_run_in_the_converse_format(start_emulator: Factory, emulator_s3: str) -> None:
    """Amazon Nova (any non-Claude model): records and the job in Bedrock's Converse format, the fallback through
    bedrock-runtime Converse."""
    emu = start_emulator({"batch": {"outcomes": {"refusal": 0.1}}})
    p = provider(emu.url, "converse")
    nova = [Request(f"n-{i:04d}", "amazon.nova-lite-v1:0", f"item {i}", 32, system="Summarise.") for i in range(100)]
    info = await create(p, nova)
    assert p._clients["bedrock"].get_model_invocation_job(jobIdentifier=info.id)["modelInvocationType"] == "Converse"
    await wait_ended(p, info.id)
    got = {r.custom_id: r for r in await results(p, info.id)}
    assert len(got) == 100
    ok = [r for r in got.values() if r.outcome is Outcome.SUCCEEDED]
    assert ok
    assert all(r.text == f"{REPLY_PREFIX}item {int(r.custom_id[2:])}" for r in ok)
    assert all(r.usage.input_tokens > 0 and r.usage.output_tokens > 0 for r in ok)
    assert {r.outcome for r in got.values()} == {Outcome.SUCCEEDED, Outcome.REFUSED}
    sync = await p.complete(nova[7])
    assert sync.outcome is Outcome.SUCCEEDED
    assert sync.text == f"{REPLY_PREFIX}item 7"
    assert sync.usage.input_tokens > 0
    assert (await p.complete(Request("x", "amazon.nova-lite-v1:0", "u", max_tokens=0))).outcome is Outcome.INVALID
    await p.close()
