"""The bad-input corpus: every kind of hostile or broken input a job can bring, with the visible end state it
must reach. One table per kind of input; each row is (name, input, expected end state). Queue messages have
their table in tests/integration/test_robustness_workers.py (they need a real broker).

Input lines end as an item (`pending`, or `invalid` with an error type and a reason); templates as an item
or as a PlanError (the job is Admitted=False); specs as a validation error naming the field; provider answers
and other step faults as a fault reason (the job's StepFailed condition, event and metric label).
"""

from __future__ import annotations

import io
import json
from typing import Any

import pytest
from pydantic import ValidationError
from sqlalchemy.exc import IntegrityError, OperationalError

from barge.api.batchjob import LLMBatchJobSpec
from barge.batch import faults, plan
from barge.batch.bounded import MESSAGE_LIMIT, bound
from barge.batch.plan_input import InputStalled
from barge.batch.render import PlanError, Renderer
from barge.providers import Fatal, Invalid, Transient, make_provider
from barge.providers.anthropic_provider import result_from_line as anthropic_line
from barge.providers.base import Outcome, Request
from barge.providers.encoding import anthropic_params, openai_body
from barge.providers.openai_provider import result_from_line as openai_line
from barge.storage import StorageError, bounded_lines


def spec(**over: Any) -> LLMBatchJobSpec:
    base: dict[str, Any] = {
        "provider": {"type": "anthropic", "model": "claude-sonnet-4-6", "secretRef": {"name": "k"}},
        "input": {"url": "in.jsonl"},
        "output": {"url": "out/"},
        "request": {"template": "{{ text }}", "maxTokens": 100},
    }
    for key, value in over.items():
        base[key] = {**base[key], **value} if isinstance(value, dict) and key in base else value
    return LLMBatchJobSpec.model_validate(base)


def admit(lines: list[bytes], template: str = "{{ text }}") -> list[dict[str, Any]]:
    s = spec(request={"template": template})
    renderer = Renderer(s, "2026-11-30", "t")
    factory = plan.RequestFactory("m", s.request)
    encode = lambda r: json.dumps({"custom_id": r.custom_id, "user": r.user}).encode()  # noqa: E731
    return list(plan.admit(enumerate(lines, start=1), renderer, factory, encode))


# --- input lines -> item state ----------------------------------------------------------------------------------
LINES: list[tuple[str, bytes, str]] = [
    ("plain", b'{"id": "1", "text": "fine"}', "pending"),
    ("integer id", b'{"id": 2, "text": "fine"}', "pending"),
    ("malformed JSON", b"{not json", "malformed_json"),
    ("not an object", b'["a", "list"]', "malformed_json"),
    ("invalid UTF-8", b'{"id": "3", "text": "\xff\xfe"}', "malformed_json"),
    ("deeply nested JSON", b'{"id": "4", "text": ' + b"[" * 100_000 + b"]" * 100_000 + b"}", "malformed_json"),
    ("5,000-digit number", b'{"id": ' + b"9" * 5000 + b', "text": "x"}', "malformed_json"),
    ("70-digit integer id", b'{"id": ' + b"9" * 70 + b', "text": "x"}', "bad_id"),
    ("float id", b'{"id": 4.5, "text": "x"}', "bad_id"),
    ("null id", b'{"id": null, "text": "x"}', "bad_id"),
    ("empty id", b'{"id": "  ", "text": "x"}', "bad_id"),
    ("missing id", b'{"text": "x"}', "missing_id"),
    ("lone surrogate", b'{"id": "5", "text": "\\ud800"}', "invalid_unicode"),
    ("NUL character", b'{"id": "6", "text": "a\\u0000b"}', "nul_character"),
    ("empty line", b"", "empty_line"),
    ("blank line", b"   \t", "empty_line"),
    ("request over 1 MiB", b'{"id": "7", "text": "' + b"y" * 1_100_000 + b'"}', "request_too_large"),
    ("missing template field", b'{"id": "8"}', "template_error"),
]


@pytest.mark.parametrize(("name", "line", "expected"), LINES, ids=[r[0] for r in LINES])
def test_input_line_ends_visible(name: str, line: bytes, expected: str) -> None:
    (row,) = admit([line])
    if expected == "pending":
        assert row["state"] == "pending", row
    else:
        assert row["state"] == "invalid"
        assert row["error_type"] == expected, row
        assert row["reason"]
        assert len(row["reason"]) <= 1024


def test_duplicate_id_is_invalid_and_the_first_one_kept() -> None:
    rows = admit([b'{"id": "1", "text": "a"}', b'{"id": "1", "text": "b"}'])
    assert [r["state"] for r in rows] == ["pending", "invalid"]
    assert rows[1]["error_type"] == "duplicate_id"


