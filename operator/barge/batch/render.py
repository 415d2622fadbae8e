"""How one input line becomes one request: sandboxed Jinja2 over the line's fields, and its custom_id.

A custom_id is deterministic from the template, so a rerun or a resubmission names the same item the same
way; results are joined by it, never by order. Ids that need sanitising, or are too long, keep a readable
prefix and gain a stable hash of the unsanitised value, so two different items can never collide.

Fast path: a template that is only text and bare fields (`Hello {{ name }}: {{ text }}`, the common case) is
rendered by concatenation, with exactly Jinja's output (`str()` of each value, the same missing-field error and
output limit) and a fraction of its cost per line; anything else goes through the sandbox.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

import orjson
from jinja2 import TemplateError, UndefinedError, nodes
from jinja2.exceptions import SecurityError

from barge.api.batchjob import LLMBatchJobSpec
from barge.batch.bounded import bound
from barge.batch.sandbox import LIMIT_PREFIX, BoundedSandbox, Limits, render_bounded
from barge.storage import MAX_LINE_BYTES, OversizeLine

CUSTOM_ID = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
_UNSAFE = re.compile(r"[^A-Za-z0-9_-]")
_PLACEHOLDER = re.compile(r"\{(\w+)\}")
HASH_LEN = 10
#: orjson reads an integer beyond 64 bits as a float (json keeps it an int): a float this large is re-read by json.
_HUGE = float(2**63)
#: Names Jinja resolves specially: a template using them is never on the fast path.
_SPECIAL_NAMES = frozenset({"self", "loop", "caller", "varargs", "kwargs", "super"})


class PlanError(Exception):
    """The job as a whole cannot be planned (its template does not compile, or hits a limit on every line):
    Admitted=False with this message. `permanent`: the same spec will always fail (the spec is immutable)."""

    def __init__(self, message: str, *, permanent: bool = True) -> None:
        super().__init__(message)
        self.permanent = permanent


class ItemError(ValueError):
    """Why an input line can never become a request (it becomes an `invalid` item with this reason)."""

    def __init__(self, reason: str, error_type: str = "invalid_input") -> None:
        super().__init__(reason)
        self.reason = reason
        self.error_type = error_type


def check_text(text: str, what: str) -> None:
    """Text every ledger and provider can take: UTF-8 encodable (no lone surrogates) and without NUL."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ItemError(f"{what} holds text that is not valid Unicode ({exc.reason})", "invalid_unicode") from exc
    if "\x00" in text:
        raise ItemError(f"{what} holds a NUL character (U+0000), which the ledger cannot store", "nul_character")


def make_custom_id(template: str, values: dict[str, str]) -> str:
    return _safe_id(_PLACEHOLDER.sub(lambda m: values[m.group(1)], template))


def _safe_id(raw: str) -> str:
    if CUSTOM_ID.match(raw):
        return raw
    digest = hashlib.sha256(raw.encode()).hexdigest()[:HASH_LEN]
    prefix = _UNSAFE.sub("_", raw)[: 64 - HASH_LEN - 1].rstrip("_-") or "item"
    return f"{prefix}-{digest}"


def _json_loads(line: bytes) -> Any:
    try:
        return json.loads(line)
    except RecursionError as exc:
        raise ItemError("malformed JSON: nested too deeply", "malformed_json") from exc
    except ValueError as exc:  # JSONDecodeError, UnicodeDecodeError, an integer of more than 4,300 digits
        raise ItemError(bound(f"malformed JSON: {exc}", 300), "malformed_json") from exc


def _huge_float(value: Any) -> bool:
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
        elif isinstance(item, float) and abs(item) >= _HUGE:
            return True
    return False


def simple_parts(env: BoundedSandbox, source: str) -> tuple[tuple[bool, str], ...] | None:
    """The template as (is a field, text) parts when it is only text and bare `{{ field }}` outputs, else None.
    Jinja renders such a template as the text with `str(value)` of each field, which is what the fast path does."""
    try:
        tree = env.parse(source)
    except (TemplateError, RecursionError, MemoryError):
        return None
    parts: list[tuple[bool, str]] = []
    for node in tree.body:
        if not isinstance(node, nodes.Output):
            return None
        for child in node.nodes:
            if isinstance(child, nodes.TemplateData):
                parts.append((False, child.data))
            elif (
                isinstance(child, nodes.Name)
                and child.ctx == "load"
                and child.name not in env.globals
                and child.name not in _SPECIAL_NAMES
            ):
                parts.append((True, child.name))
            else:
                return None
    return tuple(parts)


@dataclass(frozen=True)
class Rendered:
    item_id: str
    custom_id: str
    user: str


