"""Gemini's pure parts: the batch line, the results' lines, Barge's metadata in the display name, error mapping
and prices where the cache and batch discounts do not stack."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import orjson
import pytest
from google.genai import errors

from barge.batch import prices
from barge.providers import Fatal, Outcome, Request, Transient, Usage
from barge.providers.base import ResponseFormat
from barge.providers.chat_convert import Unconvertible
from barge.providers.encoding import encoder
from barge.providers.gemini_provider import _display_name, display_metadata, from_gemini, parse_line


def test_a_line_is_key_and_generate_content_request() -> None:
    req = Request("c1", "gemini-2.5-flash", "hello", 64, system="Be brief.", params={"temperature": 0.2})
    line = orjson.loads(encoder("gemini")(req))
    assert line["key"] == "c1"
    body = line["request"]
    assert body["model"] == "models/gemini-2.5-flash"
    assert body["contents"] == [{"role": "user", "parts": [{"text": "hello"}]}]
    assert body["systemInstruction"] == {"parts": [{"text": "Be brief."}]}
    assert body["generationConfig"] == {"temperature": 0.2, "maxOutputTokens": 64}


def test_barge_keys_win_and_a_schema_asks_for_json() -> None:
    fmt = ResponseFormat("x", {"type": "object"})
    req = Request("c1", "gemini-2.5-flash", "hi", 10, params={"maxOutputTokens": 9999}, response_format=fmt)
    config = orjson.loads(encoder("gemini")(req))["request"]["generationConfig"]
    assert config == {"maxOutputTokens": 10, "responseMimeType": "application/json", "responseJsonSchema": fmt.schema}


def test_embeddings_and_non_text_passthrough_are_unconvertible() -> None:
    with pytest.raises(Unconvertible):
        encoder("gemini")(Request("c", "gemini-2.5-flash", "x", 10, endpoint="embeddings"))
    image = orjson.dumps({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {}}]}]})
    with pytest.raises(Unconvertible):
        encoder("gemini")(Request("c", "gemini-2.5-flash", image.decode(), 10, passthrough=True))
    chat = orjson.dumps({"messages": [{"role": "system", "content": "S"}, {"role": "user", "content": "U"}]})
    body = orjson.loads(encoder("gemini")(Request("c", "m", chat.decode(), 10, passthrough=True)))["request"]
    assert body["systemInstruction"] == {"parts": [{"text": "S"}]}
    assert body["contents"] == [{"role": "user", "parts": [{"text": "U"}]}]


def test_metadata_round_trips_through_the_display_name() -> None:
    meta = {"barge_job": "0123456789abcdef0123456789abcdef", "barge_shard": "s00007"}
    name = _display_name(meta, "files/abc")
    assert display_metadata(name) == {**meta, "input": "files/abc"}
    assert display_metadata("someone else's batch") == {}
    assert display_metadata(None) == {}


def _response(text: str = "ok", finish: str = "STOP", **usage: int) -> dict[str, Any]:
    return {
        "candidates": [{"content": {"role": "model", "parts": [{"text": text}]}, "finishReason": finish}],
        "usageMetadata": usage,
    }


def test_result_lines_are_routed() -> None:
    ok = parse_line({"key": "a", "response": _response(promptTokenCount=10, candidatesTokenCount=3)})
    assert ok == ("a", Outcome.SUCCEEDED, "ok", 10, 3, 0, 0, "", "")
    cached = parse_line(
        {
            "key": "b",
            "response": _response(
                promptTokenCount=100, cachedContentTokenCount=60, candidatesTokenCount=5, thoughtsTokenCount=7
            ),
        }
    )
    assert cached[3:7] == (40, 12, 60, 0), "cached input is a cache read; thoughts are billed as output"
    assert parse_line({"key": "c", "response": _response("", "SAFETY")})[1] is Outcome.REFUSED
    blocked = {"promptFeedback": {"blockReason": "SAFETY"}, "usageMetadata": {"promptTokenCount": 4}}
    assert parse_line({"key": "d", "response": blocked})[1] is Outcome.REFUSED
    assert parse_line({"key": "e", "error": {"code": 3, "status": "INVALID_ARGUMENT", "message": "m"}})[1] is (
        Outcome.INVALID
    )
    assert parse_line({"key": "f", "error": {"code": 13, "status": "INTERNAL", "message": "m"}})[1] is (
        Outcome.TRANSIENT
    )
    assert parse_line({"key": "g", "error": {"code": 4, "status": "DEADLINE_EXCEEDED"}})[1] is Outcome.EXPIRED
    assert parse_line({"key": "h", "error": {"code": 1, "status": "CANCELLED"}})[1] is Outcome.CANCELED
    with pytest.raises(ValueError, match="token count"):
        parse_line({"key": "i", "response": _response(promptTokenCount=-1)})


def _api_error(code: int, status: str, message: str, details: list[dict[str, Any]] | None = None) -> Exception:
    return errors.APIError(code, {"error": {"code": code, "status": status, "message": message, "details": details}})


def test_errors_map_to_domain_errors() -> None:
    bad_key = [{"@type": "type.googleapis.com/google.rpc.ErrorInfo", "reason": "API_KEY_INVALID"}]
    assert isinstance(from_gemini(_api_error(400, "INVALID_ARGUMENT", "API key not valid", bad_key)), Fatal)
    quota = "You exceeded your current quota, please check your plan and billing details."
    assert isinstance(from_gemini(_api_error(429, "RESOURCE_EXHAUSTED", quota)), Fatal)
    retry = [{"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "7s"}]
    limited = from_gemini(_api_error(429, "RESOURCE_EXHAUSTED", quota, retry))
    assert isinstance(limited, Transient), "a per-minute limit names quota too: its RetryInfo tells them apart"
    assert limited.retry_after == 7.0
    assert isinstance(from_gemini(_api_error(503, "UNAVAILABLE", "overloaded")), Transient)


def test_cached_input_is_not_halved_in_a_batch() -> None:
    table = prices.load()
    usage = Usage(1_000_000, 1_000_000, 1_000_000, 0)
    assert table.cost("gemini-2.5-flash", usage, batch=False) == Decimal("2.83")
    assert table.cost("gemini-2.5-flash", usage, batch=True) == Decimal("1.43"), "(0.30 + 2.50) / 2 + 0.03"
    assert table.cost("gpt-4o", usage, batch=True) == Decimal("6.875"), "other providers' cache reads are halved"


def test_reconciliation_says_why_gemini_has_no_bill_to_compare() -> None:
    from barge import policy, reconcile_policy
    from barge.providers import usage_reports

    rules = policy.parse({"reconcile": {"providers": {"gemini": {}}}}).reconcile
    assert rules.providers == (reconcile_policy.AdminKey("gemini", "", ""),), "no admin key to name"
    with pytest.raises(usage_reports.NotAvailable, match=r"not available for gemini: .*Cloud Billing"):
        usage_reports.fetch_days("gemini", "", None, 0, 86400)
