"""Ingestion reads batch results as `Parsed` tuples (providers.base): each provider's `parse_line` must give what
its `result_from_line` gives, on the usual line it reads without a Result and on every shape it leaves to
`result_from_line`; ingestion's row of a tuple must be its row of the Result."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest

from barge.batch.ingest import _parsed_row, _row
from barge.providers import anthropic_provider, openai_provider
from barge.providers.base import Outcome, Result, Usage, as_parsed, as_result


def anthropic(
    content: Any = None, usage: Any = None, stop: Any = "end_turn", kind: Any = "succeeded", cid: Any = "c1"
) -> dict[str, Any]:
    content = [{"type": "text", "text": "out"}] if content is None else content
    usage = {"input_tokens": 5, "output_tokens": 6, "cache_read_input_tokens": 0} if usage is None else usage
    message = {"content": content, "stop_reason": stop, "usage": usage}
    return {"custom_id": cid, "result": {"type": kind, "message": message}}


ANTHROPIC = [
    anthropic(),
    anthropic(
        usage={"input_tokens": 5, "output_tokens": 6, "cache_read_input_tokens": 7, "cache_creation_input_tokens": 8}
    ),
    anthropic(usage={"input_tokens": 5, "output_tokens": None, "cache_read_input_tokens": None}),
    anthropic(usage={"input_tokens": True, "output_tokens": 6}),  # a bool is not a count: the general code decides
    anthropic(usage={"input_tokens": 5.0, "output_tokens": 6}),
    anthropic(usage={}),
    anthropic(usage="none"),
    anthropic(stop="refusal"),
    anthropic(content=[{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]),
    anthropic(content=[{"type": "tool_use", "id": "t"}]),
    anthropic(content=[{"type": "text"}]),
    anthropic(content=[{"type": "text", "text": None}]),
    anthropic(content=[]),
    anthropic(cid=17),
    {"custom_id": "c1", "result": {"type": "succeeded"}},
    {"custom_id": "c1", "result": {"type": "succeeded", "message": None}},
    {"custom_id": "c1", "result": {"type": "expired"}},
    {"custom_id": "c1", "result": {"type": "canceled"}},
    {
        "custom_id": "c1",
        "result": {"type": "errored", "error": {"error": {"type": "overloaded_error", "message": "m"}}},
    },
    {"custom_id": "c1", "result": {"type": "errored", "error": {"error": {"type": "invalid_request_error"}}}},
    {"custom_id": "c1", "result": {"type": "errored", "error": {"error": {"type": "authentication_error"}}}},
    {"custom_id": "c1"},
    {},
]


def openai(
    content: Any = "out",
    usage: Any = None,
    finish: Any = "stop",
    refusal: Any = None,
    status: Any = 200,
    error: Any = None,
    cid: Any = "c1",
) -> dict[str, Any]:
    usage = {"prompt_tokens": 10, "completion_tokens": 2} if usage is None else usage
    choice = {"message": {"content": content, "refusal": refusal}, "finish_reason": finish}
    body = {"choices": [choice], "usage": usage}
    return {"custom_id": cid, "response": {"status_code": status, "body": body}, "error": error}


OPENAI = [
    openai(),
    openai(usage={"prompt_tokens": 10, "completion_tokens": 2, "prompt_tokens_details": {"cached_tokens": 4}}),
    openai(usage={"prompt_tokens": 10, "completion_tokens": 2, "prompt_tokens_details": {"cached_tokens": None}}),
    openai(usage={"prompt_tokens": 10, "completion_tokens": 2, "prompt_tokens_details": {}}),
    openai(usage={"prompt_tokens": 10, "completion_tokens": 2, "prompt_tokens_details": None}),
    openai(usage={"prompt_tokens": 10, "completion_tokens": 2, "prompt_tokens_details": 0}),
    openai(usage={"prompt_tokens": 10, "completion_tokens": 2, "prompt_tokens_details": [1]}),
    openai(usage={"prompt_tokens": 10, "completion_tokens": 2, "prompt_tokens_details": {"cached_tokens": 1.0}}),
    openai(usage={"prompt_tokens": None, "completion_tokens": 2}),
    openai(usage={"prompt_tokens": False, "completion_tokens": 2}),
    openai(usage={}),
    openai(usage="none"),
    openai(finish="content_filter"),
    openai(content=None, refusal="no"),
    openai(content="said", refusal="no"),
    openai(content="said", refusal=""),
    openai(content=""),
    openai(content=7),
    openai(status="200"),
    openai(status=True),
    openai(status=400),
    openai(error={"code": "batch_expired", "message": "late"}),
    openai(error={"code": "server_error", "message": "m"}),
    openai(cid=None),
    {"custom_id": "c1", "response": {"status_code": 200, "body": {}}},
    {"custom_id": "c1", "response": {"status_code": 200, "body": {"choices": [], "usage": {}}}},
    {"custom_id": "c1", "response": {"status_code": 200, "body": {"choices": [None], "usage": {}}}},
    {"custom_id": "c1", "response": {"status_code": 200, "body": {"choices": [{}], "usage": {}}}},
    {"custom_id": "c1", "response": {"status_code": 500, "body": {"error": {"code": "server_error"}}}},
    {"custom_id": "c1", "response": {"status_code": 401, "body": {"error": {"type": "invalid_api_key"}}}},
    {},
]


def answer(parse: Callable[[dict[str, Any]], Any], line: dict[str, Any]) -> Any:
    """What `parse` makes of a copy of the line, or the type of what it raised (a malformed line raises)."""
    try:
        return parse(copy.deepcopy(line))
    except Exception as exc:  # the answer is the exception's type, compared below
        return type(exc)


@pytest.mark.parametrize("line", ANTHROPIC)
def test_anthropic_parse_line_answers_as_result_from_line(line: dict[str, Any]) -> None:
    assert answer(anthropic_provider.parse_line, line) == answer(
        lambda x: as_parsed(anthropic_provider.result_from_line(x)), line
    )


@pytest.mark.parametrize("line", OPENAI)
def test_openai_parse_line_answers_as_result_from_line(line: dict[str, Any]) -> None:
    assert answer(openai_provider.parse_line, line) == answer(
        lambda x: as_parsed(openai_provider.result_from_line(x)), line
    )


@pytest.mark.parametrize(
    ("provider", "line", "expected"),
    [
        (anthropic_provider, anthropic(), ("c1", Outcome.SUCCEEDED, "out", 5, 6, 0, 0, "", "")),
        (anthropic_provider, anthropic(stop="refusal"), ("c1", Outcome.REFUSED, "out", 5, 6, 0, 0, "refusal", "")),
        (
            openai_provider,
            openai(usage={"prompt_tokens": 10, "completion_tokens": 2, "prompt_tokens_details": {"cached_tokens": 4}}),
            ("c1", Outcome.SUCCEEDED, "out", 6, 2, 4, 0, "", ""),
        ),
        (
            openai_provider,
            openai(finish="content_filter"),
            ("c1", Outcome.REFUSED, "out", 10, 2, 0, 0, "content_filter", ""),
        ),
    ],
)
def test_the_usual_lines_build_no_result(
    provider: Any, line: dict[str, Any], expected: tuple[Any, ...], monkeypatch: pytest.MonkeyPatch
) -> None:
    def general(line: dict[str, Any]) -> Result:
        raise AssertionError("the usual line went through result_from_line")

    monkeypatch.setattr(provider, "result_from_line", general)
    assert provider.parse_line(line) == expected


@pytest.mark.parametrize("outcome", list(Outcome))
@pytest.mark.parametrize("attempts", [0, 2])
def test_a_parsed_result_makes_the_row_its_result_makes(outcome: Outcome, attempts: int) -> None:
    result = Result("c1", outcome, text="out", usage=Usage(5, 6, 7, 8), error_type="e", message="m")
    assert as_result(as_parsed(result)) == result
    assert _parsed_row(as_parsed(result), attempts, 3) == _row(result, attempts, 3)
    bare = Result("c1", outcome, error_type="e")
    assert as_result(as_parsed(bare)) == bare
    assert _parsed_row(as_parsed(bare), attempts, 3) == _row(bare, attempts, 3)
