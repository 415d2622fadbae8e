"""The pure parts of checked structured outputs and kept content: schema admission, answer checks, packing,
and the emulator's minimal instances and forced tools (table-tested, no I/O)."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from pydantic import ValidationError

from barge.api.batchjob import RequestSpec
from barge.api.response_format import MAX_SCHEMA_BYTES, schema_error
from barge.batch.structured import INVALID_OUTPUT, Checker, output_json
from barge.emulator.structured import answer_text, minimal, wanted
from barge.providers.base import Outcome, Result, Usage
from barge.providers.content import MARK, anthropic_output, openai_output, pack, unpack

SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"label": {"enum": ["a", "b"]}, "n": {"type": "integer", "minimum": 0}},
    "required": ["label", "n"],
    "additionalProperties": False,
}


@pytest.mark.parametrize(
    ("schema", "why"),
    [
        (SCHEMA, ""),
        ({"type": "objekt"}, "is not a valid JSON Schema at /type"),
        ({"properties": {"x": {"minimum": "zero"}}}, "is not a valid JSON Schema at /properties/x/minimum"),
        ({"$schema": "http://json-schema.org/draft-07/schema#", "type": "string"}, ""),
        ([1, 2], "must be a JSON Schema object"),
        ({"description": "x" * MAX_SCHEMA_BYTES}, "is over 64 KiB"),
    ],
)
def test_schema_admission(schema: Any, why: str) -> None:
    assert (schema_error(schema) == "") if not why else (why in schema_error(schema))


def test_a_bad_schema_is_a_spec_error_naming_it() -> None:
    with pytest.raises(ValidationError, match=r"responseFormat\.schema is not a valid JSON Schema"):
        RequestSpec.model_validate({"responseFormat": {"name": "x", "schema": {"type": 3}}})
    ok = RequestSpec.model_validate({"responseFormat": {"name": "x", "schema": SCHEMA}})
    assert ok.response_format is not None
    assert ok.response_format.json_schema == SCHEMA
    assert ok.model_dump(by_alias=True)["responseFormat"] == {"name": "x", "schema": SCHEMA}


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ('{"label": "a", "n": 2}', ""),
        ('{"label": "c", "n": 2}', "at /label: 'c' is not one of ['a', 'b']"),
        ('{"label": "a"}', "'n' is a required property"),
        ('{"label": "a", "n": 1, "extra": 1}', "Additional properties are not allowed"),
        ("Sure! Here it is", "the answer is not JSON"),
        ("", "the answer is not JSON"),
        (pack('{"label": "b", "n": 0}', {"stop_reason": "max_tokens"}), ""),  # packed: its text is checked
    ],
)
def test_answers_are_checked(text: str, problem: str) -> None:
    found = Checker(SCHEMA).problem(text)
    assert (found == "") if not problem else (problem in found)


def test_invalid_output_keeps_usage_and_bounds_its_reason() -> None:
    checker = Checker({"type": "object", "properties": {"s": {"maxLength": 3}}})
    long = orjson.dumps({"s": "y" * 5000}).decode()
    usage = Usage(10, 20)
    checked = checker.result(Result("c1", Outcome.SUCCEEDED, long, usage))
    assert checked.outcome is Outcome.INVALID_OUTPUT
    assert checked.error_type == INVALID_OUTPUT
    assert checked.usage == usage
    assert len(checked.message) < 400, "the reason quotes at most a few hundred characters of the answer"
    parsed = checker.parsed(("c1", Outcome.SUCCEEDED, long, 10, 20, 0, 0, "", ""))
    assert parsed[1] is Outcome.INVALID_OUTPUT
    assert parsed[3:5] == (10, 20)
    refused = Result("c2", Outcome.REFUSED, "no")
    assert checker.result(refused) is refused, "only successes are checked"


@pytest.mark.parametrize(
    ("text", "extra", "packed"),
    [
        ("plain", {}, False),
        ("plain", {"stop_reason": None}, False),
        (MARK + "looks packed", {}, True),  # a text that begins with the mark is packed, so it reads back as itself
        ("", {"tool_calls": [{"id": "1"}], "finish_reason": "tool_calls"}, True),
    ],
)
def test_pack_round_trips(text: str, extra: dict[str, Any], packed: bool) -> None:
    stored = pack(text, extra)
    assert stored.startswith(MARK) is packed
    back, kept = unpack(stored)
    assert back == text
    assert kept == {k: v for k, v in extra.items() if v is not None}


def test_provider_outputs_keep_every_block_unless_plain() -> None:
    assert anthropic_output([{"type": "text", "text": "hi"}], "end_turn") == "hi"
    blocks = [{"type": "thinking", "thinking": "hm"}, {"type": "text", "text": "a"}, {"type": "text", "text": "b"}]
    text, kept = unpack(anthropic_output(blocks, "end_turn"))
    assert text == "ab"
    assert kept == {"content": blocks, "stop_reason": "end_turn"}
    assert unpack(anthropic_output([{"type": "text", "text": "cut"}], "max_tokens"))[1]["stop_reason"] == "max_tokens"
    assert unpack(anthropic_output([], ["odd"]))[1]["stop_reason"] == ["odd"], "an odd stop reason is kept, not fatal"
    assert openai_output({"content": "hi"}, "stop") == "hi"
    calls = [{"id": "c", "type": "function", "function": {"name": "f", "arguments": "{}"}}]
    text, kept = unpack(openai_output({"content": None, "tool_calls": calls}, "tool_calls"))
    assert text == ""
    assert kept == {"tool_calls": calls, "finish_reason": "tool_calls"}


def test_output_json_of_a_checked_answer() -> None:
    assert output_json('{"label": "a", "n": 1}') == {"label": "a", "n": 1}
    assert output_json("not json") is None


@pytest.mark.parametrize(
    ("schema", "instance"),
    [
        (SCHEMA, {"label": "a", "n": 0}),
        ({"type": ["null", "string"], "minLength": 2}, "xx"),
        ({"type": "number", "exclusiveMinimum": 1}, 2),
        ({"anyOf": [{"type": "boolean"}, {"type": "string"}]}, False),
        (
            {
                "$defs": {"p": {"type": "integer", "const": 7}},
                "type": "object",
                "properties": {"p": {"$ref": "#/$defs/p"}},
                "required": ["p"],
            },
            {"p": 7},
        ),
        ({"type": "array", "items": {"type": "integer"}, "minItems": 2}, [0, 0]),
    ],
)
def test_the_emulators_minimal_instance_is_valid(schema: dict[str, Any], instance: Any) -> None:
    assert minimal(schema) == instance
    assert Checker(schema).problem(orjson.dumps(instance).decode()) == ""


def test_the_schema_violation_fault_breaks_the_schema() -> None:
    for schema in (SCHEMA, {"type": "string"}):
        assert Checker(schema).problem(answer_text(schema, True, "Emulated reply: x")) != ""
        assert Checker(schema).problem(answer_text(schema, False, "Emulated reply: x")) == ""


@pytest.mark.parametrize(
    ("body", "schema", "tool"),
    [
        ({"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": SCHEMA}}}, SCHEMA, None),
        ({"response_format": {"type": "json_object"}}, None, None),
        ({"output_config": {"format": {"type": "json_schema", "schema": SCHEMA}}}, SCHEMA, None),
        ({"tools": [{"name": "t", "input_schema": SCHEMA}], "tool_choice": {"type": "tool", "name": "t"}}, None, "t"),
        ({"tools": [{"name": "t", "input_schema": SCHEMA}], "tool_choice": {"type": "auto"}}, None, None),
        (
            {
                "tools": [{"type": "function", "function": {"name": "f", "parameters": SCHEMA}}],
                "tool_choice": "required",
            },
            None,
            "f",
        ),
        ({"tools": [{"type": "function", "function": {"name": "f"}}], "tool_choice": "auto"}, None, None),
    ],
)
def test_what_a_body_asks_for(body: dict[str, Any], schema: Any, tool: str | None) -> None:
    got_schema, got_tool = wanted(body)
    assert got_schema == schema
    assert (got_tool.name if got_tool else None) == tool
