"""OpenAI's Responses API (spec.request.endpoint responses) through the real `openai` SDK against the emulator:
`client.responses.create` (text, structured outputs, a forced function call, flex), `/v1/responses` batch lines,
and Barge's OpenAI adapter on both paths (its results read the way chat answers are: text, tool calls kept).
Azure's Global Batch takes no responses lines: the emulator refuses such a batch, Barge's encoder such a line.
"""

from __future__ import annotations

import json
from typing import Any

import openai
import pytest

from barge.emulator.core import REPLY_PREFIX
from barge.emulator.server import EmulatorThread
from barge.providers import Outcome, Request
from barge.providers.base import ResponseFormat
from barge.providers.chat_convert import Unconvertible
from barge.providers.content import unpack
from barge.providers.encoding import encode_anthropic, encode_mistral, encoder
from tests.conftest import Factory
from tests.contract.test_adapters import provider, run_batch
from tests.contract.test_openai_sdk import azure, finished, oai, read_lines, submit

MODEL = "gpt-4.1-mini"
SCHEMA = {
    "type": "object",
    "properties": {"label": {"type": "string", "enum": ["spam", "ham"]}, "score": {"type": "integer", "minimum": 3}},
    "required": ["label", "score"],
    "additionalProperties": False,
}
TOOL = {
    "type": "function",
    "name": "file_claim",
    "parameters": {"type": "object", "properties": {"amount": {"type": "number"}}, "required": ["amount"]},
}


def test_responses_create_text_structured_and_a_forced_function_call(emulator: EmulatorThread) -> None:
    c = oai(emulator)
    plain = c.responses.create(model=MODEL, input="hello there", instructions="Be brief.", max_output_tokens=64)
    assert plain.status == "completed"
    assert plain.output_text == REPLY_PREFIX + "hello there"
    assert plain.usage is not None
    assert plain.usage.input_tokens >= 1
    assert plain.usage.output_tokens >= 1
    fmt: Any = {"type": "json_schema", "name": "verdict", "schema": SCHEMA, "strict": True}
    structured = c.responses.create(model=MODEL, input="classify this", text={"format": fmt})
    assert json.loads(structured.output_text) == {"label": "spam", "score": 3}
    called = c.responses.create(
        model=MODEL,
        input="file it",
        tools=[TOOL],  # type: ignore[list-item]
        tool_choice={"type": "function", "name": "file_claim"},
    )
    call = called.output[0]
    assert call.type == "function_call"
    assert call.name == "file_claim"
    assert json.loads(call.arguments) == {"amount": 0}
    with pytest.raises(openai.BadRequestError, match="input"):
        c.responses.create(model=MODEL, input=[])


def test_a_responses_call_at_the_flex_tier_reports_it(start_emulator: Factory) -> None:
    emu = start_emulator({"sync": {"flex": {"latencyMs": 5}}})
    c = oai(emu)
    flex = c.responses.create(model=MODEL, input="x", service_tier="flex")
    assert flex.service_tier == "flex"
    assert c.responses.create(model=MODEL, input="x").service_tier == "default"


def _line(custom_id: str, body: dict[str, Any], url: str = "/v1/responses") -> dict[str, Any]:
    return {"custom_id": custom_id, "method": "POST", "url": url, "body": {"model": MODEL, **body}}


def test_a_batch_of_responses_lines_and_azure_refusing_one(emulator: EmulatorThread) -> None:
    c = oai(emulator)
    lines = [_line(f"r-{n}", {"input": f"doc {n}", "max_output_tokens": 100}) for n in range(12)]
    batch = finished(c, submit(c, lines, endpoint="/v1/responses").id)
    assert batch.status == "completed"
    assert batch.endpoint == "/v1/responses"
    out = {x["custom_id"]: x["response"]["body"] for x in read_lines(c, batch.output_file_id)}
    assert len(out) == 12
    for n in range(12):
        body = out[f"r-{n}"]
        assert body["object"] == "response"
        assert body["output"][0]["content"][0] == {
            "type": "output_text",
            "text": f"{REPLY_PREFIX}doc {n}",
            "annotations": [],
        }
        assert body["usage"]["input_tokens"] >= 1
    mixed = [_line("ok", {"input": "x"}), _line("chat", {"input": "y"}, url="/v1/chat/completions")]
    refused = finished(c, submit(c, mixed, endpoint="/v1/responses").id)
    assert refused.status == "failed"
    assert refused.errors is not None
    assert refused.errors.data[0].code == "url_mismatch"
    az = azure(emulator)
    with pytest.raises(openai.BadRequestError, match="Unsupported endpoint '/v1/responses'"):
        submit(az, [_line("a", {"input": "x"})], endpoint="/v1/responses")  # type: ignore[arg-type]


async def test_the_adapter_sends_responses_batches_and_sync_calls(start_emulator: Factory) -> None:
    emu = start_emulator()
    p = provider("openai", emu.url)
    fmt = ResponseFormat("verdict", SCHEMA)
    plain = [Request(f"t-{i}", MODEL, f"text {i}", 64, system="Be brief.", endpoint="responses") for i in range(6)]
    shaped = [Request(f"s-{i}", MODEL, f"claim {i}", 64, endpoint="responses", response_format=fmt) for i in range(3)]
    forced = Request(
        "call-1",
        MODEL,
        "file it",
        64,
        endpoint="responses",
        params={"tools": [TOOL], "tool_choice": {"type": "function", "name": "file_claim"}},
    )
    try:
        results = {r.custom_id: r for r in await run_batch(p, [*plain, *shaped, forced])}
        sync = await p.complete(shaped[0])
        sync_call = await p.complete(forced)
    finally:
        await p.close()
    assert {b.endpoint for b in emu.store.batches.values()} == {"/v1/responses"}
    sent = emu.store.batches[next(iter(emu.store.batches))].items
    assert {i.custom_id: i.schema for i in sent}["s-0"] == SCHEMA  # text.format reached the emulator
    for i in range(6):
        r = results[f"t-{i}"]
        assert r.outcome is Outcome.SUCCEEDED
        assert r.text == f"{REPLY_PREFIX}text {i}"  # an ordinary answer is stored as its bare text
        assert r.usage.input_tokens >= 1
        assert r.usage.output_tokens >= 1
    for r in (results["s-0"], sync):
        assert r.outcome is Outcome.SUCCEEDED
        assert json.loads(r.text) == {"label": "spam", "score": 3}
    assert sync.service_tier == "default"
    for r in (results["call-1"], sync_call):
        text, kept = unpack(r.text)
        assert text == ""
        assert kept["finish_reason"] == "tool_calls"
        [call] = kept["tool_calls"]
        assert call["type"] == "function"
        assert call["function"]["name"] == "file_claim"
        assert json.loads(call["function"]["arguments"]) == {"amount": 0}


def test_providers_without_responses_refuse_the_line() -> None:
    request = Request("x", "m", "text", 1, endpoint="responses")
    with pytest.raises(Unconvertible, match="Anthropic has no responses endpoint"):
        encode_anthropic(request)
    with pytest.raises(Unconvertible, match="Mistral has no responses endpoint"):
        encode_mistral(request)
    with pytest.raises(Unconvertible, match="Azure OpenAI Global Batch has no /v1/responses"):
        encoder("azure-openai")(request)
    line = json.loads(encoder("openai")(Request("x", MODEL, "text", 7, system="S", endpoint="responses")))
    assert line == {
        "custom_id": "x",
        "method": "POST",
        "url": "/v1/responses",
        "body": {"model": MODEL, "input": "text", "max_output_tokens": 7, "instructions": "S"},
    }
