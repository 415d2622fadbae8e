"""The upstream's result lines so far, read where they are while it runs: its ledger rows.

An upstream item is final once succeeded, refused or failed; its row then holds its output until the upstream
ends and drops its texts (spec.retention.keepOutputsFor), by which time results.jsonl holds them. So a final row
with its output is read from the ledger; one whose output was dropped is read from the upstream's results.jsonl
(results.parquet for an upstream with spec.output.format parquet),
once the upstream is terminal (it is written before the texts are dropped). Rows come in line order, a page at a
time; `skip` (lines the downstream has already taken) is checked before any text is kept. An output stored packed
(tool calls, content blocks: providers/content.py) is read as its text, with its kept keys beside it.
"""

from __future__ import annotations

from collections.abc import Callable, Container, Iterator
from dataclasses import dataclass
from typing import Any

import orjson

from barge.batch.outputs_parquet import result_from_row
from barge.columnar import read_rows
from barge.ledger import Ledger
from barge.providers.content import unpack
from barge.storage import StorageError, StoragePolicy, join, open_binary, read_lines

FINAL = ("succeeded", "refused", "failed")
COLUMNS = "item_id, custom_id, state, output, input_tokens, output_tokens, reason"


@dataclass(frozen=True)
class Upstream:
    """The upstream LLMBatchJob as the downstream's step sees it."""

    name: str
    key: str
    """Its ledger key (namespace/name/uid)."""
    phase: str
    terminal: bool
    output_url: str
    storage: StoragePolicy
    """The policy its results.jsonl is read under (the downstream's namespace's: the same one)."""
    lines: Callable[[], Iterator[tuple[int, bytes]]]
    """Its input lines, for the `input` fields of each result."""
    deadline: float | None = None
    output_format: str = "jsonl"
    """Its spec.output.format: the dropped outputs are read from results.jsonl or results.parquet."""


def final_results(ledger: Ledger, up: Upstream, skip: Container[int]) -> Iterator[dict[str, Any]]:
    """Result lines (id, custom_id, status, output, usage, line, reason) of the upstream's final items not in
    `skip`, in line order as far as the ledger has them; then, for a terminal upstream, the ones whose output
    only results.jsonl still has."""
    dropped: dict[str, tuple[int, Any]] = {}
    for line, item_id, cid, state, output, tin, tout, reason in ledger.iter_items(up.key, COLUMNS, FINAL):
        if line in skip:
            continue
        if state != "failed" and output is None:
            dropped[cid] = (line, item_id)
            continue
        text, kept = unpack(output or "")  # an answer with tool calls or blocks is stored packed
        yield {
            **kept,
            "id": item_id,
            "custom_id": cid,
            "status": state,
            "output": text,
            "usage": {"input_tokens": tin, "output_tokens": tout},
            "line": line,
            "reason": reason or "",
        }
    if not dropped or not up.terminal:
        return
    for result in _written_results(up):
        found = dropped.pop(str(result.get("custom_id")), None)
        if found is not None:
            yield {**result, "line": found[0], "id": result.get("id", found[1])}


def _written_results(up: Upstream) -> Iterator[dict[str, Any]]:
    """The upstream's written result lines, from results.parquet or results.jsonl."""
    if up.output_format == "parquet":
        with open_binary(join(up.output_url, "results.parquet"), up.storage) as handle:
            try:
                yield from (result_from_row(row) for row in read_rows(handle))
            except ValueError as exc:  # Barge wrote it: a file that is not Parquet has no results to give
                raise StorageError(f"{up.output_url}/results.parquet: {exc}") from None
        return
    for _, raw in read_lines(join(up.output_url, "results.jsonl"), up.storage):
        try:
            result = orjson.loads(raw)
        except orjson.JSONDecodeError:  # Barge wrote it; a line that is not JSON is not a result
            continue
        if isinstance(result, dict):
            yield result
