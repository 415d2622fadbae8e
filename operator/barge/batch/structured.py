"""Checked structured outputs: spec.request.responseFormat's schema, and every answer read against it.

| answer                                          | outcome                                                    |
| ----------------------------------------------- | ---------------------------------------------------------- |
| JSON that the schema accepts                    | succeeded; results.jsonl carries it as `output_json`       |
| not JSON, or JSON the schema refuses            | invalid_output: retried up to retry.maxAttempts (a model   |
|                                                 | can do better on a second try), then failed with the error |
| anything but a success (refusal, error ...)     | unchanged: routed as before (batch/routing.py)             |

The schema itself is checked at admission (api/response_format.py): a schema the jsonschema library cannot use
would make every answer "invalid" and spend the whole budget on retries. Pure: no SDK, no I/O.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

import jsonschema  # type: ignore[import-untyped]  # no stubs in the lock
import orjson
from jsonschema.exceptions import ValidationError  # type: ignore[import-untyped]

from barge.api.response_format import validator_class
from barge.providers.base import Outcome, Parsed, Result
from barge.providers.content import unpack

#: The error type of an answer that is not JSON or breaks the schema.
INVALID_OUTPUT = "invalid_output"
#: Characters of a validation message and of its path kept in the reason (a message can quote the whole answer).
MESSAGE_CHARS, PATH_CHARS = 300, 200
#: Verdicts remembered per job (`Checker.problem`), for answers of at most SEEN_CHARS characters: ~1 MiB at most.
SEEN, SEEN_CHARS = 1024, 512


def _short(text: str, limit: int = MESSAGE_CHARS) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _where(exc: ValidationError) -> str:
    path = "/".join(str(p) for p in exc.absolute_path)
    return f"at /{_short(path, PATH_CHARS)}: " if path else ""


class Checker:
    """Reads answers against one job's schema (compiled once per job)."""

    def __init__(self, schema: dict[str, Any]) -> None:
        cls = validator_class(schema)
        self._validator = cls(schema, format_checker=cls.FORMAT_CHECKER)
        self._seen: dict[str, str] = {}
        """Answer text -> its verdict, for short texts, bounded (`SEEN`): jsonschema takes ~0.1 ms per answer
        (10 s of CPU per 100,000), and a classification job's answers repeat (a few labels, many items)."""

    def problem(self, output: str) -> str:
        """Why `output` (as stored: content.pack'd or bare) is not a valid answer; "" when it is."""
        text, _ = unpack(output)
        if len(text) > SEEN_CHARS:
            return self._problem(text)
        found = self._seen.get(text)
        if found is None:
            found = self._seen[text] = self._problem(text)
            if len(self._seen) > SEEN:
                with contextlib.suppress(RuntimeError, KeyError):  # a check in another thread moved it first
                    del self._seen[next(iter(self._seen))]  # oldest out
        return found

    def _problem(self, text: str) -> str:
        try:
            value = orjson.loads(text)
        except orjson.JSONDecodeError as exc:
            return f"the answer is not JSON: {_short(str(exc), 120)}"
        if self._validator.is_valid(value):  # the usual answer: no error objects built (best_match costs 2x more)
            return ""
        error = jsonschema.exceptions.best_match(self._validator.iter_errors(value))
        if error is None:
            return ""
        return f"the answer breaks the schema: {_where(error)}{_short(error.message)}"

    def result(self, result: Result) -> Result:
        """`result`, or an invalid_output one (usage kept: the answer was paid for) when a success is not valid."""
        if result.outcome is not Outcome.SUCCEEDED:
            return result
        why = self.problem(result.text)
        if not why:
            return result
        return Result(result.custom_id, Outcome.INVALID_OUTPUT, result.text, result.usage, INVALID_OUTPUT, why)

    def page(self, page: list[Parsed]) -> list[Parsed]:
        """`parsed` of every result of a page (ingestion runs it in a thread, off the event loop)."""
        return [self.parsed(p) for p in page]

    def parsed(self, parsed: Parsed) -> Parsed:
        """`result` of a `Parsed` tuple (ingestion's hot path)."""
        if parsed[1] is not Outcome.SUCCEEDED:
            return parsed
        why = self.problem(parsed[2])
        if not why:
            return parsed
        cid, _, text, tin, tout, tcr, tcw, _, _ = parsed
        return (cid, Outcome.INVALID_OUTPUT, text, tin, tout, tcr, tcw, INVALID_OUTPUT, why)


def output_json(output: str) -> Any:
    """The JSON value of a checked answer, for results.jsonl (None if it does not parse: it was checked before)."""
    text, _ = unpack(output)
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError:
        return None


def checker(schema: dict[str, Any] | None) -> Callable[[Result], Result] | None:
    """`Checker(schema).result`, or None when the job asks for no schema."""
    return None if schema is None else Checker(schema).result
