"""An OpenAI chat-completions body as Anthropic Messages params: pure, one table, refusals named.

A passthrough job (spec.request.mode: passthrough) carries OpenAI-shaped bodies whatever its provider, so one file
can run on OpenAI, Azure, a vLLM pool or Anthropic. What Anthropic has no equal for is refused with the key named
(`Unconvertible`, which makes the line invalid at admission), never dropped: a request silently stripped of its
response_format or seed would answer something else than what was asked.

| OpenAI body | Anthropic params |
| --- | --- |
| messages[role=system or developer] (text) | system (joined by blank lines, in order) |
| messages[role=user or assistant], content text or text parts | messages[] with the same role, text |
| messages[role=assistant].tool_calls[] (function) | content block tool_use {id, name, input: parsed arguments} |
| messages[role=tool] {tool_call_id, content} | user message with a tool_result block |
| stop (string or list) | stop_sequences (list) |
| temperature (0..1), top_p | temperature, top_p (temperature above 1 is refused: Anthropic's range is 0..1) |
| tools[] (type function) | tools[] {name, description, input_schema: parameters} |
| tool_choice auto, required, none, {function: {name}} | {type: auto}, {type: any}, {type: none}, {type: tool, name} |
| user | metadata.user_id |
| max_tokens (Barge's cap) | max_tokens |
| any other key (response_format, seed, logprobs, penalties, logit_bias, images, audio, ...) | refused |
"""

from __future__ import annotations

from typing import Any

import orjson


class Unconvertible(ValueError):
    """What in an OpenAI body has no Anthropic equal; the message names it."""


_SYSTEM_ROLES = ("system", "developer")
_TOOL_CHOICE = {"auto": {"type": "auto"}, "required": {"type": "any"}, "none": {"type": "none"}}
_HANDLED = frozenset({"messages", "max_tokens", "stop", "temperature", "top_p", "tools", "tool_choice", "user"})


def _text(content: Any, where: str) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts = []
        for n, part in enumerate(content):
            if not isinstance(part, dict) or part.get("type") != "text" or not isinstance(part.get("text"), str):
                kind = part.get("type") if isinstance(part, dict) else type(part).__name__
                raise Unconvertible(f"{where}.content[{n}] of type {kind!r} has no Anthropic equal here (text only)")
            texts.append(part["text"])
        return "".join(texts)
    raise Unconvertible(f"{where}.content must be text or a list of text parts")


def _tool_use(call: Any, where: str) -> dict[str, Any]:
    if (
        not isinstance(call, dict)
        or call.get("type", "function") != "function"
        or not isinstance(call.get("function"), dict)
    ):
        raise Unconvertible(f"{where} is not a function tool call")
    function = call["function"]
    try:
        arguments = orjson.loads(function.get("arguments") or "{}")
    except orjson.JSONDecodeError as exc:
        raise Unconvertible(f"{where}.function.arguments is not JSON") from exc
    if not isinstance(arguments, dict):
        raise Unconvertible(f"{where}.function.arguments must be a JSON object")
    return {
        "type": "tool_use",
        "id": str(call.get("id", "")),
        "name": str(function.get("name", "")),
        "input": arguments,
    }


def _message(message: Any, n: int) -> dict[str, Any] | str:
    """An Anthropic message, or the text of a system message."""
    where = f"messages[{n}]"
    if not isinstance(message, dict):
        raise Unconvertible(f"{where} must be an object")
    role = message.get("role")
    if role in _SYSTEM_ROLES:
        return _text(message.get("content"), where)
    if role == "tool":
        block = {"type": "tool_result", "tool_use_id": str(message.get("tool_call_id", ""))}
        return {"role": "user", "content": [{**block, "content": _text(message.get("content"), where)}]}
    if role not in ("user", "assistant"):
        raise Unconvertible(f"{where}.role {role!r} has no Anthropic equal")
    calls = message.get("tool_calls") if role == "assistant" else None
    if not calls:
        return {"role": role, "content": _text(message.get("content"), where)}
    blocks: list[dict[str, Any]] = []
    if message.get("content"):
        blocks.append({"type": "text", "text": _text(message["content"], where)})
    blocks.extend(_tool_use(call, f"{where}.tool_calls[{k}]") for k, call in enumerate(calls))
    return {"role": role, "content": blocks}