def test_a_line_of_gigabytes_is_never_held() -> None:
    """Read in chunks; a line over the limit becomes an OversizeLine, then an invalid item (line_too_long)."""
    stream = io.BytesIO(b'{"id": "a", "text": "ok"}\n' + b"z" * 300_000 + b'\n{"id": "b", "text": "ok"}\n')
    lines = list(bounded_lines(stream, max_line=100_000))
    rows = admit(lines)
    assert [r["state"] for r in rows] == ["pending", "invalid", "pending"]
    assert rows[1]["error_type"] == "line_too_long"


# --- templates -> item state or PlanError ------------------------------------------------------------------------
TEMPLATES: list[tuple[str, str, str]] = [
    ("repeat a string 10^9 times", "{{ 'x' * 10**9 }}", "template_limit"),
    ("list of 10^8", "{{ [1] * 10**8 }}", "template_limit"),
    ("huge power", "{{ 10**(10**10) }}", "template_limit"),
    ("huge %-width", "{{ '%999999999d' % 1 }}", "template_limit"),
    ("'*' %-width", "{{ '%*d' % (10**9, 1) }}", "template_limit"),
    ("huge format width", "{{ '{:>999999999}'.format(1) }}", "template_limit"),
    ("str.center", "{{ 'x'.center(10**9) }}", "template_limit"),
    ("center filter", "{{ 'x'|center(10**9) }}", "template_limit"),
    ("indent filter", "{{ text|indent(10**8) }}", "template_limit"),
    ("replace blow-up", "{{ ('a' * 2000).replace('a', 'a' * 2000) }}", "template_limit"),
    ("range of 10^6", "{% for i in range(10**6) %}x{% endfor %}", "template_limit"),
    ("output over the limit", "{% for i in range(10000) %}{{ 'y' * 1000 }}{% endfor %}", "template_limit"),
    ("recursive macro", "{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}", "template_limit"),
    ("division by zero", "{{ 1 / 0 }}", "template_error"),
    ("attribute escape", "{{ text.__class__.__mro__[1].__subclasses__() }}", "template_error"),
    ("lipsum is gone", "{{ lipsum(1000) }}", "template_error"),
    ("filter on the wrong type", "{{ text|round }}", "template_error"),
]


@pytest.mark.parametrize(("name", "template", "expected"), TEMPLATES, ids=[r[0] for r in TEMPLATES])
def test_template_ends_visible(name: str, template: str, expected: str) -> None:
    (row,) = admit([b'{"id": "1", "text": "hello"}'], template)
    assert row["state"] == "invalid"
    assert row["error_type"] == expected, row
    assert row["reason"].startswith("template")


@pytest.mark.parametrize("template", ["{{ text ", "{% for %}", "{% endif %}", "{{ text|nosuchfilter }}"])
def test_template_that_does_not_compile_is_not_admitted(template: str) -> None:
    with pytest.raises(PlanError, match="does not compile") as raised:
        Renderer(spec(request={"template": template}), "2026-11-30", "t")
    assert faults.classify(raised.value).reason == "TemplateError"
    assert faults.classify(raised.value).admission


# --- job specs -> a validation error naming the field -----------------------------------------------------------
SPECS: list[tuple[str, dict[str, Any], str]] = [
    ("params overrides model", {"request": {"params": {"model": "cheaper"}}}, "model"),
    ("params overrides max_tokens", {"request": {"params": {"max_tokens": 100000}}}, "max_tokens"),
    ("params sets messages", {"request": {"params": {"messages": []}}}, "messages"),
    ("params sets n", {"request": {"params": {"n": 50}}}, "'n'"),
    ("two input sources", {"input": {"url": "a", "inline": [{"id": 1}]}}, "exactly one"),
    ("unknown customId placeholder", {"customId": "{id}-{secret}"}, "customId"),
    ("budget not a number", {"budget": {"maxCostUSD": "lots"}}, "maxCostUSD"),
    ("price not a number", {"budget": {"maxCostUSD": "5", "price": {"input": "x", "output": "1"}}}, "input"),
    ("pool type without poolRef", {"provider": {"type": "pool", "model": "", "secretRef": None}}, "poolRef"),
]


@pytest.mark.parametrize(("name", "over", "needle"), SPECS, ids=[r[0] for r in SPECS])
def test_bad_spec_is_refused_naming_the_field(name: str, over: dict[str, Any], needle: str) -> None:
    with pytest.raises(ValidationError) as raised:
        spec(**over)
    assert needle in str(raised.value)


