"""An OpenAI Responses API answer (spec.request.endpoint responses) read into a domain Result, without the SDK.

Why apart: a Response is not a chat completion. Its `output` is a list of items: `message` items whose `content`
holds `output_text` (the text) or `refusal` parts, `function_call` items (a tool call: `call_id`, `name`,
`arguments`), and others (`reasoning`, built-in tool calls ...). Barge keeps them the way it keeps a chat answer
(providers/content.py), so results.jsonl, the cascade and the structured-output checks read both alike:

| the Response                                       | stored as                                                  |
| -------------------------------------------------- | ---------------------------------------------------------- |
| status completed, one message of output_text parts | the bare text                                              |
| function_call items                                | text, `tool_calls` (chat's shape), finish_reason tool_calls |
| status incomplete (max_output_tokens)              | text, finish_reason `length`                               |
| any other item beside the message (reasoning ...)  | text, `content`: every output item as sent                 |
| a refusal part, or incomplete for content_filter   | outcome refused (content_filter)                           |
| status failed / cancelled, or no output list       | transient (retried), the error's code and message          |

Usage: `input_tokens` (of which `input_tokens_details.cached_tokens` were read from the cache) and `output_tokens`.
"""

from __future__ import annotations

from typing import Any

from barge.providers.base import NO_USAGE, Outcome, Result, Usage, counted
from barge.providers.content import pack

#: incomplete_details.reason -> the chat finish_reason it is kept as.
_INCOMPLETE = {"max_output_tokens": "length", "content_filter": "content_filter"}


def usage_of(raw: Any) -> Usage:
    if not isinstance(raw, dict):
        return NO_USAGE
    details = raw.get("input_tokens_details")
    cached = int(details.get("cached_tokens") or 0) if isinstance(details, dict) else 0
    return counted(int(raw.get("input_tokens") or 0) - cached, int(raw.get("output_tokens") or 0), cached, 0)


def _call(item: dict[str, Any]) -> dict[str, Any]:
    """A function_call item as a chat tool call (what results.jsonl's `tool_calls` holds for chat answers)."""
    call_id = item.get("call_id") or item.get("id")
    function = {"name": item.get("name"), "arguments": item.get("arguments")}
    return {"id": call_id, "type": "function", "function": function}


def response_result(custom_id: str, response: dict[str, Any]) -> Result:
    """One Response (a batch line's body or a synchronous answer) -> a Result; see the table above."""
    usage = usage_of(response.get("usage"))
    status, output = response.get("status"), response.get("output")
    if status in ("failed", "cancelled") or not isinstance(output, list):
        raw = response.get("error")
        error: dict[str, Any] = raw if isinstance(raw, dict) else {}
        code = str(error.get("code") or f"response_{status or 'unreadable'}")
        message = str(error.get("message") or "the response holds no output")
        return Result(custom_id, Outcome.TRANSIENT, "", usage, code, message)
    texts: list[str] = []
    refusals: list[str] = []
    calls: list[dict[str, Any]] = []
    others = 0
    for item in output:
        kind = item.get("type") if isinstance(item, dict) else None
        if kind == "message":
            parts = item.get("content")
            for part in parts if isinstance(parts, list) else []:
                if isinstance(part, dict) and part.get("type") == "output_text":
                    texts.append(str(part.get("text") or ""))
                elif isinstance(part, dict) and part.get("type") == "refusal":
                    refusals.append(str(part.get("refusal") or ""))
                else:
                    others += 1
        elif kind == "function_call":
            calls.append(_call(item))
        else:
            others += 1
    text = "".join(texts)
    details = response.get("incomplete_details")
    reason = details.get("reason") if status == "incomplete" and isinstance(details, dict) else None
    finish = "tool_calls" if calls else _INCOMPLETE.get(str(reason), str(reason)) if reason else None
    if refusals or finish == "content_filter":
        return Result(custom_id, Outcome.REFUSED, text or "".join(refusals), usage, "content_filter")
    extra = {"tool_calls": calls or None, "finish_reason": finish, "content": output if others else None}
    return Result(custom_id, Outcome.SUCCEEDED, pack(text, extra), usage)
