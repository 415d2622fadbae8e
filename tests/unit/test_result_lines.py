"""The providers' result lines -> domain Results, on the shapes their fast paths treat apart (one text block, no
usage) and the ones they leave to the general code (several blocks, refusals, cached tokens)."""

from __future__ import annotations

from typing import Any

import pytest

from barge.providers.anthropic_provider import result_from_line as anthropic_line
from barge.providers.base import Outcome, Result, Usage
from barge.providers.content import pack
from barge.providers.openai_provider import result_from_line as openai_line


def message(
    content: list[dict[str, Any]], stop: str = "end_turn", usage: dict[str, int] | None = None
) -> dict[str, Any]:
    body = {"content": content, "stop_reason": stop, "usage": usage}
    return {"custom_id": "c1", "result": {"type": "succeeded", "message": body}}


ANTHROPIC_USAGE = {
    "input_tokens": 5,
    "output_tokens": 6,
    "cache_read_input_tokens": 7,
    "cache_creation_input_tokens": 8,
}


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        (
            message([{"type": "text", "text": "one"}], usage=ANTHROPIC_USAGE),
            Result("c1", Outcome.SUCCEEDED, "one", Usage(5, 6, 7, 8)),
        ),
        (
            # a tool call among the text blocks: every block is kept beside the text (#29), never dropped
            message([{"type": "text", "text": "a"}, {"type": "tool_use", "id": "t"}, {"type": "text", "text": "b"}]),
            Result(
                "c1",
                Outcome.SUCCEEDED,
                pack(
                    "ab",
                    {
                        "content": [
                            {"type": "text", "text": "a"},
                            {"type": "tool_use", "id": "t"},
                            {"type": "text", "text": "b"},
                        ],
                        "stop_reason": "end_turn",
                    },
                ),
            ),
        ),
        (
            message([{"type": "tool_use", "id": "t"}]),
            Result(
                "c1",
                Outcome.SUCCEEDED,
                pack("", {"content": [{"type": "tool_use", "id": "t"}], "stop_reason": "end_turn"}),
            ),
        ),
        (message([]), Result("c1", Outcome.SUCCEEDED, "")),
        (
            message([{"type": "text", "text": "no"}], stop="refusal", usage={"input_tokens": 3}),
            Result("c1", Outcome.REFUSED, "no", Usage(3, 0, 0, 0), error_type="refusal"),
        ),
    ],
)
def test_anthropic_lines(line: dict[str, Any], expected: Result) -> None:
    assert anthropic_line(line) == expected


def completion(message: dict[str, Any], finish: str = "stop", usage: dict[str, Any] | None = None) -> dict[str, Any]:
    body = {"choices": [{"message": message, "finish_reason": finish}], "usage": usage}
    return {"custom_id": "c1", "response": {"status_code": 200, "body": body}}


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        (
            completion({"content": "hi"}, usage={"prompt_tokens": 10, "completion_tokens": 2}),
            Result("c1", Outcome.SUCCEEDED, "hi", Usage(10, 2, 0, 0)),
        ),
        (
            completion(
                {"content": "hi"},
                usage={"prompt_tokens": 10, "completion_tokens": 2, "prompt_tokens_details": {"cached_tokens": 4}},
            ),
            Result("c1", Outcome.SUCCEEDED, "hi", Usage(6, 2, 4, 0)),
        ),
        (
            completion({"content": None, "refusal": "no"}),
            Result("c1", Outcome.REFUSED, "no", error_type="content_filter"),
        ),
        (
            completion({"content": "cut"}, finish="content_filter"),
            Result("c1", Outcome.REFUSED, "cut", error_type="content_filter"),
        ),
        ({"custom_id": "c1", "response": {"status_code": 200, "body": {}}}, Result("c1", Outcome.SUCCEEDED, "")),
    ],
)
def test_openai_lines(line: dict[str, Any], expected: Result) -> None:
    assert openai_line(line) == expected
