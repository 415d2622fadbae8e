"""Queue workers keep a tool call: a forced call's arguments are in the worker's output record, beside the text,
against a real redis-server and the emulator's synchronous endpoint (OpenAI and Anthropic)."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest

from barge.providers import make_provider
from barge.workers.queues import RedisStreams
from barge.workers.runtime import Worker
from tests.conftest import Factory
from tests.contract.test_structured_tools import tool_params
from tests.integration.test_workers import push, settings


@pytest.mark.parametrize(("kind", "model"), [("openai", "gpt-4o-mini"), ("anthropic", "claude-sonnet-4-6")])
async def test_a_workers_record_carries_the_tool_call(
    redis_url: str, start_emulator: Factory, tmp_path: Path, kind: str, model: str
) -> None:
    stream = f"s-{uuid.uuid4().hex[:8]}"
    emu = start_emulator()
    await push(redis_url, stream, {"correlationId": "tool-1", "tenant": "t1", "payload": {"text": "Oslo?"}})
    queue = RedisStreams(redis_url, stream, "barge", consumer="w1", claim_idle_ms=100)
    base = f"{emu.url}/v1" if kind == "openai" else emu.url
    request = {"template": "{{ text }}", "maxTokens": 50, "params": tool_params(kind)}
    worker = Worker(
        queue, make_provider(kind, "k", base_url=base, sync_retries=0), settings(tmp_path, model=model, request=request)
    )
    await worker.run(idle_exit=True, wait_ms=200)
    await queue.close()
    record = json.loads((tmp_path / "out" / "tool-1.json").read_text())
    assert record["status"] == "succeeded"
    if kind == "anthropic":
        assert record["stop_reason"] == "tool_use"
        (block,) = record["content"]
        assert (block["type"], block["name"], block["input"]) == ("tool_use", "forecast", {"city": "xxx", "days": 1})
    else:
        assert record["finish_reason"] == "tool_calls"
        (call,) = record["tool_calls"]
        assert json.loads(call["function"]["arguments"]) == {"city": "xxx", "days": 1}
