"""spec.request.endpoint responses, the pure parts: what admission refuses (with the reason the InvalidSpec
condition carries), how a request becomes a /v1/responses line (the job's RequestFactory, through the fast line
encoder), and how every shape of Response is read (providers/responses.py's table)."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from pydantic import ValidationError

from barge.api.batchjob import LLMBatchJobSpec
from barge.batch.plan import RequestFactory
from barge.providers import Outcome
from barge.providers.base import Usage
from barge.providers.content import unpack
from barge.providers.encoding import encoder
from barge.providers.openai_provider import parse_line, result_from_line
from barge.providers.responses import response_result

SCHEMA = {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]}


def spec(provider: dict[str, Any], **request: Any) -> dict[str, Any]:
    return {
        "provider": {"secretRef": {"name": "k"}, **provider},
        "input": {"url": "in.jsonl"},
        "output": {"url": "out/"},
        "request": {"endpoint": "responses", **request},
    }


@pytest.mark.parametrize(
    ("provider", "reason"),
    [
        ({"type": "azure-openai", "model": "d"}, "Azure OpenAI Global Batch takes /chat/completions and /embeddings"),
        ({"type": "anthropic", "model": "m"}, "its batch API has no responses endpoint"),
        ({"type": "mistral", "model": "m"}, "its batch API has no responses endpoint"),
        (
            {"type": "openai-compatible", "model": "m", "baseURL": "http://127.0.0.1:1"},
            "its batch API has no responses endpoint",
        ),
        ({"type": "pool", "poolRef": {"name": "p"}}, "an engine pool serves chat and embeddings"),
    ],
)
def test_providers_without_responses_are_refused_with_the_reason(provider: dict[str, Any], reason: str) -> None:
    with pytest.raises(ValidationError) as caught:
        LLMBatchJobSpec.model_validate(spec(provider))
    said = str(caught.value)
    assert f"spec.request.endpoint responses is not offered by {provider['type']}" in said
    assert reason in said


@pytest.mark.parametrize(
    ("fields", "reason"),
    [
        ({"mode": "passthrough"}, "mode passthrough sends chat bodies"),
        ({"params": {"instructions": "x", "input": "y"}}, "may not set ['input', 'instructions']"),
        ({"params": {"max_output_tokens": 9}}, "may not set ['max_output_tokens']"),
        ({"dimensions": 8}, "need spec.request.endpoint embeddings"),
    ],
)
def test_a_responses_request_spec_that_cannot_be_sent_is_refused(fields: dict[str, Any], reason: str) -> None:
    with pytest.raises(ValidationError, match=reason.replace("[", r"\[").replace("]", r"\]")):
        LLMBatchJobSpec.model_validate(spec({"type": "openai", "model": "gpt-4.1-mini"}, **fields))


def test_an_openai_responses_job_is_admitted_and_encodes_responses_lines() -> None:
    parsed = LLMBatchJobSpec.model_validate(
        spec(
            {"type": "openai", "model": "gpt-4.1-mini"},
            system="Classify.",
            maxTokens=50,
            responseFormat={"name": "verdict", "schema": SCHEMA},
            params={"temperature": 0, "text": {"verbosity": "low"}},
        )
    )
    factory = RequestFactory("gpt-4.1-mini", parsed.request)
    encode = factory.line_encoder(encoder("openai"))
    line = orjson.loads(encode("c-1", 'a "quoted" claim'))
    assert line == {
        "custom_id": "c-1",
        "method": "POST",
        "url": "/v1/responses",
        "body": {
            "temperature": 0,
            "model": "gpt-4.1-mini",
            "input": 'a "quoted" claim',
            "max_output_tokens": 50,
            "instructions": "Classify.",
            "text": {
                "verbosity": "low",
                "format": {"type": "json_schema", "name": "verdict", "schema": SCHEMA, "strict": True},
            },
        },
    }


def _message(*parts: dict[str, Any]) -> dict[str, Any]:
    return {"type": "message", "role": "assistant", "status": "completed", "content": list(parts)}


def _response(output: list[Any], status: str = "completed", **extra: Any) -> dict[str, Any]:
    usage = {"input_tokens": 40, "input_tokens_details": {"cached_tokens": 30}, "output_tokens": 5}
    return {"object": "response", "status": status, "output": output, "usage": usage, **extra}


def test_an_ordinary_response_is_its_bare_text_with_cached_tokens_apart() -> None:
    body = _response([_message({"type": "output_text", "text": "Hel"}, {"type": "output_text", "text": "lo"})])
    got = response_result("a", body)
    assert got.outcome is Outcome.SUCCEEDED
    assert got.text == "Hello"
    assert got.usage == Usage(10, 5, 30, 0)


def test_function_calls_are_kept_as_chat_tool_calls() -> None:
    call = {"type": "function_call", "id": "fc_1", "call_id": "call_1", "name": "f", "arguments": '{"x": 1}'}
    text, kept = unpack(response_result("a", _response([call])).text)
    assert text == ""
    assert kept == {
        "tool_calls": [{"id": "call_1", "type": "function", "function": {"name": "f", "arguments": '{"x": 1}'}}],
        "finish_reason": "tool_calls",
    }


def test_a_cut_answer_and_other_items_are_kept_beside_the_text() -> None:
    cut = _response(
        [_message({"type": "output_text", "text": "partial"})],
        status="incomplete",
        incomplete_details={"reason": "max_output_tokens"},
    )
    assert unpack(response_result("a", cut).text) == ("partial", {"finish_reason": "length"})
    reasoning = {"type": "reasoning", "id": "rs_1", "summary": []}
    output = [reasoning, _message({"type": "output_text", "text": "done"})]
    assert unpack(response_result("a", _response(output)).text) == ("done", {"content": output})


def test_refusals_failures_and_shapes_without_output() -> None:
    refused = response_result("a", _response([_message({"type": "refusal", "refusal": "no"})]))
    assert (refused.outcome, refused.text, refused.error_type) == (Outcome.REFUSED, "no", "content_filter")
    filtered = _response([], status="incomplete", incomplete_details={"reason": "content_filter"})
    assert response_result("a", filtered).outcome is Outcome.REFUSED
    failed = response_result("a", _response([], status="failed", error={"code": "server_error", "message": "boom"}))
    assert (failed.outcome, failed.error_type, failed.message) == (Outcome.TRANSIENT, "server_error", "boom")
    empty = response_result("a", {"object": "response", "status": "completed"})
    assert (empty.outcome, empty.error_type) == (Outcome.TRANSIENT, "response_completed")


def test_a_batch_output_line_of_a_response_is_read_by_the_openai_adapter() -> None:
    body = _response([_message({"type": "output_text", "text": "yes"})])
    line = {"custom_id": "r-1", "response": {"status_code": 200, "body": body}, "error": None}
    assert result_from_line(line).text == "yes"
    parsed = parse_line(line)
    assert parsed[:5] == ("r-1", Outcome.SUCCEEDED, "yes", 10, 5)