def _tool(tool: Any, n: int) -> dict[str, Any]:
    if not isinstance(tool, dict) or tool.get("type") != "function" or not isinstance(tool.get("function"), dict):
        raise Unconvertible(f"tools[{n}] is not a function tool")
    function = tool["function"]
    out = {"name": function.get("name", ""), "input_schema": function.get("parameters") or {"type": "object"}}
    if function.get("description"):
        out["description"] = function["description"]
    return out


def _tool_choice(choice: Any) -> dict[str, Any]:
    if isinstance(choice, str) and choice in _TOOL_CHOICE:
        return _TOOL_CHOICE[choice]
    if isinstance(choice, dict) and isinstance(choice.get("function"), dict):
        return {"type": "tool", "name": choice["function"].get("name", "")}
    raise Unconvertible(f"tool_choice {choice!r} has no Anthropic equal")


def to_anthropic(body: dict[str, Any], model: str, max_tokens: int) -> dict[str, Any]:
    """Anthropic Messages params for an OpenAI chat body (see the table in the module docstring)."""
    extra = sorted(k for k in body if k not in _HANDLED)
    if extra:
        raise Unconvertible(f"body keys {extra} have no Anthropic equal")
    system: list[str] = []
    messages: list[dict[str, Any]] = []
    for n, message in enumerate(body.get("messages") or ()):
        converted = _message(message, n)
        if isinstance(converted, str):
            system.append(converted)
        else:
            messages.append(converted)
    if not messages:
        raise Unconvertible("messages holds no user or assistant message")
    params: dict[str, Any] = {"model": model, "max_tokens": max_tokens, "messages": messages}
    if system:
        params["system"] = "\n\n".join(system)
    if "stop" in body and body["stop"] is not None:
        stop = body["stop"]
        params["stop_sequences"] = [stop] if isinstance(stop, str) else list(stop)
    if body.get("temperature") is not None:
        if not isinstance(body["temperature"], int | float) or not 0 <= body["temperature"] <= 1:
            raise Unconvertible(f"temperature {body['temperature']!r} is outside Anthropic's range 0..1")
        params["temperature"] = body["temperature"]
    if body.get("top_p") is not None:
        params["top_p"] = body["top_p"]
    if body.get("tools"):
        params["tools"] = [_tool(t, n) for n, t in enumerate(body["tools"])]
    if body.get("tool_choice") is not None:
        params["tool_choice"] = _tool_choice(body["tool_choice"])
    if body.get("user"):
        params["metadata"] = {"user_id": str(body["user"])}
    return params


# --- and back: Anthropic Messages params as an OpenAI chat body (the gateway's /v1/messages/batches) -------------
#: | Anthropic params | OpenAI body |
#: | --- | --- |
#: | system (text or text blocks) | a first message of role system |
#: | messages[] text or text blocks | messages[] with the same role |
#: | assistant tool_use blocks | assistant tool_calls (arguments as JSON text) |
#: | user tool_result blocks | one message of role tool per block |
#: | stop_sequences, temperature, top_p, max_tokens | stop, temperature, top_p, max_tokens |
#: | tools[] {name, description, input_schema} | tools[] of type function |
#: | tool_choice auto, any, none, tool | auto, required, none, {type: function, function: {name}} |
#: | metadata.user_id | user |
#: | anything else (top_k, thinking, images, documents, cache_control on a block ...) | refused |
_BACK_HANDLED = frozenset(
    {
        "model",
        "max_tokens",
        "messages",
        "system",
        "stop_sequences",
        "temperature",
        "top_p",
        "tools",
        "tool_choice",
        "metadata",
    }
)
_CHOICE_BACK = {"auto": "auto", "any": "required", "none": "none"}


def _blocks_text(content: Any, where: str) -> str:
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise Unconvertible(f"{where} must be text or a list of blocks")
    texts = []
    for n, block in enumerate(content):
        if not isinstance(block, dict) or block.get("type") != "text" or set(block) - {"type", "text"}:
            kind = block.get("type") if isinstance(block, dict) else type(block).__name__
            raise Unconvertible(f"{where}[{n}] of type {kind!r} has no OpenAI equal here (text blocks only)")
        texts.append(str(block.get("text", "")))
    return "".join(texts)


