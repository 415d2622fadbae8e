"""`providers.jsonl.parsed`: a page of result lines where some cannot be read gives one marker per such line and
the same answers as before for the others (the four ways `emulator.core.garble` breaks a line, and more); and
`providers.base.read_answer`: a synchronous answer that cannot be read is a transient result, not an exception;
and `providers.jsonl.pages`: a line too long to be a result is dropped as it streams, never held."""

from __future__ import annotations

import tracemalloc
from collections.abc import AsyncIterator, Callable
from typing import Any

import orjson
import pytest

from barge.emulator.core import garble
from barge.providers import anthropic_provider, jsonl, openai_provider
from barge.providers.base import MAX_USAGE, UNREADABLE_ANSWER, Outcome, Parsed, read_answer
from barge.providers.jsonl import UNREADABLE, parsed


def anthropic_line(cid: str) -> bytes:
    message = {"content": [{"type": "text", "text": f"out {cid}"}], "usage": {"input_tokens": 5, "output_tokens": 6}}
    return orjson.dumps({"custom_id": cid, "result": {"type": "succeeded", "message": message}})


def openai_line(cid: str) -> bytes:
    body = {
        "choices": [{"message": {"content": f"out {cid}"}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 5, "completion_tokens": 6},
    }
    return orjson.dumps({"custom_id": cid, "response": {"status_code": 200, "body": body}})


@pytest.mark.parametrize(
    ("make", "parse_line"),
    [(anthropic_line, anthropic_provider.parse_line), (openai_line, openai_provider.parse_line)],
)
def test_each_unreadable_line_is_a_marker_and_the_rest_parse_as_before(
    make: Callable[[str], bytes], parse_line: Callable[[Any], Parsed]
) -> None:
    good = [make(f"c{i}") for i in range(8)]
    page = list(good)
    for way in range(4):  # cut short, not UTF-8, a lone surrogate, an array around the object
        page.insert(2 * way + 1, garble(make(f"bad{way}"), way))
    page += [b"null", b'"a string"', b"[]", b"{}"]
    out = parsed(page, parse_line)
    assert len(out) == len(page)
    markers = [p for p in out if p[7] == UNREADABLE]
    assert [p[0] for p in markers] == [""] * 7  # the four garbled lines, null, a string and an array
    assert all(p[1] is Outcome.TRANSIENT and p[8] for p in markers)
    assert {p[8].split(":")[0] for p in markers} >= {"JSONDecodeError", "AttributeError"}
    readable = [p for p in out if p[7] != UNREADABLE]
    assert readable[:8] == [parse_line(orjson.loads(line)) for line in good]
    assert [p[1] for p in readable[:8]] == [Outcome.SUCCEEDED] * 8
    assert readable[8] == parse_line({})  # an empty object is read as it was (no custom_id: not one of ours)


def test_a_readable_page_is_parsed_in_one_pass() -> None:
    page = [openai_line(f"c{i}") for i in range(3)]
    assert parsed(page, openai_provider.parse_line) == [openai_provider.parse_line(orjson.loads(x)) for x in page]


@pytest.mark.parametrize("way", range(4))
def test_an_unreadable_synchronous_answer_is_a_transient_result(way: int) -> None:
    body = orjson.dumps({"choices": [{"message": {"content": "hi"}}], "usage": {"prompt_tokens": 3}})
    read = openai_provider._completion_result
    assert read_answer("c1", body, read) == read("c1", orjson.loads(body))
    result = read_answer("c1", garble(body, way), read)
    assert (result.custom_id, result.outcome, result.error_type) == ("c1", Outcome.TRANSIENT, UNREADABLE_ANSWER)
    assert result.message.split(":")[0] in ("JSONDecodeError", "AttributeError")


async def chunked(*parts: bytes, size: int = 65536) -> AsyncIterator[bytes]:
    for part in parts:
        for at in range(0, len(part), size):
            yield part[at : at + size]


async def all_lines(chunks: AsyncIterator[bytes], max_line: int = jsonl.MAX_LINE) -> list[bytes]:
    return [line async for page in jsonl.pages(chunks, max_line) for line in page]


async def test_a_line_longer_than_a_read_is_whole_and_one_over_the_limit_is_dropped() -> None:
    long = b'{"custom_id":"c1","text":"' + b"x" * (1 << 20) + b'"}'  # 1 MiB: 17 reads
    endless = b"y" * (jsonl.MAX_LINE + (1 << 20))
    got = await all_lines(chunked(b'{"a":1}\r\n' + long + b"\n" + endless + b'\r\n{"b":2}\n'))
    assert got == [b'{"a":1}', long, jsonl.OVERSIZE, b'{"b":2}']
    assert await all_lines(chunked(b"z" * 5000), max_line=1000) == [jsonl.OVERSIZE]  # to the end of the stream
    assert await all_lines(chunked(b'{"c":3}', size=2)) == [b'{"c":3}']  # no newline at the end
    marker = parsed([jsonl.OVERSIZE], openai_provider.parse_line)[0]
    assert (marker[0], marker[7], marker[8]) == ("", UNREADABLE, "a line over 16 MiB, dropped unread")


async def test_an_endless_line_is_never_held() -> None:
    async def endless() -> AsyncIterator[bytes]:
        for _ in range(160):  # 10 MiB without a newline, read by read
            yield b"w" * 65536

    tracemalloc.start()
    try:
        assert await all_lines(endless(), max_line=1 << 20) == [jsonl.OVERSIZE]
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 3 << 20  # the 1 MiB limit and a read or two, not the 10 MiB line


@pytest.mark.parametrize(
    "usage",
    [
        {"input_tokens": -5, "output_tokens": 6},
        {"input_tokens": 5, "output_tokens": -(10**18)},  # past a 32-bit column either way
        {"input_tokens": 5, "output_tokens": 6, "cache_read_input_tokens": MAX_USAGE + 1},
    ],
)
def test_a_usage_that_is_not_a_token_count_makes_the_answer_unreadable(usage: dict[str, int]) -> None:
    line = orjson.loads(anthropic_line("c1"))
    line["result"]["message"]["usage"] = usage
    marker = parsed([orjson.dumps(line)], anthropic_provider.parse_line)[0]
    assert (marker[0], marker[7]) == ("", UNREADABLE)
    assert "is not a token count" in marker[8]
    answer = read_answer("c1", orjson.dumps(line["result"]["message"]), anthropic_provider._message_result)
    assert (answer.outcome, answer.error_type) == (Outcome.TRANSIENT, UNREADABLE_ANSWER)


def test_a_usage_past_64_bits_makes_the_answer_unreadable() -> None:
    beyond = b'"output_tokens":' + b"9" * 30
    marker = parsed([anthropic_line("c1").replace(b'"output_tokens":6', beyond)], anthropic_provider.parse_line)[0]
    assert (marker[0], marker[7]) == ("", UNREADABLE)
    body = orjson.dumps(orjson.loads(anthropic_line("c1"))["result"]["message"]).replace(b'"output_tokens":6', beyond)
    answer = read_answer("c1", body, anthropic_provider._message_result)
    assert (answer.outcome, answer.error_type) == (Outcome.TRANSIENT, UNREADABLE_ANSWER)


@pytest.mark.parametrize(
    "usage",
    [
        {"prompt_tokens": 5, "completion_tokens": 6, "prompt_tokens_details": {"cached_tokens": 9}},  # cached > prompt
        {"prompt_tokens": -1, "completion_tokens": 6},
        {"prompt_tokens": 5, "completion_tokens": MAX_USAGE + 1},
    ],
)
def test_an_openai_usage_that_is_not_a_token_count_makes_the_answer_unreadable(usage: dict[str, object]) -> None:
    line = orjson.loads(openai_line("c1"))
    line["response"]["body"]["usage"] = usage
    marker = parsed([orjson.dumps(line)], openai_provider.parse_line)[0]
    assert (marker[0], marker[7]) == ("", UNREADABLE)
    answer = read_answer("c1", orjson.dumps(line["response"]["body"]), openai_provider._completion_result)
    assert (answer.outcome, answer.error_type) == (Outcome.TRANSIENT, UNREADABLE_ANSWER)


def test_the_largest_counts_are_read() -> None:
    line = orjson.loads(anthropic_line("c1"))
    line["result"]["message"]["usage"] = {"input_tokens": MAX_USAGE, "output_tokens": 0}
    assert parsed([orjson.dumps(line)], anthropic_provider.parse_line)[0][:5] == (
        "c1",
        Outcome.SUCCEEDED,
        "out c1",
        MAX_USAGE,
        0,
    )
