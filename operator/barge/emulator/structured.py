"""Structured outputs and tool calls in the emulator: answers that follow the schema a request asks for.

What a request asks for, read from its body (`wanted`):
| body                                                                 | the answer                                  |
| -------------------------------------------------------------------- | ------------------------------------------- |
| OpenAI/Azure/vLLM `response_format: {type: json_schema, json_schema}` | text: the minimal instance of the schema    |
| Anthropic `output_config.format: {type: json_schema, schema}`          | text: the same                              |
| OpenAI `tool_choice` naming a function (or `required`) among `tools`   | one tool call, arguments: minimal instance  |
| Anthropic `tool_choice` `{type: tool, name}` (or `any`) among `tools`  | one tool_use block, input: minimal instance |

The minimal instance is made deterministically from the schema (`minimal`), so a test can compute the answer it
must read back. The fault outcome `schema_violation` (profile: batch/sync outcomes) answers text that breaks
the schema instead: the instance without its first required property, or plain text when nothing is required.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson

#: How deep `minimal` follows nested schemas ($ref cycles end there with null).
MAX_DEPTH = 32


@dataclass(frozen=True, slots=True)
class Tool:
    """The tool a request forces: its name and input schema."""

    name: str
    input_schema: dict[str, Any]


def _resolve(node: dict[str, Any], root: dict[str, Any]) -> dict[str, Any]:
    ref = node.get("$ref")
    if not isinstance(ref, str) or not ref.startswith("#/"):
        return node
    target: Any = root
    for part in ref[2:].split("/"):
        target = target.get(part) if isinstance(target, dict) else None
    return target if isinstance(target, dict) else {}


def minimal(schema: Any, root: Any = None, depth: int = 0) -> Any:
    """The smallest value `schema` accepts, by a fixed rule: const, first enum value, first of anyOf/oneOf, the
    first (non-null) type; objects hold their required properties, arrays minItems elements, strings minLength x,
    numbers their minimum (0 by default)."""
    root = schema if root is None else root
    if not isinstance(schema, dict) or depth > MAX_DEPTH:
        return None
    schema = _resolve(schema, root)
    if "const" in schema:
        return schema["const"]
    if isinstance(schema.get("enum"), list) and schema["enum"]:
        return schema["enum"][0]
    for key in ("anyOf", "oneOf", "allOf"):
        options = schema.get(key)
        if isinstance(options, list) and options:
            return minimal(options[0], root, depth + 1)
    kind = schema.get("type")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "null")
    if kind is None:
        kind = "object" if "properties" in schema else "array" if "items" in schema else "string"
    if kind == "object":
        props = schema.get("properties") if isinstance(schema.get("properties"), dict) else {}
        required = [r for r in schema.get("required") or [] if isinstance(r, str)]
        return {name: minimal(props.get(name, {}), root, depth + 1) for name in required}
    if kind == "array":
        count = schema.get("minItems") if isinstance(schema.get("minItems"), int) else 0
        return [minimal(schema.get("items", {}), root, depth + 1) for _ in range(min(count, 100))]
    if kind == "string":
        length = schema.get("minLength") if isinstance(schema.get("minLength"), int) else 0
        return "x" * min(length, 10_000)
    if kind in ("integer", "number"):
        low = schema.get("minimum", schema.get("exclusiveMinimum"))
        value = low if isinstance(low, int | float) else 0
        if "exclusiveMinimum" in schema and "minimum" not in schema:
            value += 1
        return int(value) if kind == "integer" else value
    if kind == "boolean":
        return False
    return None


def answer_text(schema: dict[str, Any], broken: bool, fallback: str) -> str:
    """The answer's text for a response-format request (`broken`: the schema_violation fault)."""
    value = minimal(schema)
    if not broken:
        return orjson.dumps(value).decode()
    required = schema.get("required") if isinstance(schema, dict) else None
    if isinstance(value, dict) and isinstance(required, list) and required and required[0] in value:
        value.pop(required[0])
        return orjson.dumps(value).decode()
    return fallback  # plain text: not JSON at all


def _schema_of(body: dict[str, Any]) -> dict[str, Any] | None:
    fmt = body.get("response_format")
    if isinstance(fmt, dict) and fmt.get("type") == "json_schema":
        inner = fmt.get("json_schema")
        schema = inner.get("schema") if isinstance(inner, dict) else None
        return schema if isinstance(schema, dict) else {}
    config = body.get("output_config")
    fmt = config.get("format") if isinstance(config, dict) else None
    if isinstance(fmt, dict) and fmt.get("type") == "json_schema":
        schema = fmt.get("schema")
        return schema if isinstance(schema, dict) else {}
    return None


def _tool_of(body: dict[str, Any]) -> Tool | None:
    choice, tools = body.get("tool_choice"), body.get("tools")
    if not isinstance(tools, list) or not tools or choice is None:
        return None
    named: str | None = None
    if isinstance(choice, dict):
        kind = choice.get("type")
        if kind == "tool":  # Anthropic
            named = str(choice.get("name", ""))
        elif kind == "function":  # OpenAI
            chosen = choice.get("function")
            named = str(chosen.get("name", "")) if isinstance(chosen, dict) else ""
        elif kind != "any":
            return None
    elif choice != "required":
        return None  # auto / none: the emulator answers text
    for tool in tools:
        if not isinstance(tool, dict):
            continue
        inner = tool.get("function")
        function: dict[str, Any] = inner if isinstance(inner, dict) else tool  # OpenAI | Anthropic
        name = str(function.get("name", ""))
        schema = function.get("parameters", function.get("input_schema"))
        if named is None or name == named:
            return Tool(name, schema if isinstance(schema, dict) else {})
    return None


def wanted(body: dict[str, Any]) -> tuple[dict[str, Any] | None, Tool | None]:
    """(the response schema, the forced tool) a chat or messages body asks for; None for each it does not."""
    return _schema_of(body), _tool_of(body)
