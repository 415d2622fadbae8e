"""Structured outputs and tool calls through the real SDKs against the emulator, batch and sync, every provider.

What is checked: Barge asks each provider for the schema as it expects it (the emulator answers only what it is
asked for: the minimal instance of the schema it read from the request), the answers are checked by
batch/structured.py, the schema_violation fault makes invalid_output, and a forced tool call's arguments come back
whole beside the text (providers/content.py), where only text blocks were kept before.
"""

from __future__ import annotations

import asyncio
from typing import Any

import orjson
import pytest

from barge.batch.structured import INVALID_OUTPUT, Checker
from barge.emulator.server import EmulatorThread
from barge.emulator.structured import minimal
from barge.providers import BatchProvider, Outcome, Request, Result, make_provider
from barge.providers.anthropic_provider import STRUCTURED_OUTPUTS_BETA
from barge.providers.base import ResponseFormat
from barge.providers.content import unpack
from tests.conftest import Factory
from tests.contract.test_adapters import KINDS, MODELS, provider, run_batch

SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "category": {"type": "string", "enum": ["claim", "complaint"]},
        "complex": {"type": "boolean"},
        "score": {"type": "integer", "minimum": 3},
        "tags": {"type": "array", "items": {"type": "string", "minLength": 2}, "minItems": 1},
    },
    "required": ["category", "complex", "score", "tags"],
    "additionalProperties": False,
}
EXPECTED = {"category": "claim", "complex": False, "score": 3, "tags": ["xx"]}
TOOL_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"city": {"type": "string", "minLength": 3}, "days": {"type": "integer", "minimum": 1}},
    "required": ["city", "days"],
}


def structured(kind: str, n: int) -> list[Request]:
    fmt = ResponseFormat("claim", SCHEMA)
    return [Request(f"id-{i:04d}", MODELS[kind], f"claim {i}", 256, response_format=fmt) for i in range(n)]


def tool_params(kind: str) -> dict[str, Any]:
    if kind == "anthropic":
        tool = {"name": "forecast", "description": "Weather", "input_schema": TOOL_SCHEMA}
        return {"tools": [tool], "tool_choice": {"type": "tool", "name": "forecast"}}
    function = {"name": "forecast", "description": "Weather", "parameters": TOOL_SCHEMA}
    return {
        "tools": [{"type": "function", "function": function}],
        "tool_choice": {"type": "function", "function": {"name": "forecast"}},
    }


def tool_arguments(kind: str, result: Result) -> Any:
    """The forced call's arguments as results.jsonl carries them (the kept content, not the text)."""
    _, kept = unpack(result.text)
    if kind == "anthropic":
        assert kept["stop_reason"] == "tool_use"
        (block,) = [b for b in kept["content"] if b["type"] == "tool_use"]
        assert block["name"] == "forecast"
        return block["input"]
    assert kept["finish_reason"] == "tool_calls"
    (call,) = kept["tool_calls"]
    assert call["function"]["name"] == "forecast"
    return orjson.loads(call["function"]["arguments"])


def test_the_emulators_minimal_instance_follows_the_schema() -> None:
    assert minimal(SCHEMA) == EXPECTED
    assert Checker(SCHEMA).problem(orjson.dumps(EXPECTED).decode()) == ""
    assert minimal(TOOL_SCHEMA) == {"city": "xxx", "days": 1}


@pytest.mark.parametrize("kind", KINDS)
async def test_batch_answers_follow_the_schema_asked_for(start_emulator: Factory, kind: str) -> None:
    emu = start_emulator()
    p = provider(kind, emu.url)
    checker = Checker(SCHEMA)
    try:
        results = await run_batch(p, structured(kind, 5))
    finally:
        await p.close()
    assert len(results) == 5
    for r in results:
        assert r.outcome is Outcome.SUCCEEDED
        assert orjson.loads(r.text) == EXPECTED
        assert checker.result(r) is r
    if kind == "anthropic":  # the beta flag rides on the create call, not inside each request
        (batch,) = emu.store.batches.values()
        assert batch.betas == STRUCTURED_OUTPUTS_BETA


