"""One wave of a cascade: the upstream's final results the downstream has not taken yet, each chosen or not by
`fromJob.select` and, if chosen, made into a downstream item by `fromJob.fields`.

A downstream item keeps its upstream line number, so every wave knows what was taken (the downstream's ledger
rows, of every state) and a restart takes nothing twice. A line `select` turns down leaves no row: it is asked
again next wave (CEL over one result line is cheap; an upstream's outputs are not re-read once taken). A line
whose select or fields fail is an `invalid` row with the CEL error as its reason.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import orjson

from barge.batch.plan import invalid_row
from barge.cascade.select import SelectError, Selector, activation
from barge.cascade.source import Upstream, final_results
from barge.ledger import Ledger
from barge.ledger.schema import TERMINAL

EVERY_STATE = ("pending", "submitting", "submitted", *TERMINAL)


@dataclass
class Wave:
    """What one wave found."""

    read: int = 0
    """Upstream results not taken before, looked at now."""
    chosen: list[tuple[int, bytes]] = field(default_factory=list)
    """(upstream line, the downstream item as JSON), for the planner."""
    invalid: list[dict[str, Any]] = field(default_factory=list)
    """Ledger rows of the lines whose select or fields failed."""
    passed_over: int = 0
    """Lines select turned down (asked again next wave)."""


def taken(ledger: Ledger, key: str) -> set[int]:
    """Upstream lines the downstream already holds, in any state."""
    return {int(row[0]) for row in ledger.iter_items(key, "state", EVERY_STATE)}


def _inputs(up: Upstream, wanted: set[int]) -> dict[int, dict[str, Any]]:
    """The upstream input items of `wanted` lines (their fields), read in one pass of its input."""
    found: dict[int, dict[str, Any]] = {}
    if not wanted:
        return found
    for number, raw in up.lines():
        if number in wanted:
            try:
                item = orjson.loads(raw)
            except orjson.JSONDecodeError:
                item = None
            found[number] = item if isinstance(item, dict) else {}
            if len(found) == len(wanted):
                break
    return found


def wave(ledger: Ledger, key: str, up: Upstream, selector: Selector, id_field: str) -> Wave:
    """The next wave of downstream `key` from `up`."""
    out = Wave()
    results = list(_new(ledger, key, up))
    out.read = len(results)
    inputs = _inputs(up, {int(r["line"]) for r in results})
    for result in results:
        line = int(result["line"])
        fields = inputs.get(line, {})
        names = activation(result, fields)
        try:
            if not selector.chosen(names):
                out.passed_over += 1
                continue
            item = selector.item(result, fields, names, id_field)
            raw = orjson.dumps(item)
        except SelectError as exc:
            out.invalid.append(invalid_row(line, "select_error", str(exc), item_id=_text(result.get("id"))))
            continue
        except TypeError as exc:  # a value orjson cannot write (CEL gave something odd)
            out.invalid.append(invalid_row(line, "select_error", f"fromJob.fields: {exc}", item_id=None))
            continue
        out.chosen.append((line, raw))
    return out


def _new(ledger: Ledger, key: str, up: Upstream) -> Iterator[dict[str, Any]]:
    return final_results(ledger, up, taken(ledger, key))


def _text(value: Any) -> str | None:
    return None if value is None else str(value)
