"""The Jinja2 sandbox a job's template runs in: Jinja's own sandbox (no attribute escapes) plus size limits.

Why: Jinja's SandboxedEnvironment stops a template from reaching Python internals, not from exhausting the
machine: `{{ 'x' * 10**9 }}`, `{{ 10**10**10 }}`, `'%999999999d' % 1`, `'x'.center(10**9)` or nested
`range` loops each took the shared operator down. Here every operator and call that can grow a value far
beyond its operands is checked *before* it runs, `range` is capped, `lipsum` is gone, and the rendered text
is cut at `max_output` characters. What remains (CPU time of loops, a recursive macro) is bounded by the
planner process that runs templates (planner.py): a time limit per line and memory and CPU limits per job.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from jinja2 import StrictUndefined
from jinja2.exceptions import SecurityError
from jinja2.runtime import Context
from jinja2.sandbox import ImmutableSandboxedEnvironment


@dataclass(frozen=True)
class Limits:
    max_output: int = 4 * 1024 * 1024
    """Characters a template may render for one line (as long as an input line may be; a request over 1 MiB
    is then refused as `request_too_large`)."""
    max_value: int = 1024 * 1024
    """Length of any string or list an operator or method may build."""
    max_range: int = 10_000
    """Items of one `range(...)`."""
    max_int_bits: int = 4096
    """Bits of an integer `*` or `**` may build."""


LIMIT_PREFIX = "template limit:"
_WIDTH = re.compile(r"(\d{7,})")  # a width or precision of a million or more, in a %-format or a format spec
_GROWING = {"center", "ljust", "rjust", "zfill"}


def _length(value: Any) -> int | None:
    return len(value) if isinstance(value, str | bytes | list | tuple) else None


class BoundedSandbox(ImmutableSandboxedEnvironment):
    """An immutable sandbox whose operators, calls and ranges cannot build values beyond `Limits`."""

    intercepted_binops = frozenset({"*", "**", "%", "+", "//"})

    def __init__(self, limits: Limits | None = None) -> None:
        super().__init__(undefined=StrictUndefined, autoescape=False)
        self.limits = limits or Limits()
        self.globals.pop("lipsum", None)
        self.globals["range"] = self._range
        for name in ("center", "indent", "wordwrap", "format", "replace"):
            self.filters[name] = self._checked_filter(name, self.filters[name])

    def _too_big(self, what: str) -> SecurityError:
        return SecurityError(f"{LIMIT_PREFIX} {what}")

    def _range(self, *args: int) -> range:
        values = range(*args)
        if len(values) > self.limits.max_range:
            raise self._too_big(f"range of {len(values)} items (at most {self.limits.max_range})")
        return values

    def _check_size(self, n: int, what: str) -> None:
        if n > self.limits.max_value:
            raise self._too_big(f"{what} would build {n} items (at most {self.limits.max_value})")

    def call_binop(self, context: Context, op: str, left: Any, right: Any) -> Any:
        if op == "*":
            for seq, times in ((left, right), (right, left)):
                n = _length(seq)
                if n is not None and isinstance(times, int):
                    self._check_size(n * times, "'*'")
            if (
                isinstance(left, int)
                and isinstance(right, int)
                and left.bit_length() + right.bit_length() > self.limits.max_int_bits
            ):
                raise self._too_big("'*' would build an integer over the bit limit")
        elif op == "**":
            bits = abs(left).bit_length() * right if isinstance(left, int) and isinstance(right, int) else 0
            if bits > self.limits.max_int_bits:
                raise self._too_big(f"'**' would build an integer of about {bits} bits")
        elif op == "%" and isinstance(left, str):
            if "*" in left or _WIDTH.search(left):
                raise self._too_big("a %-format with a huge or '*' width")
        elif op == "+" and (a := _length(left)) is not None and (b := _length(right)) is not None:
            self._check_size(a + b, "'+'")
        return super().call_binop(context, op, left, right)

    def _check_call(self, obj: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        owner, name = getattr(obj, "__self__", None), getattr(obj, "__name__", "")
        if not isinstance(owner, str):
            return
        ints = [a for a in (*args, *kwargs.values()) if isinstance(a, int)]
        if name in _GROWING and ints:
            self._check_size(max(ints), f"str.{name}")
        elif name == "expandtabs":
            self._check_size(len(owner) * max(ints or [8]), "str.expandtabs")
        elif name == "replace" and len(args) >= 2 and isinstance(args[0], str) and isinstance(args[1], str):
            hits = owner.count(args[0]) if args[0] else len(owner) + 1
            self._check_size(len(owner) + hits * max(0, len(args[1]) - len(args[0])), "str.replace")
        elif name in ("format", "format_map") and _WIDTH.search(owner):
            raise self._too_big("a format spec with a huge width")

    def call(__self, __context: Context, __obj: Any, *args: Any, **kwargs: Any) -> Any:
        __self._check_call(__obj, args, kwargs)
        return super().call(__context, __obj, *args, **kwargs)

    def wrap_str_format(self, value: Any) -> Callable[..., str] | None:
        owner = getattr(value, "__self__", None)
        if (
            isinstance(owner, str)
            and getattr(value, "__name__", "") in ("format", "format_map")
            and _WIDTH.search(owner)
        ):
            raise self._too_big("a format spec with a huge width")
        return super().wrap_str_format(value)

    def _checked_filter(self, name: str, func: Callable[..., Any]) -> Callable[..., Any]:
        def checked(*args: Any, **kwargs: Any) -> Any:
            values = [a for a in args if not isinstance(a, Context)]
            ints = [a for a in (*values[1:], *kwargs.values()) if isinstance(a, int)]
            if name == "center" and ints:
                self._check_size(max(ints), name)
            if name in ("indent", "wordwrap") and ints and isinstance(values[0], str):
                text = values[0]
                self._check_size(len(text) + (text.count("\n") + 1) * max(ints), name)
            if (
                name == "format"
                and values
                and isinstance(values[0], str)
                and ("*" in values[0] or _WIDTH.search(values[0]))
            ):
                raise self._too_big("a format filter with a huge or '*' width")
            if name == "replace" and len(values) >= 3 and all(isinstance(v, str) for v in values[:3]):
                text, old, new = (str(v) for v in values[:3])
                hits = text.count(old) if old else len(text) + 1
                self._check_size(len(text) + hits * max(0, len(new) - len(old)), "replace")
            return func(*args, **kwargs)

        for attr in ("jinja_pass_arg",):  # keep @pass_eval_context / @pass_environment markers
            if hasattr(func, attr):
                setattr(checked, attr, getattr(func, attr))
        return checked


def render_bounded(chunks: Iterator[str], max_output: int) -> str:
    """Join a template's output stream, stopping as soon as it passes `max_output` characters."""
    out: list[str] = []
    total = 0
    for chunk in chunks:
        total += len(chunk)
        if total > max_output:
            raise SecurityError(f"{LIMIT_PREFIX} output over {max_output} characters")
        out.append(chunk)
    return "".join(out)
