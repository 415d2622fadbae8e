"""Tool calls and stop reasons reach both faces' files (gateway/answers.py): a results.jsonl line keeps the
provider's full answer (providers/content.py), OpenAI-shaped or Anthropic-shaped, and each face converts it."""

from __future__ import annotations

from typing import Any

from barge.gateway import answers, batches
from barge.gateway.anthropic_api import result_line

OPENAI_CALL = {"id": "call_1", "type": "function", "function": {"name": "route", "arguments": '{"complex": true}'}}
ANTHROPIC_USE = {"type": "tool_use", "id": "toolu_1", "name": "route", "input": {"complex": True}}


def line(**extra: Any) -> dict[str, Any]:
    return {"id": "c1", "status": "succeeded", "output": "", "usage": {"input_tokens": 5, "output_tokens": 7}, **extra}


def test_openai_output_file_carries_tool_calls_from_either_provider() -> None:
    from_openai = batches.output_line(line(tool_calls=[OPENAI_CALL], finish_reason="tool_calls"), "batch_x", "m")
    message = from_openai["response"]["body"]["choices"][0]
    assert message["message"]["tool_calls"] == [OPENAI_CALL]
    assert message["message"]["content"] is None
    assert message["finish_reason"] == "tool_calls"
    from_anthropic = batches.output_line(
        line(output="Routing.", content=[{"type": "text", "text": "Routing."}, ANTHROPIC_USE], stop_reason="tool_use"),
        "batch_x",
        "m",
    )
    choice = from_anthropic["response"]["body"]["choices"][0]
    assert choice["message"]["content"] == "Routing."
    assert choice["message"]["tool_calls"] == [
        {"id": "toolu_1", "type": "function", "function": {"name": "route", "arguments": '{"complex":true}'}}
    ]
    assert choice["finish_reason"] == "tool_calls"


def test_anthropic_results_carry_tool_use_from_either_provider() -> None:
    from_anthropic = result_line(line(content=[ANTHROPIC_USE], stop_reason="tool_use"), "m")["result"]["message"]
    assert from_anthropic["content"] == [ANTHROPIC_USE]
    assert from_anthropic["stop_reason"] == "tool_use"
    from_openai = result_line(line(tool_calls=[OPENAI_CALL], finish_reason="tool_calls"), "m")["result"]["message"]
    assert from_openai["content"] == [ANTHROPIC_USE | {"id": "call_1"}]
    assert from_openai["stop_reason"] == "tool_use"


def test_stop_reasons_map_both_ways_and_plain_text_is_as_before() -> None:
    assert answers.openai_message(line(output="hi", stop_reason="max_tokens"))[1] == "length"
    assert answers.anthropic_content(line(output="hi", finish_reason="length")) == (
        [{"type": "text", "text": "hi"}],
        "max_tokens",
    )
    plain = batches.output_line(line(output="hi"), "batch_x", "m")["response"]["body"]["choices"][0]
    assert plain["message"] == {"role": "assistant", "content": "hi", "refusal": None}
    assert plain["finish_reason"] == "stop"
    assert answers.openai_message(line(status="refused", output="no"))[1] == "content_filter"
    assert answers.anthropic_content(line(status="refused", output="no"))[1] == "refusal"
    assert answers.anthropic_content(line()) == ([{"type": "text", "text": ""}], "end_turn")


def test_untrusted_shapes_pass_only_as_strings_and_dicts() -> None:
    odd = line(tool_calls=[7, {"id": 3, "function": {"name": ["x"], "arguments": {"a": 1}}}], finish_reason=["x"])
    message, finish = answers.openai_message(odd)
    assert message["tool_calls"] == [
        {"id": "3", "type": "function", "function": {"name": "['x']", "arguments": '{"a":1}'}}
    ]
    assert finish == "tool_calls"
    not_json = line(tool_calls=[{"id": "k", "function": {"name": "f", "arguments": "not json"}}])
    blocks, _ = answers.anthropic_content(not_json)
    assert blocks == [{"type": "tool_use", "id": "k", "name": "f", "input": {"arguments": "not json"}}]
