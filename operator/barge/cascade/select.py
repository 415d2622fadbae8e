"""`spec.input.fromJob.select` and `.fields`: CEL over one upstream result line, compiled once per step.

The line CEL sees (every name always bound, so a missing field is a null, not an "undeclared reference"):

| name          | what                                                                  |
| ------------- | --------------------------------------------------------------------- |
| `id`          | the upstream item's id                                                |
| `custom_id`   | its custom_id                                                         |
| `status`      | succeeded, refused or failed                                          |
| `output`      | the model's text ("" for a failure)                                   |
| `output_json` | `output_json` of the result if it has one, else the output parsed as JSON, else `{}` (so |
|               | `has(output_json.complex)` asks whether there is one)                 |
| `usage`       | input_tokens, output_tokens                                           |
| `line`        | the upstream input line number                                        |
| `input`       | the upstream item's own fields (a map)                                |
| `tool_calls`, `content`, `stop_reason`, `finish_reason` | kept parts of the answer (null when none) |

An evaluation error, or a select that is not a bool, is that item's `invalid` reason; never a stalled job.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import celpy
from celpy import celtypes
from celpy.adapter import json_to_cel
from celpy.evaluation import CELEvalError

from barge.api.batchjob import FromJobSpec
from barge.providers.content import KEYS as KEPT

NAMES = ("id", "custom_id", "status", "output", "output_json", "usage", "line", "input", *KEPT)
REASON_CHARS = 300


class SelectError(Exception):
    """One line's evaluation failed: the message is the item's reason."""


def _short(exc: BaseException) -> str:
    args = getattr(exc, "args", ())
    text = str(args[0]) if args else str(exc)  # celpy's repr carries the whole activation: never shown
    return " ".join(text.split())[:REASON_CHARS]


def to_json(value: Any) -> Any:
    """A CEL value as plain JSON data (what the downstream's template sees)."""
    if isinstance(value, celtypes.BoolType | bool):
        return bool(value)
    if isinstance(value, celtypes.IntType | celtypes.UintType | int):
        return int(value)
    if isinstance(value, celtypes.DoubleType | float):
        return float(value)
    if isinstance(value, celtypes.StringType | str):
        return str(value)
    if isinstance(value, celtypes.MapType | Mapping):
        return {str(k): to_json(v) for k, v in value.items()}
    if isinstance(value, celtypes.ListType | list | tuple):
        return [to_json(v) for v in value]
    if value is None:
        return None
    return str(value)  # timestamps, durations, bytes: their CEL text


def parsed_output(result: Mapping[str, Any]) -> Any:
    """`output_json` as the result carries it (structured outputs), else its output parsed as JSON, else None."""
    if result.get("output_json") is not None:
        return result["output_json"]
    text = result.get("output") or ""
    if not isinstance(text, str) or not text.lstrip().startswith(("{", "[")):
        return None
    try:
        return json.loads(text)
    except ValueError:
        return None


def activation(result: Mapping[str, Any], fields: Mapping[str, Any]) -> dict[str, Any]:
    """The names CEL sees for one result line and its upstream item's fields."""
    line = {
        "id": result.get("id"),
        "custom_id": result.get("custom_id"),
        "status": result.get("status"),
        "output": result.get("output") or "",
        "output_json": {} if (parsed := parsed_output(result)) is None else parsed,
        "usage": dict(result.get("usage") or {}),
        "line": result.get("line"),
        "input": dict(fields),
        **{key: result.get(key) for key in KEPT},
    }
    return {name: json_to_cel(value) for name, value in line.items()}


@dataclass(frozen=True)
class Selector:
    """The compiled select and fields of one fromJob."""

    select: Any
    fields: tuple[tuple[str, Any], ...]

    @classmethod
    def compile(cls, spec: FromJobSpec) -> Selector:
        env = celpy.Environment()
        return cls(
            env.program(env.compile(spec.select)),
            tuple((name, env.program(env.compile(expr))) for name, expr in spec.fields.items()),
        )

    @staticmethod
    def _run(program: Any, names: dict[str, Any], what: str) -> Any:
        try:
            value = program.evaluate(names)
        except Exception as exc:  # celpy raises CELEvalError (and, on odd data, Python errors): the line's fault
            raise SelectError(f"{what}: {_short(exc)}") from None
        if isinstance(value, CELEvalError):
            raise SelectError(f"{what}: {_short(value)}")
        return value

    def chosen(self, names: dict[str, Any]) -> bool:
        """Does the line go on? SelectError when select fails on it or gives no bool."""
        value = self._run(self.select, names, "fromJob.select")
        if not isinstance(value, celtypes.BoolType | bool):
            raise SelectError(f"fromJob.select gave {to_json(value)!r} ({type(value).__name__}), not a bool")
        return bool(value)

    def item(
        self, result: Mapping[str, Any], fields: Mapping[str, Any], names: dict[str, Any], id_field: str
    ) -> dict[str, Any]:
        """The downstream item of a chosen line: its id, then `fields` (or, with none, the upstream item's fields
        with output and output_json)."""
        if self.fields:
            out = {name: to_json(self._run(program, names, f"fromJob.fields.{name}")) for name, program in self.fields}
        else:
            out = {**fields, "output": result.get("output") or "", "output_json": parsed_output(result)}
        out[id_field] = result.get("id")
        return out