def test_reserved_keys_win_even_if_params_slipped_through() -> None:
    """Defence in depth: the adapters put Barge's keys last, whatever params hold."""
    request = Request("c", "claude-sonnet-4-6", "hi", 50, params={"model": "x", "max_tokens": 9, "temperature": 0})
    assert anthropic_params(request)["model"] == "claude-sonnet-4-6"
    assert anthropic_params(request)["max_tokens"] == 50
    assert anthropic_params(request)["temperature"] == 0
    assert openai_body(request)["model"] == "claude-sonnet-4-6"
    assert "max_tokens" not in openai_body(request)


# --- provider answers and other step faults -> fault reason -----------------------------------------------------
def _integrity() -> IntegrityError:
    return IntegrityError("INSERT INTO items ...", ("secret item text",), Exception("UNIQUE constraint failed"))


FAULTS: list[tuple[str, BaseException, str, bool]] = [
    ("proxy's 40 KB HTML page", Transient("http_502: <html>" + "x" * 40_000), "ProviderUnavailable", True),
    ("billing", Fatal("billing_error: credit balance too low"), "ProviderRejected", False),
    ("404 on a batch", Invalid("not_found_error: no such batch"), "ProviderRejected", False),
    (
        "output outside the allowed roots",
        StorageError("'/x' resolves outside the allowed file roots"),
        "StorageError",
        True,
    ),
    (
        "Secret value not UTF-8",
        b"\xff".decode("utf-8", "strict") if False else UnicodeDecodeError("utf-8", b"\xff", 0, 1, "bad"),
        "DecodeError",
        False,
    ),
    ("ledger constraint", _integrity(), "LedgerError", True),
    ("disk full", OSError(28, "No space left on device"), "IOError", True),
    (  # review 3 M12: raised as itself, no longer a deadlock reported as a wall-time overrun
        "ledger full while planning",
        OperationalError("INSERT INTO items ...", {}, Exception("database or disk is full")),
        "LedgerError",
        True,
    ),
    (  # review 3 H7: a FIFO nobody writes, a stalled mount or server
        "an input that gives nothing",
        InputStalled("the input gave nothing for 300 s (a FIFO, or a mount or server that stopped answering)"),
        "StorageError",
        True,
    ),
    ("anything else", KeyError("surprise"), "InternalError", True),
]


@pytest.mark.parametrize(("name", "exc", "reason", "transient"), FAULTS, ids=[r[0] for r in FAULTS])
def test_step_fault_is_classified_and_bounded(name: str, exc: BaseException, reason: str, transient: bool) -> None:
    fault = faults.classify(exc)
    assert fault.reason == reason
    assert fault.transient is transient
    assert len(fault.message) <= MESSAGE_LIMIT
    assert "secret item text" not in fault.message


def test_azure_without_base_url_is_a_configuration_fault() -> None:
    with pytest.raises(ValueError, match="baseURL") as raised:
        make_provider("azure-openai", "k")
    fault = faults.classify(raised.value)
    assert fault.reason == "InvalidConfiguration"
    assert fault.admission


def test_messages_are_cut_with_a_marker() -> None:
    text = "<html>" + "proxy error " * 4000
    cut = bound(text)
    assert len(cut) <= MESSAGE_LIMIT
    assert cut.startswith("<html>proxy error")
    assert "truncated" in cut
    assert bound("\ud800 lone") == "\\ud800 lone"  # a lone surrogate cannot be serialised into a status


RESULT_LINES: list[tuple[str, Any, dict[str, Any], Outcome]] = [
    (
        "anthropic billing per item",
        anthropic_line,
        {
            "custom_id": "a",
            "result": {"type": "errored", "error": {"error": {"type": "billing_error", "message": "credit"}}},
        },
        Outcome.FATAL,
    ),
    (
        "anthropic unknown error type",
        anthropic_line,
        {"custom_id": "a", "result": {"type": "errored", "error": {"error": {"type": "weird"}}}},
        Outcome.INVALID,
    ),
    (
        "anthropic overloaded",
        anthropic_line,
        {"custom_id": "a", "result": {"type": "errored", "error": {"error": {"type": "overloaded_error"}}}},
        Outcome.TRANSIENT,
    ),
    ("anthropic result without a body", anthropic_line, {"custom_id": "a"}, Outcome.INVALID),
    (
        "openai error line",
        openai_line,
        {"custom_id": "a", "error": {"code": "invalid_request", "message": "bad"}},
        Outcome.INVALID,
    ),
]


@pytest.mark.parametrize(("name", "parse", "line", "outcome"), RESULT_LINES, ids=[r[0] for r in RESULT_LINES])
def test_provider_result_line_has_an_outcome(name: str, parse: Any, line: dict[str, Any], outcome: Outcome) -> None:
    assert parse(line).outcome is outcome