class Renderer:
    """Compiled once per job; `render` is called per line."""

    def __init__(self, spec: LLMBatchJobSpec, run_date: str, tenant: str, limits: Limits | None = None) -> None:
        self.env = BoundedSandbox(limits)
        try:
            self.template = self.env.from_string(spec.request.template)
        except (TemplateError, RecursionError, MemoryError) as exc:
            raise PlanError(f"spec.request.template does not compile: {exc}") from exc
        self.parts = simple_parts(self.env, spec.request.template)
        """Set when the template is only text and bare fields: rendered by concatenation (see the docstring)."""
        self.id_field = spec.input.id_field
        self.custom_id_template = spec.custom_id
        self.fixed = {"promptVersion": spec.request.prompt_version, "runDate": run_date, "tenant": tenant}
        self._id_parts = _PLACEHOLDER.split(spec.custom_id)  # text, name, text, name, ..., text
        self.body: Callable[[dict[str, Any]], str] | None = None
        """Set in passthrough mode: the item's checked `body` is the payload (batch/passthrough.py)."""
        if spec.request.mode == "passthrough":
            from barge.batch.passthrough import body_payload  # it imports this module's ItemError

            self.body = partial(body_payload, max_tokens=spec.request.max_tokens)

    def parse(self, line: bytes) -> dict[str, Any]:
        if isinstance(line, OversizeLine):
            raise ItemError(f"line of {line.length} bytes is over the {MAX_LINE_BYTES}-byte limit", "line_too_long")
        if not line.strip():
            raise ItemError("empty line", "empty_line")
        try:
            value = orjson.loads(line)
        except orjson.JSONDecodeError:
            value = _json_loads(line)  # json's own verdict (it reads a few things orjson refuses) and message
        else:
            if _huge_float(value):  # maybe an integer orjson turned into a float: json's reading (an int) wins
                value = _json_loads(line)
        if not isinstance(value, dict):
            raise ItemError(f"a line must be a JSON object, got {type(value).__name__}", "malformed_json")
        return value

    def item_id(self, fields: dict[str, Any]) -> str:
        if self.id_field not in fields:
            raise ItemError(f"missing id field {self.id_field!r}", "missing_id")
        value = fields[self.id_field]
        if isinstance(value, bool) or not isinstance(value, str | int):
            raise ItemError(
                f"id field {self.id_field!r} must be a string or an integer, got {type(value).__name__}", "bad_id"
            )
        if isinstance(value, int) and abs(value) >= 10**64:
            raise ItemError(f"id field {self.id_field!r} is an integer of more than 64 digits", "bad_id")
        text = str(value)
        if not text.strip():
            raise ItemError(f"id field {self.id_field!r} is empty", "bad_id")
        return text

    def render(self, line_number: int, fields: dict[str, Any]) -> Rendered:
        item_id = self.item_id(fields)
        try:
            if self.body is not None:
                user = self.body(fields)
            elif self.parts is not None:
                user = self._concat(fields)
            else:
                user = render_bounded(self.template.generate(**fields), self.env.limits.max_output)
        except ItemError:
            raise
        except UndefinedError as exc:
            raise ItemError(f"template references a missing field: {exc.message}", "template_error") from exc
        except RecursionError as exc:
            raise ItemError("template failed: recursion too deep", "template_limit") from exc
        except MemoryError as exc:
            raise ItemError("template failed: out of memory", "resource_limit") from exc
        except SecurityError as exc:  # the sandbox refused: one of its limits, or an unsafe attribute
            kind = "template_limit" if str(exc).startswith(LIMIT_PREFIX) else "template_error"
            raise ItemError(bound(f"template failed: {exc}", 300), kind) from exc
        except Exception as exc:  # anything a template can raise (1/0, bad filters, ...) is this line's fault
            raise ItemError(bound(f"template failed: {type(exc).__name__}: {exc}", 300), "template_error") from exc
        check_text(user, "rendered message")
        check_text(item_id, "id")
        values = {**self.fixed, "id": item_id, "line": str(line_number)}
        raw = "".join(values[part] if n % 2 else part for n, part in enumerate(self._id_parts))
        return Rendered(item_id, _safe_id(raw), user)

    def _concat(self, fields: dict[str, Any]) -> str:
        """The fast path: what Jinja renders for text and bare fields, with its errors (missing field, output
        over the limit) raised as Jinja raises them."""
        assert self.parts is not None
        limit = self.env.limits.max_output
        out: list[str] = []
        total = 0
        for is_field, text in self.parts:
            if is_field:
                if text not in fields:
                    raise UndefinedError(f"{text!r} is undefined")
                text = str(fields[text])
            total += len(text)
            if total > limit:
                raise SecurityError(f"{LIMIT_PREFIX} output over {limit} characters")
            out.append(text)
        return "".join(out)
