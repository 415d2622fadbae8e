"""OpenAI's Responses API in the emulator: `/v1/responses` lines of a batch and the synchronous `POST /v1/responses`.

A Responses body is read into the same Item a chat body is (`item_from_responses`): `input` (a string, or a list
of messages whose content is text or `input_text` parts) is the user's text, `instructions` the system prompt,
`max_output_tokens` the cap, `text.format` (json_schema) the schema an answer follows and a `tool_choice` naming a
function (or `required`) among `tools` the call it makes, so the structured-output faults (`schema_violation`),
quota, latency and flex tier apply unchanged. The answer is a Response object: one `message` item with an
`output_text` part (or a `refusal` part), or one `function_call` item, status `incomplete` when the cap cut the
text; usage as `input_tokens` / `output_tokens`. OpenAI only: Azure's Global Batch takes no responses lines.
The synchronous handler is responses_api.py (this module stays free of aiohttp, for openai_shapes' output lines).
"""

from __future__ import annotations

from typing import Any

from barge.emulator.core import Answer, Item, item_from_messages

RESPONSES_URLS = ("/v1/responses",)


def _text(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        return "".join(str(p.get("text", "")) for p in value if isinstance(p, dict))
    return ""


def as_chat(body: dict[str, Any]) -> dict[str, Any]:
    """The chat body a Responses body asks the same of (what `item_from_messages` and structured.wanted read)."""
    raw = body.get("input")
    if isinstance(raw, str):
        messages: list[Any] = [{"role": "user", "content": raw}] if raw else []
    elif isinstance(raw, list):
        messages = [
            {"role": m.get("role", "user"), "content": _text(m.get("content"))} for m in raw if isinstance(m, dict)
        ]
    else:
        messages = []
    if isinstance(body.get("instructions"), str) and body["instructions"]:
        messages.insert(0, {"role": "system", "content": body["instructions"]})
    chat: dict[str, Any] = {"model": body.get("model"), "messages": messages}
    if "max_output_tokens" in body:
        chat["max_completion_tokens"] = body["max_output_tokens"]
    text = body.get("text")
    fmt = text.get("format") if isinstance(text, dict) else None
    if isinstance(fmt, dict) and fmt.get("type") == "json_schema":
        chat["response_format"] = {"type": "json_schema", "json_schema": {"schema": fmt.get("schema")}}
    choice, tools = body.get("tool_choice"), body.get("tools")
    if isinstance(tools, list):
        chat["tools"] = [t for t in tools if isinstance(t, dict) and t.get("type") == "function"]
        if isinstance(choice, dict) and choice.get("type") == "function":
            chat["tool_choice"] = {"type": "function", "function": {"name": choice.get("name")}}
        elif choice == "required":
            chat["tool_choice"] = "required"
    return chat


def item_from_responses(custom_id: str, body: dict[str, Any], line: int = 0) -> Item:
    """A Responses body as an Item; an `input` that is neither text nor messages is `invalid`, as for chat."""
    item = item_from_messages(custom_id, as_chat(body), line=line)
    if item.invalid:
        item.invalid = item.invalid.replace("messages: field required", "input: field required")
    return item


def response_json(item: Item, ans: Answer, response_id: str, created: float) -> dict[str, Any]:
    """The Response object of an answered Item (succeeded, or a refusal)."""
    if ans.tool_call is not None:
        name = ans.tool_call[0]
        output: list[dict[str, Any]] = [
            {
                "type": "function_call",
                "id": f"fc_{response_id}",
                "call_id": f"call_{response_id}",
                "name": name,
                "arguments": ans.text,
                "status": "completed",
            }
        ]
    else:
        part = (
            {"type": "refusal", "refusal": "I can't help with that."}
            if ans.outcome == "refusal"
            else {"type": "output_text", "text": ans.text, "annotations": []}
        )
        message = {"type": "message", "id": f"msg_{response_id}", "status": "completed", "role": "assistant"}
        output = [{**message, "content": [part]}]
    prompt = ans.input_tokens + ans.cache_read_tokens + ans.cache_write_tokens
    return {
        "id": response_id,
        "object": "response",
        "created_at": int(created),
        "status": "incomplete" if ans.truncated else "completed",
        "incomplete_details": {"reason": "max_output_tokens"} if ans.truncated else None,
        "error": None,
        "model": item.model,
        "output": output,
        "parallel_tool_calls": True,
        "tool_choice": "auto",
        "tools": [],
        "usage": {
            "input_tokens": prompt,
            "input_tokens_details": {"cached_tokens": ans.cache_read_tokens},
            "output_tokens": ans.output_tokens,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": prompt + ans.output_tokens,
        },
    }
