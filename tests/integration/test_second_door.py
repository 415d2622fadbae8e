"""Second-door detection (#31.3): real SDK adapters against the emulator, a real ledger, the operator's own engine
loops. A job's batches are Barge's; a batch created on the same credential outside Barge (here: the adapter called
directly, as another team's script would) is foreign: counted per provider, endpoint and tenant, announced once
on the job that used the credential, and never touched."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from barge.batch import prices, second_door
from barge.batch.runner import JobRunner
from barge.config import OperatorConfig
from barge.ledger import Ledger
from barge.operator import jobs
from barge.operator import second_door as doors
from barge.operator.cache import ClientSpec
from barge.policy import parse
from barge.providers.base import Request
from tests.conftest import Factory, state
from tests.integration.test_engine import FAST, provider_for
from tests.integration.test_robustness_money import claims, job_of

MODELS = {"anthropic": "claude-sonnet-4-6", "openai": "gpt-4o-mini"}


def outside_lines(provider: Any, kind: str, n: int) -> list[bytes]:
    return [provider.encode(Request(f"other-{i}", MODELS[kind], "hello", 10)) for i in range(n)]


@pytest.mark.parametrize("kind", ["anthropic", "openai"])
async def test_batches_barge_did_not_create_are_found_and_left_alone(
    start_emulator: Factory, tmp_path: Path, kind: str
) -> None:
    emu = start_emulator({"batch": {"processingSeconds": 3600}})
    ledger = Ledger(str(tmp_path / "l.db"))
    job = job_of(tmp_path, kind, MODELS[kind], claims(10, 100))
    runner = JobRunner(job, provider_for(kind, emu.url), ledger, prices.load(), FAST)
    await runner.step()
    assert len(ledger.batches_of(job.key)) == 1  # Barge's own, in flight
    provider = provider_for(kind, emu.url)
    outside = await provider.create_batch(outside_lines(provider, kind, 2), {})
    extra = []
    if kind == "openai":  # another Barge install's batch carries Barge's metadata: not a second door
        extra.append(await provider.create_batch(outside_lines(provider, kind, 1), {"barge_job": "another-install"}))
    now = time.time()
    found = await second_door.foreign_batches(provider, ledger, now, young=0)
    assert [b.id for b in found] == [outside.id]
    if kind == "anthropic":  # too young to judge by default: a create of Barge's may not be recorded yet
        assert await second_door.foreign_batches(provider, ledger, now) == []
    assert await second_door.foreign_batches(provider, ledger, now + 2 * 86400, young=0) == []  # out of the window
    listed = {b["id"]: b for b in state(emu)["batches"]}
    assert listed[outside.id]["status"] not in ("canceling", "cancelled", "canceled", "ended")  # untouched


async def test_the_operator_scan_exports_the_gauge_and_warns_the_job_once(
    start_emulator: Factory, tmp_path: Path
) -> None:
    emu = start_emulator({"batch": {"processingSeconds": 3600}})
    config = OperatorConfig(policy=parse({"endpoints": {"allow": [{"host": "127.0.0.1", "private": True}]}}))
    ledger = Ledger(str(tmp_path / "l.db"))
    ctx = jobs.Context(config, ledger, None, prices.load())  # type: ignore[arg-type]  # the scan reads no cluster
    try:
        job = job_of(tmp_path, "anthropic", MODELS["anthropic"], claims(5, 100))
        await JobRunner(job, provider_for("anthropic", emu.url), ledger, prices.load(), FAST).step()  # in flight
        spec = ClientSpec("anthropic", "k", emu.url)
        posted: list[tuple[str, str, str]] = []
        ctx.doors.saw(spec, "claims-team", job.key, lambda *event: posted.append(event))
        await doors.scan_once(ctx, time.time())
        label = ("anthropic", second_door.endpoint_hash("anthropic", emu.url, spec.key[1]), "claims-team")
        assert ctx.doors.foreign == {label: 0}  # a clean credential is exported at 0
        assert posted == []

        provider = provider_for("anthropic", emu.url)
        outside = await provider.create_batch(outside_lines(provider, "anthropic", 3), {})
        later = time.time() + second_door.YOUNG + 1  # old enough to judge
        await doors.scan_once(ctx, later)
        await doors.scan_once(ctx, later)  # seen again: no second event
        assert ctx.doors.foreign == {label: 1}
        assert len(posted) == 1
        reason, message, kind = posted[0]
        assert (reason, kind) == ("SecondDoorBatches", "Warning")
        assert outside.id in message
        assert "k" not in message.split("endpoint")[1].split(")")[0].strip(" ")  # a hash, never the key
        (family,) = list(doors.collect(ctx.doors))
        assert [(s.labels, s.value) for s in family.samples] == [
            ({"provider": label[0], "endpoint_hash": label[1], "tenant": "claims-team"}, 1.0)
        ]
    finally:
        ctx.stop_engine()
