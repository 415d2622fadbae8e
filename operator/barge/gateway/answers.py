"""An answer's tool calls and stop reason, in each face's shape, from one results.jsonl line.

A job's result line keeps the provider's full answer beside its text (providers/content.py): an OpenAI-shaped
provider's `tool_calls` and `finish_reason`, or Anthropic's `content` blocks and `stop_reason`. The output file of
`/v1/batches` speaks OpenAI and the results of `/v1/messages/batches` speak Anthropic, whichever provider answered
(a model alias may route either face to either API), so each direction converts here: Anthropic `tool_use` blocks
become OpenAI function `tool_calls` (arguments as JSON text) and back (arguments parsed; text that is no JSON
object is kept as `{"arguments": text}`, never dropped), and the stop reasons map onto each other. Pure: no I/O.
The line is the operator's own output, still read as untrusted: only dicts and lists of the expected shapes pass.
"""

from __future__ import annotations

from typing import Any

import orjson

from barge.providers.chat_convert import openai_tool_call

#: Anthropic stop_reason -> OpenAI finish_reason.
FINISH = {"end_turn": "stop", "stop_sequence": "stop", "pause_turn": "stop", "max_tokens": "length",
          "tool_use": "tool_calls", "refusal": "content_filter"}  # fmt: skip
#: OpenAI finish_reason -> Anthropic stop_reason.
STOP = {"stop": "end_turn", "length": "max_tokens", "tool_calls": "tool_use", "function_call": "tool_use",
        "content_filter": "refusal"}  # fmt: skip


def _dicts(value: Any) -> list[dict[str, Any]]:
    return [v for v in value if isinstance(v, dict)] if isinstance(value, list) else []


def _function(call: dict[str, Any]) -> dict[str, Any]:
    function = call.get("function")
    return function if isinstance(function, dict) else {}


def _tool_calls(result: dict[str, Any]) -> list[dict[str, Any]]:
    """OpenAI function tool calls of the answer (from its `tool_calls`, or from Anthropic `tool_use` blocks)."""
    calls = []
    for call in _dicts(result.get("tool_calls")):
        function = _function(call)
        arguments = function.get("arguments")
        calls.append({
            "id": str(call.get("id") or ""),
            "type": "function",
            "function": {"name": str(function.get("name") or ""),
                         "arguments": arguments if isinstance(arguments, str) else orjson.dumps(arguments).decode()},
        })  # fmt: skip
    if calls:
        return calls
    for block in _dicts(result.get("content")):
        if block.get("type") == "tool_use":
            arguments = block.get("input") if isinstance(block.get("input"), dict) else {}
            calls.append(openai_tool_call(str(block.get("id") or ""), str(block.get("name") or ""), arguments))
    return calls


def openai_message(result: dict[str, Any]) -> tuple[dict[str, Any], str]:
    """(the chat.completion choice's `message`, its `finish_reason`)."""
    text = str(result.get("output") or "")
    calls = _tool_calls(result)
    message: dict[str, Any] = {"role": "assistant", "content": text if text or not calls else None, "refusal": None}
    if calls:
        message["tool_calls"] = calls
    if result.get("status") == "refused":
        return message, "content_filter"
    finish = result.get("finish_reason")
    if not isinstance(finish, str) or not finish:
        stop = result.get("stop_reason")
        finish = FINISH.get(stop, "stop") if isinstance(stop, str) else ("tool_calls" if calls else "stop")
    return message, finish


def _arguments(text: Any) -> dict[str, Any]:
    try:
        parsed = orjson.loads(text) if isinstance(text, str | bytes) else text
    except orjson.JSONDecodeError:
        parsed = None
    return parsed if isinstance(parsed, dict) else {"arguments": text}


def anthropic_content(result: dict[str, Any]) -> tuple[list[dict[str, Any]], str]:
    """(the message's `content` blocks, its `stop_reason`)."""
    text = str(result.get("output") or "")
    blocks = _dicts(result.get("content"))
    if not blocks:
        blocks = [{"type": "text", "text": text}] if text or not result.get("tool_calls") else []
        for call in _dicts(result.get("tool_calls")):
            function = _function(call)
            blocks.append({"type": "tool_use", "id": str(call.get("id") or ""), "name": str(function.get("name") or ""),
                           "input": _arguments(function.get("arguments"))})  # fmt: skip
    if result.get("status") == "refused":
        return blocks, "refusal"
    stop = result.get("stop_reason")
    if not isinstance(stop, str) or not stop:
        finish = result.get("finish_reason")
        tools = any(b.get("type") == "tool_use" for b in blocks)
        stop = STOP.get(finish, "end_turn") if isinstance(finish, str) else ("tool_use" if tools else "end_turn")
    return blocks, stop
