"""Queue workers ask and read answers as a job's synchronous path does (workers/answers.py), against a real
redis-server and the emulator's synchronous endpoints with the real SDKs:

- request.responseFormat: a valid answer is written with `output_json`; answers that break the schema are asked
  again up to request.maxAttempts calls, then written as status invalid_output with the validation error, every
  paid answer in the record's usage.
- request.serviceTier: flex calls carry service_tier flex (the record says the tier OpenAI reports); flex's 429
  "resource unavailable" leaves the message for redelivery under flex, and is asked again at standard under auto.
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import pytest

from barge.emulator import flex
from barge.providers import make_provider
from barge.workers.queues import RedisStreams
from barge.workers.runtime import Worker
from tests.conftest import Factory
from tests.contract.test_structured_tools import EXPECTED, SCHEMA
from tests.integration.test_workers import pending, push, settings

FORMAT = {"name": "claim", "schema": SCHEMA}


async def run_worker(
    redis_url: str, emu_url: str, tmp_path: Path, n: int, request: dict[str, Any], kind: str = "openai"
) -> tuple[Worker, str]:
    stream = f"s-{uuid.uuid4().hex[:8]}"
    bodies = [{"correlationId": f"m-{i}", "payload": {"text": f"claim {i}"}} for i in range(n)]
    await push(redis_url, stream, *bodies)
    queue = RedisStreams(redis_url, stream, "barge", consumer="w1", claim_idle_ms=60_000)
    base = f"{emu_url}/v1" if kind == "openai" else emu_url
    model = "gpt-4o-mini" if kind == "openai" else "claude-sonnet-4-6"
    provider = make_provider(kind, "k", base_url=base, sync_retries=0)
    worker = Worker(queue, provider, settings(tmp_path, model=model, request={"maxTokens": 200, **request}))
    try:
        await worker.run(idle_exit=True, wait_ms=200)
    finally:
        await queue.close()
        await provider.close()
    return worker, stream


def record(tmp_path: Path, correlation_id: str) -> dict[str, Any]:
    return dict(json.loads((tmp_path / "out" / f"{correlation_id}.json").read_text()))


@pytest.mark.parametrize("kind", ["openai", "anthropic"])
async def test_valid_structured_answers_carry_output_json(
    redis_url: str, start_emulator: Factory, tmp_path: Path, kind: str
) -> None:
    emu = start_emulator({"sync": {"latencyMs": 1}})
    await run_worker(redis_url, emu.url, tmp_path, 3, {"responseFormat": FORMAT, "maxAttempts": 3}, kind)
    for i in range(3):
        got = record(tmp_path, f"m-{i}")
        assert got["status"] == "succeeded"
        assert got["output_json"] == EXPECTED
        assert json.loads(got["output"]) == EXPECTED
        assert "error" not in got
    assert emu.store.sync_requests == 3  # one call each: nothing asked again


async def test_broken_answers_are_asked_again_then_written_as_invalid_output(
    redis_url: str, start_emulator: Factory, tmp_path: Path
) -> None:
    emu = start_emulator({"sync": {"latencyMs": 1, "outcomes": {"schema_violation": 1.0}}})
    worker, stream = await run_worker(redis_url, emu.url, tmp_path, 4, {"responseFormat": FORMAT, "maxAttempts": 3})
    assert emu.store.sync_requests == 4 * 3, "each message asked exactly maxAttempts times"
    assert worker.model_calls == 4
    for i in range(4):
        got = record(tmp_path, f"m-{i}")
        assert got["status"] == "invalid_output"
        assert "the answer breaks the schema" in got["error"]
        assert "output_json" not in got
        one_answer = len(got["output"]) // 4 or 1  # the emulator's tokens: 4 characters each
        assert got["usage"]["output_tokens"] >= 3 * one_answer, "every paid answer is counted"
    assert await pending(redis_url, stream) == 0  # answered (with its error): completed, not redelivered
    processed = worker.metrics.registry.get_sample_value(
        "barge_worker_messages_total", {"pool": "", "worker": "", "outcome": "invalid_output"}
    )
    assert processed == 4


async def test_flex_calls_report_their_tier(redis_url: str, start_emulator: Factory, tmp_path: Path) -> None:
    emu = start_emulator({"sync": {"latencyMs": 1, "flex": {"latencyMs": 3}}})
    await run_worker(redis_url, emu.url, tmp_path, 3, {"serviceTier": "flex"})
    assert [record(tmp_path, f"m-{i}").get("service_tier") for i in range(3)] == ["flex"] * 3
    standard = tmp_path / "standard"
    await run_worker(redis_url, emu.url, standard, 1, {})
    assert "service_tier" not in record(standard, "m-0")


async def test_auto_asks_standard_when_flex_has_no_capacity_and_flex_leaves_it(
    redis_url: str, start_emulator: Factory, tmp_path: Path
) -> None:
    emu = start_emulator({"sync": {"latencyMs": 1, "flex": {"unavailableRate": 1.0}}})
    await run_worker(redis_url, emu.url, tmp_path, 3, {"serviceTier": "auto"})
    for i in range(3):
        got = record(tmp_path, f"m-{i}")
        assert got["status"] == "succeeded"
        assert "service_tier" not in got  # served at the default tier
    assert flex.unavailable_count(emu.store) == 3
    held = tmp_path / "flex-only"
    worker, stream = await run_worker(redis_url, emu.url, held, 1, {"serviceTier": "flex"})
    assert not (held / "out" / "m-0.json").exists()
    assert worker.metrics.registry.get_sample_value(
        "barge_worker_messages_total", {"pool": "", "worker": "", "outcome": "abandoned"}
    )
    assert await pending(redis_url, stream) == 1  # left for redelivery: a flex 429 is not billed