def openai_tool_call(call_id: str, name: str, arguments: Any) -> dict[str, Any]:
    """An OpenAI function tool call (arguments as JSON text) from an Anthropic tool_use block's parts."""
    function = {"name": name, "arguments": orjson.dumps(arguments).decode()}
    return {"id": call_id, "type": "function", "function": function}


def _back_message(message: Any, n: int) -> list[dict[str, Any]]:
    where = f"messages[{n}]"
    if not isinstance(message, dict) or message.get("role") not in ("user", "assistant"):
        raise Unconvertible(f"{where} must be a user or assistant message")
    role, content = message["role"], message.get("content")
    if isinstance(content, str):
        return [{"role": role, "content": content}]
    if not isinstance(content, list):
        raise Unconvertible(f"{where}.content must be text or a list of blocks")
    kinds = {b.get("type") for b in content if isinstance(b, dict)}
    if role == "assistant" and "tool_use" in kinds:
        text = _blocks_text([b for b in content if b.get("type") != "tool_use"], f"{where}.content")
        calls = [
            openai_tool_call(str(b.get("id", "")), str(b.get("name", "")), b.get("input") or {})
            for b in content
            if b.get("type") == "tool_use"
        ]
        return [{"role": "assistant", "content": text or None, "tool_calls": calls}]
    if role == "user" and "tool_result" in kinds:
        out = []
        for k, b in enumerate(content):
            if b.get("type") != "tool_result" or b.get("is_error"):
                raise Unconvertible(f"{where}.content[{k}]: a tool_result turn holds only (non-error) tool results")
            text = _blocks_text(b.get("content", ""), f"{where}.content[{k}].content")
            out.append({"role": "tool", "tool_call_id": str(b.get("tool_use_id", "")), "content": text})
        return out
    return [{"role": role, "content": _blocks_text(content, f"{where}.content")}]


def to_openai(params: dict[str, Any]) -> dict[str, Any]:
    """An OpenAI chat body for Anthropic Messages params (the table above), or Unconvertible naming what."""
    extra = sorted(k for k in params if k not in _BACK_HANDLED)
    if extra:
        raise Unconvertible(f"params keys {extra} have no OpenAI equal")
    metadata = params.get("metadata") or {}
    if not isinstance(metadata, dict) or set(metadata) - {"user_id"}:
        raise Unconvertible("metadata may only hold user_id")
    messages: list[dict[str, Any]] = []
    if params.get("system"):
        messages.append({"role": "system", "content": _blocks_text(params["system"], "system")})
    raw = params.get("messages")
    if not isinstance(raw, list) or not raw:
        raise Unconvertible("messages must be a non-empty list")
    for n, message in enumerate(raw):
        messages.extend(_back_message(message, n))
    body: dict[str, Any] = {"model": params.get("model"), "messages": messages}
    if params.get("max_tokens") is not None:
        body["max_tokens"] = params["max_tokens"]
    if params.get("stop_sequences"):
        body["stop"] = list(params["stop_sequences"])
    for key in ("temperature", "top_p"):
        if params.get(key) is not None:
            body[key] = params[key]
    if params.get("tools"):
        tools = []
        for n, tool in enumerate(params["tools"]):
            if not isinstance(tool, dict) or tool.get("type", "custom") != "custom" or "name" not in tool:
                raise Unconvertible(f"tools[{n}] is not a client tool with a name and input_schema")
            function = {"name": tool["name"], "parameters": tool.get("input_schema") or {"type": "object"}}
            if tool.get("description"):
                function["description"] = tool["description"]
            tools.append({"type": "function", "function": function})
        body["tools"] = tools
    choice = params.get("tool_choice")
    if choice is not None:
        kind = choice.get("type") if isinstance(choice, dict) else None
        if kind in _CHOICE_BACK:
            body["tool_choice"] = _CHOICE_BACK[kind]
        elif kind == "tool":
            body["tool_choice"] = {"type": "function", "function": {"name": str(choice.get("name", ""))}}
        else:
            raise Unconvertible(f"tool_choice {choice!r} has no OpenAI equal")
    if metadata.get("user_id"):
        body["user"] = str(metadata["user_id"])
    return body
