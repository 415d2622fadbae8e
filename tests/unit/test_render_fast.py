"""The render fast path (text and bare fields, no Jinja) gives exactly what the sandboxed Jinja template gives:
the same text, the same invalid items with the same reasons, the same custom_ids."""

from __future__ import annotations

import io
import json
from typing import Any

import pytest

from barge.api.batchjob import LLMBatchJobSpec
from barge.batch import plan
from barge.batch.render import Renderer
from barge.batch.sandbox import Limits
from barge.providers.base import Request
from barge.providers.encoding import encode_anthropic, encoder
from barge.providers.upload import LineReader, Replay

LINES = [
    b'{"id": "1", "text": "plain", "name": "Ann"}',
    b'{"id": 2, "text": 3.5, "name": null}',
    b'{"id": "3", "text": {"nested": [1, true, null]}, "name": ["a", "b"]}',
    b'{"id": "4", "text": "caf\\u00e9 \\ud83d\\ude00 \\n line", "name": false}',
    b'{"id": "5", "text": 123456789012345678901234567890, "name": -0}',
    b'{"id": "6", "name": "no text field"}',
    b'{"id": "7", "text": "' + b"y" * 5000 + b'", "name": "too long for a small limit"}',
    b'{"id": "8", "text": "a\\u0000b", "name": "NUL"}',
    b'{"id": "9", "text": "\\ud800", "name": "lone surrogate"}',
    b'{"id": "10", "text": 1e400, "name": "infinity"}',
    b'{"id": "11", "text": NaN, "name": "NaN"}',
    b'{"id": "12", "text": "dup", "text": "last wins", "name": "x"}',
    b'\xef\xbb\xbf{"id": "13", "text": "a BOM mid-file", "name": "x"}',
    b'{"id": 99999999999999999999999, "text": "big id", "name": "x"}',
    b"{not json",
]
TEMPLATES = [
    "{{ text }}",
    "Hello {{ name }}:\r\n{{ text }}\n\n",
    "{{text}}{{ text }} and {{ name }}",
    "no fields at all",
    "{% if text %}{{ text }}{% endif %}",  # a statement: not on the fast path
    "{{ text|upper }}",  # a filter: not on the fast path
]


def rows(template: str, *, fast: bool, custom_id: str = "{id}", max_output: int = 4000) -> list[dict[str, Any]]:
    spec = LLMBatchJobSpec.model_validate(
        {
            "provider": {"type": "anthropic", "model": "m", "secretRef": {"name": "k"}},
            "input": {"url": "in.jsonl"},
            "output": {"url": "out/"},
            "request": {"template": template, "maxTokens": 10},
            "customId": custom_id,
        }
    )
    renderer = Renderer(spec, "2026-11-30", "t", Limits(max_output=max_output))
    if not fast:
        renderer.parts = None
    factory = plan.RequestFactory("m", spec.request)
    return list(plan.admit(enumerate(LINES, start=1), renderer, factory, encode_anthropic))


@pytest.mark.parametrize("template", TEMPLATES)
def test_fast_path_renders_what_jinja_renders(template: str) -> None:
    fast, slow = rows(template, fast=True), rows(template, fast=False)
    assert json.dumps(fast) == json.dumps(slow)
    assert {r["state"] for r in slow} == {"pending", "invalid"}  # both kinds of line are compared


def test_fast_path_is_taken_only_for_text_and_bare_fields() -> None:
    taken = {t: Renderer(_spec(t), "d", "t").parts is not None for t in TEMPLATES}
    assert Renderer(_spec("{{ range }}"), "d", "t").parts is None  # a global, resolved by Jinja
    assert Renderer(_spec("{{ self }}"), "d", "t").parts is None
    assert taken == {
        "{{ text }}": True,
        "Hello {{ name }}:\r\n{{ text }}\n\n": True,
        "{{text}}{{ text }} and {{ name }}": True,
        "no fields at all": True,
        "{% if text %}{{ text }}{% endif %}": False,
        "{{ text|upper }}": False,
    }


