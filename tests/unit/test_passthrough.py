"""Passthrough request mode: a line's `body` is the request; Barge keeps the model, the cap and the custom_id.

Also the OpenAI chat body -> Anthropic params table (providers/chat_convert.py), each row a case."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from barge.api.batchjob import LLMBatchJobSpec
from barge.batch import plan
from barge.batch.render import Renderer
from barge.providers.chat_convert import Unconvertible, to_anthropic, to_openai
from barge.providers.encoding import encoder


def spec(provider: str = "openai") -> LLMBatchJobSpec:
    return LLMBatchJobSpec.model_validate(
        {
            "provider": {"type": provider, "model": "gpt-real", "secretRef": {"name": "k"}},
            "input": {"url": "in.jsonl", "idField": "custom_id"},
            "customId": "{id}",
            "output": {"url": "out/"},
            "request": {"mode": "passthrough", "maxTokens": 100},
        }
    )


def admit(bodies: list[Any], provider: str = "openai") -> list[dict[str, Any]]:
    s = spec(provider)
    renderer = Renderer(s, "2026-11-30", "t")
    factory = plan.RequestFactory("gpt-real", s.request)
    lines = [
        orjson.dumps({"custom_id": f"r{n}", "method": "POST", "url": "/v1/chat/completions", "body": b})
        for n, b in enumerate(bodies, start=1)
    ]
    return list(plan.admit(enumerate(lines, start=1), renderer, factory, encoder(provider)))


HI = [{"role": "user", "content": "hi"}]


def sent(row: dict[str, Any], provider: str = "openai") -> dict[str, Any]:
    request = plan.RequestFactory("gpt-real", spec(provider).request)(row["custom_id"], row["payload"])
    line: dict[str, Any] = orjson.loads(encoder(provider)(request))
    return line


def test_the_body_is_sent_with_barges_model_and_cap() -> None:
    body = {"model": "alias-x", "messages": HI, "temperature": 0.2, "max_tokens": 40, "tools": []}
    (row,) = admit([body])
    assert row["state"] == "pending"
    assert row["custom_id"] == "r1"
    line = sent(row)
    assert line["custom_id"] == "r1"
    assert line["body"] == {
        "messages": HI,
        "temperature": 0.2,
        "tools": [],
        "model": "gpt-real",
        "max_completion_tokens": 40,
    }


def test_without_a_cap_the_jobs_max_tokens_is_sent() -> None:
    (row,) = admit([{"messages": HI}])
    assert sent(row)["body"]["max_completion_tokens"] == 100


@pytest.mark.parametrize(
    ("body", "error_type", "needle"),
    [
        ({"messages": HI, "n": 3}, "reserved_key", "body.n"),
        ({"messages": HI, "stream": True}, "reserved_key", "body.stream"),
        ({"messages": HI, "custom_id": "other"}, "reserved_key", "body.custom_id"),
        ({"messages": HI, "stream_options": {}}, "reserved_key", "body.stream_options"),
        ({"messages": HI, "max_tokens": 101}, "max_tokens_over_cap", "over the job's"),
        ({"messages": HI, "max_completion_tokens": 0}, "bad_body", "positive integer"),
        ({"messages": []}, "bad_body", "non-empty"),
        ("a string", "bad_body", "got a str"),
        (None, "bad_body", "got missing"),
    ],
)
def test_a_bad_body_is_an_invalid_line_with_its_reason(body: Any, error_type: str, needle: str) -> None:
    if body is None:  # no body key at all
        s = spec()
        line = orjson.dumps({"custom_id": "r1"})
        (row,) = plan.admit([(1, line)], Renderer(s, "d", "t"), plan.RequestFactory("m", s.request), encoder("openai"))
    else:
        (row,) = admit([body])
    assert row["state"] == "invalid"
    assert row["error_type"] == error_type, row
    assert needle in row["reason"]


def test_harmless_n_and_stream_are_accepted_and_not_sent() -> None:
    (row,) = admit([{"messages": HI, "n": 1, "stream": False}])
    assert row["state"] == "pending"
    assert "n" not in sent(row)["body"]
    assert "stream" not in sent(row)["body"]


def test_an_anthropic_job_converts_the_body_and_refuses_what_cannot_convert() -> None:
    good, bad = admit(
        [{"messages": [{"role": "system", "content": "be brief"}, *HI], "stop": "END"}, {"messages": HI, "seed": 1}],
        provider="anthropic",
    )
    assert good["state"] == "pending"
    assert sent(good, "anthropic")["params"] == {
        "model": "gpt-real",
        "max_tokens": 100,
        "messages": HI,
        "system": "be brief",
        "stop_sequences": ["END"],
    }
    assert bad["state"] == "invalid"
    assert bad["error_type"] == "unconvertible"
    assert "seed" in bad["reason"]


# --- the conversion table (providers/chat_convert.py) -----------------------------------------------------------
CALL = {"id": "call_1", "type": "function", "function": {"name": "f", "arguments": '{"x": 1}'}}
CONVERTS: list[tuple[str, dict[str, Any], dict[str, Any]]] = [
    ("text", {"messages": HI}, {"messages": HI}),
    (
        "text parts",
        {"messages": [{"role": "user", "content": [{"type": "text", "text": "a"}]}]},
        {"messages": [{"role": "user", "content": "a"}]},
    ),
    (
        "system and developer",
        {"messages": [{"role": "system", "content": "s1"}, {"role": "developer", "content": "s2"}, *HI]},
        {"messages": HI, "system": "s1\n\ns2"},
    ),
    ("stop list", {"messages": HI, "stop": ["a", "b"]}, {"messages": HI, "stop_sequences": ["a", "b"]}),
    (
        "temperature, top_p",
        {"messages": HI, "temperature": 0.5, "top_p": 0.9},
        {"messages": HI, "temperature": 0.5, "top_p": 0.9},
    ),
    (
        "tools",
        {
            "messages": HI,
            "tools": [
                {"type": "function", "function": {"name": "f", "description": "d", "parameters": {"type": "object"}}}
            ],
        },
        {"messages": HI, "tools": [{"name": "f", "input_schema": {"type": "object"}, "description": "d"}]},
    ),
    (
        "tool_choice required",
        {"messages": HI, "tool_choice": "required"},
        {"messages": HI, "tool_choice": {"type": "any"}},
    ),
    (
        "tool_choice function",
        {"messages": HI, "tool_choice": {"type": "function", "function": {"name": "f"}}},
        {"messages": HI, "tool_choice": {"type": "tool", "name": "f"}},
    ),
    (
        "tool call and result",
        {
            "messages": [
                *HI,
                {"role": "assistant", "content": None, "tool_calls": [CALL]},
                {"role": "tool", "tool_call_id": "call_1", "content": "42"},
            ]
        },
        {
            "messages": [
                *HI,
                {
                    "role": "assistant",
                    "content": [{"type": "tool_use", "id": "call_1", "name": "f", "input": {"x": 1}}],
                },
                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "call_1", "content": "42"}]},
            ]
        },
    ),
    ("user", {"messages": HI, "user": "u1"}, {"messages": HI, "metadata": {"user_id": "u1"}}),
]


@pytest.mark.parametrize(("name", "body", "expected"), CONVERTS, ids=[c[0] for c in CONVERTS])
def test_converts(name: str, body: dict[str, Any], expected: dict[str, Any]) -> None:
    assert to_anthropic(body, "m", 10) == {"model": "m", "max_tokens": 10, **expected}


REFUSED: list[tuple[str, dict[str, Any], str]] = [
    ("response_format", {"messages": HI, "response_format": {"type": "json_object"}}, "response_format"),
    ("seed", {"messages": HI, "seed": 3}, "seed"),
    ("penalties", {"messages": HI, "presence_penalty": 1}, "presence_penalty"),
    (
        "image part",
        {"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]},
        "image_url",
    ),
    ("temperature over 1", {"messages": HI, "temperature": 1.5}, "0..1"),
    ("unknown role", {"messages": [{"role": "function", "content": "x"}]}, "role"),
    ("only system", {"messages": [{"role": "system", "content": "s"}]}, "no user"),
    (
        "bad arguments",
        {
            "messages": [
                {
                    "role": "assistant",
                    "content": "",
                    "tool_calls": [{**CALL, "function": {"name": "f", "arguments": "{"}}],
                }
            ]
        },
        "not JSON",
    ),
    ("bad tool_choice", {"messages": HI, "tool_choice": "sometimes"}, "tool_choice"),
]


@pytest.mark.parametrize(("name", "body", "needle"), REFUSED, ids=[c[0] for c in REFUSED])
def test_refuses_naming_what(name: str, body: dict[str, Any], needle: str) -> None:
    with pytest.raises(Unconvertible, match=needle):
        to_anthropic(body, "m", 10)


# --- and back: Anthropic params -> OpenAI body (the gateway's /v1/messages/batches) -----------------------------
BACK: list[tuple[str, dict[str, Any], dict[str, Any]]] = [
    ("text", {"messages": HI}, {"messages": HI}),
    (
        "system blocks and text blocks",
        {
            "system": [{"type": "text", "text": "s"}],
            "messages": [{"role": "user", "content": [{"type": "text", "text": "a"}]}],
        },
        {"messages": [{"role": "system", "content": "s"}, {"role": "user", "content": "a"}]},
    ),
    (
        "stop, temperature",
        {"messages": HI, "stop_sequences": ["x"], "temperature": 0.3},
        {"messages": HI, "stop": ["x"], "temperature": 0.3},
    ),
    (
        "tools and choice",
        {"messages": HI, "tools": [{"name": "f", "input_schema": {"type": "object"}}], "tool_choice": {"type": "any"}},
        {
            "messages": HI,
            "tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}],
            "tool_choice": "required",
        },
    ),
    (
        "tool use and result",
        {
            "messages": [
                *HI,
                {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "f", "input": {"x": 1}}]},
                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "42"}]},
            ]
        },
        {
            "messages": [
                *HI,
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [{"id": "t1", "type": "function", "function": {"name": "f", "arguments": '{"x":1}'}}],
                },
                {"role": "tool", "tool_call_id": "t1", "content": "42"},
            ]
        },
    ),
    ("user id", {"messages": HI, "metadata": {"user_id": "u"}}, {"messages": HI, "user": "u"}),
]


@pytest.mark.parametrize(("name", "params", "expected"), BACK, ids=[c[0] for c in BACK])
def test_converts_back(name: str, params: dict[str, Any], expected: dict[str, Any]) -> None:
    assert to_openai({"model": "m", "max_tokens": 5, **params}) == {"model": "m", "max_tokens": 5, **expected}


@pytest.mark.parametrize(
    ("params", "needle"),
    [
        ({"messages": HI, "top_k": 3}, "top_k"),
        ({"messages": HI, "thinking": {"type": "enabled"}}, "thinking"),
        ({"messages": [{"role": "user", "content": [{"type": "image", "source": {}}]}]}, "image"),
        (
            {"messages": [{"role": "user", "content": [{"type": "text", "text": "a", "cache_control": {}}]}]},
            "text blocks only",
        ),
        ({"messages": HI, "tool_choice": {"type": "sometimes"}}, "tool_choice"),
        ({"messages": []}, "non-empty"),
    ],
)
def test_refuses_back_naming_what(params: dict[str, Any], needle: str) -> None:
    with pytest.raises(Unconvertible, match=needle):
        to_openai({"model": "m", "max_tokens": 5, **params})


def test_a_round_trip_through_both_conversions_keeps_the_request() -> None:
    params = {
        "model": "m",
        "max_tokens": 5,
        "system": "s",
        "messages": [*HI, {"role": "assistant", "content": "hello"}, {"role": "user", "content": "more"}],
        "stop_sequences": ["x"],
        "temperature": 0.5,
    }
    body = to_openai(params)
    assert to_anthropic({k: v for k, v in body.items() if k not in ("model", "max_tokens")}, "m", 5) == params
