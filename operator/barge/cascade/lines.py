"""An upstream job's input lines, re-read for the `input` fields of its results (the same lines its planner read)."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

Lines = Callable[[], Iterator[tuple[int, bytes]]]


def inline_lines(items: list[dict[str, Any]]) -> Lines:
    return lambda: ((n, json.dumps(item).encode()) for n, item in enumerate(items, start=1))


def text_lines(text: str) -> Lines:
    """Lines of a ConfigMap value, numbered as the planner numbers them (a final newline ends the last line)."""

    def lines() -> Iterator[tuple[int, bytes]]:
        parts = text.encode().removeprefix(b"\xef\xbb\xbf").split(b"\n")
        if parts and parts[-1] == b"":
            parts.pop()
        for n, raw in enumerate(parts, start=1):
            yield n, raw.rstrip(b"\r")

    return lines