def test_custom_id_templates_agree() -> None:
    for custom_id in ("{id}", "{tenant}-{runDate}-{id}-{line}", "x{promptVersion}/{id}"):
        assert json.dumps(rows("{{ text }}", fast=True, custom_id=custom_id)) == json.dumps(
            rows("{{ text }}", fast=False, custom_id=custom_id)
        )


def _spec(template: str) -> LLMBatchJobSpec:
    return LLMBatchJobSpec.model_validate(
        {
            "provider": {"type": "anthropic", "model": "m", "secretRef": {"name": "k"}},
            "input": {"url": "in.jsonl"},
            "output": {"url": "out/"},
            "request": {"template": template, "maxTokens": 10},
        }
    )


@pytest.mark.parametrize(
    "line",
    [
        b'{"id": 1, "n": 123456789012345678901234567890}',
        b'{"id": 1, "n": [-9223372036854775809, 18446744073709551616, 1e300, 1.5]}',
        b'{"id": 1, "deep": {"a": [{"b": 99999999999999999999}]}}',
        b'{"id": 1, "n": NaN, "m": Infinity}',
    ],
)
def test_lines_are_read_as_json_reads_them(line: bytes) -> None:
    assert Renderer(_spec("{{ n }}"), "d", "t").parse(line) == json.loads(line)
    assert repr(Renderer(_spec("{{ n }}"), "d", "t").parse(line)) == repr(json.loads(line))


@pytest.mark.parametrize("kind", ["anthropic", "openai", "azure-openai"])
@pytest.mark.parametrize("system", ["", "be brief \u00e9", "\x00barge-mark\x00 in the system prompt"])
def test_compiled_line_encoder_is_byte_for_byte_the_encoder(kind: str, system: str) -> None:
    spec = LLMBatchJobSpec.model_validate(
        {
            "provider": {"type": "anthropic", "model": "m", "secretRef": {"name": "k"}},
            "input": {"url": "in.jsonl"},
            "output": {"url": "out/"},
            "request": {
                "template": "{{ text }}",
                "maxTokens": 10,
                "system": system,
                "cachePrefix": True,
                "params": {"temperature": 0.2, "metadata": {"k": "v"}},
            },
        }
    )
    factory = plan.RequestFactory("m", spec.request)
    encode = encoder(kind)
    fast = factory.line_encoder(encode)
    for custom_id, user in [("a", ""), ("id-2", 'caf\u00e9 \U0001f600 "q" \\ \n\t\x01\u2028'), ("x" * 64, "y" * 5000)]:
        assert fast(custom_id, user) == encode(factory(custom_id, user))


def test_line_encoder_falls_back_for_an_encoder_that_is_not_orjson() -> None:
    factory = plan.RequestFactory("m", _spec("{{ text }}").request)

    def ascii_json(r: Request) -> bytes:
        return json.dumps({"custom_id": r.custom_id, "user": r.user}).encode()  # \\u escapes, unlike orjson

    fast = factory.line_encoder(ascii_json)
    assert fast("a", "caf\u00e9") == ascii_json(factory("a", "caf\u00e9"))


def test_line_reader_streams_every_line_and_rewinds_only_a_replayable_source() -> None:
    lines = [b'{"a":1}', b"", b"x" * 70_000, "\u00e9".encode()]
    expected = b"".join(line + b"\n" for line in lines)
    for size in (1, 7, 65_536, -1):
        reader = LineReader(Replay(lambda: iter(lines)))
        got = b""
        while chunk := reader.read(size):
            got += chunk
        assert got == expected
        assert reader.seek(0) == 0  # a retried upload reads every line again
        assert reader.read() == expected
    once = LineReader(iter(lines))
    assert not once.restartable
    once.seek(0)  # before reading: fine (httpx rewinds before it sends)
    assert once.read(3) == expected[:3]
    with pytest.raises(io.UnsupportedOperation):
        once.seek(0)
    with pytest.raises(OSError, match="not known"):  # so httpx sends it chunked instead of guessing a length
        once.tell()