@pytest.mark.parametrize("kind", KINDS)
async def test_schema_violations_are_invalid_outputs_batch_and_sync(start_emulator: Factory, kind: str) -> None:
    emu = start_emulator(
        {"batch": {"outcomes": {"schema_violation": 1.0}}, "sync": {"outcomes": {"schema_violation": 1.0}}}
    )
    p = provider(kind, emu.url)
    checker = Checker(SCHEMA)
    try:
        batch = await run_batch(p, structured(kind, 3))
        sync = await p.complete(structured(kind, 1)[0])
    finally:
        await p.close()
    for r in [*batch, sync]:
        checked = checker.result(r)
        assert checked.outcome is Outcome.INVALID_OUTPUT
        assert checked.error_type == INVALID_OUTPUT
        assert "'category' is a required property" in checked.message
        assert checked.usage == r.usage
        assert r.usage.output_tokens > 0


@pytest.mark.parametrize("kind", KINDS)
async def test_sync_answers_follow_the_schema(start_emulator: Factory, kind: str) -> None:
    emu = start_emulator()
    p = provider(kind, emu.url)
    try:
        result = await p.complete(structured(kind, 1)[0])
    finally:
        await p.close()
    assert result.outcome is Outcome.SUCCEEDED
    assert orjson.loads(result.text) == EXPECTED


@pytest.mark.parametrize("kind", KINDS)
async def test_forced_tool_call_arguments_come_back_batch_and_sync(start_emulator: Factory, kind: str) -> None:
    emu = start_emulator()
    p = provider(kind, emu.url)
    reqs = [Request(f"t-{i}", MODELS[kind], "weather in Oslo?", 128, params=tool_params(kind)) for i in range(3)]
    try:
        batch = await run_batch(p, reqs)
        sync = await p.complete(reqs[0])
    finally:
        await p.close()
    assert len(batch) == 3
    for r in [*batch, sync]:
        assert r.outcome is Outcome.SUCCEEDED
        assert tool_arguments(kind, r) == {"city": "xxx", "days": 1}


async def _vllm(request: Request) -> Result:
    with EmulatorThread(parse_vllm_profile(), vllm_model="m") as emu:
        p: BatchProvider = make_provider("openai", "k", base_url=f"{emu.url}/v1", sync_retries=0, engine_pool=False)
        try:
            return await p.complete(request)
        finally:
            await p.close()


def parse_vllm_profile() -> Any:
    from barge.emulator.profile import parse_profile

    return parse_profile({"sync": {"latencyMs": 1}})


def test_vllm_pools_follow_response_format_and_forced_tools(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("VLLM_API_KEY", raising=False)
    fmt = ResponseFormat("claim", SCHEMA)
    answered = asyncio.run(_vllm(Request("v-1", "m", "claim", 128, response_format=fmt)))
    assert answered.outcome is Outcome.SUCCEEDED
    assert orjson.loads(answered.text) == EXPECTED
    called = asyncio.run(_vllm(Request("v-2", "m", "weather?", 128, params=tool_params("openai"))))
    assert tool_arguments("openai", called) == {"city": "xxx", "days": 1}


@pytest.mark.parametrize("kind", KINDS)
async def test_plain_text_answers_stay_bare(start_emulator: Factory, kind: str) -> None:
    """The usual answer (one text block that ended normally) is stored as its text alone: nothing is packed."""
    emu = start_emulator()
    p = provider(kind, emu.url)
    try:
        (result,) = await run_batch(p, [Request("p-1", MODELS[kind], "hello", 64)])
    finally:
        await p.close()
    assert unpack(result.text) == (result.text, {})
    assert result.text.startswith("Emulated reply: hello")
