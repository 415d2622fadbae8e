"""results.jsonl and failures.jsonl, written from the ledger in line order, streamed (or, for
`spec.output.format: parquet`, results.parquet and failures.parquet from the same rows: batch/outputs_parquet.py).

Every input line appears in exactly one of the two: succeeded and refused items in results.jsonl, invalid
and failed items in failures.jsonl (with the line number and the reason); except invalid lines past the policy's
ledger.listedInvalidLines, which were counted, not stored (batch/capacity.py): failures.jsonl ends with one line
`{"status": "invalid", "unlisted": K, ...}` that says how many there were.

Each file reads its states one at a time, each in line order, merged here: `ix_items_state` (job, state, line)
then serves every page in order. Asked for two states at once, PostgreSQL read every remaining item of both and
sorted them for each page of 5,000 (quadratic: 1.3-2 s of server time for 100,000 results).
"""

from __future__ import annotations

import heapq
from collections.abc import Iterator
from itertools import islice
from operator import itemgetter
from typing import Any

import orjson

from barge.batch import outputs_parquet
from barge.batch.outputs_parquet import JSONL, Form
from barge.batch.structured import output_json
from barge.ledger import Ledger
from barge.providers.content import unpack
from barge.storage import StoragePolicy, join, write_lines, write_stream

RESULT_STATES = ("succeeded", "refused")
FAILURE_STATES = ("invalid", "failed")
RESULT_COLUMNS = (
    "item_id, custom_id, state, output, input_tokens, output_tokens, cache_read_tokens, "
    "cache_write_tokens, via, attempts"
)


#: Rows per page read: results carry their output, up to max_tokens x 4 characters each; at the ledger's 5,000 a
#: page of 4 KB results was 20 MB for each state, the largest step of a job's memory after its ingestion (C2).
RESULT_PAGE = 500


def _in_line_order(
    ledger: Ledger, job: str, columns: str, states: tuple[str, ...], page_size: int = RESULT_PAGE
) -> Iterator[tuple[Any, ...]]:
    """`ledger.iter_items` of the states, one state per query, merged by line (lines are unique in a job)."""
    pages = (ledger.iter_items(job, columns, (s,), page_size=page_size) for s in states)
    return heapq.merge(*pages, key=itemgetter(0))


def result_rows(ledger: Ledger, job: str, structured: bool = False) -> Iterator[dict[str, Any]]:
    """`structured`: the job asked for spec.request.responseFormat, so every succeeded output was checked against
    it (batch/structured.py) and is written parsed too, as `output_json`. Content kept beside the text (tool calls,
    blocks, stop reasons, an embedding: providers/content.py) is written beside `output`."""
    for _, item_id, cid, state, output, tin, tout, tcr, tcw, via, attempts in _in_line_order(
        ledger, job, RESULT_COLUMNS, RESULT_STATES
    ):
        text, kept = unpack(output or "")
        line: dict[str, Any] = {"id": item_id, "custom_id": cid, "status": state, "output": text}
        if structured and state == "succeeded":
            line["output_json"] = output_json(text)
        yield {
            **line,
            **kept,
            "usage": {
                "input_tokens": tin,
                "output_tokens": tout,
                "cache_read_tokens": tcr,
                "cache_write_tokens": tcw,
            },
            "via": via or "batch",
            "attempt": attempts,
        }


def result_lines(ledger: Ledger, job: str, structured: bool = False) -> Iterator[bytes]:
    return (orjson.dumps(row) for row in result_rows(ledger, job, structured))


def failure_rows(ledger: Ledger, job: str) -> Iterator[dict[str, Any]]:
    for line, item_id, cid, state, reason, error_type in _in_line_order(
        ledger, job, "item_id, custom_id, state, reason, error_type", FAILURE_STATES
    ):
        yield (
            {
                "line": line,
                "id": item_id,
                "custom_id": None if cid.startswith("#") else cid,
                "status": state,
                "reason": reason,
                "error_type": error_type,
            }
        )
    row = ledger.job(job) or {}
    unlisted = int(row.get("unlisted") or 0)
    if unlisted:
        yield (
            {
                "line": None,
                "id": None,
                "custom_id": None,
                "status": "invalid",
                "unlisted": unlisted,
                "reason": f"and {unlisted} more invalid lines, counted but not listed (the admin's policy lists the "
                "first ledger.listedInvalidLines of a job; the input file has them all)",
                "error_type": "unlisted",
            }
        )


def failure_lines(ledger: Ledger, job: str) -> Iterator[bytes]:
    return (orjson.dumps(row) for row in failure_rows(ledger, job))


def first_vector_dims(ledger: Ledger, job: str, look: int = 100) -> int:
    """The length of the job's first vector among its first `look` succeeded items (0: none has one)."""
    rows = ledger.iter_items(job, "output", ("succeeded",), page_size=look)
    try:
        kept = ({"embedding": unpack(out or "")[1].get("embedding")} for _, out in islice(rows, look))
        return outputs_parquet.first_dims(kept)
    finally:
        rows.close()  # type: ignore[attr-defined]


def write_outputs(
    ledger: Ledger,
    job: str,
    output_url: str,
    policy: StoragePolicy,
    structured: bool = False,
    form: Form = JSONL,
) -> tuple[int, int]:
    """Both files; how many lines (rows) each has."""
    if form.format == "parquet":
        dims = form.dims if form.dims is not None or not form.vectors else first_vector_dims(ledger, job)
        ok = write_stream(
            join(output_url, "results.parquet"),
            lambda out: outputs_parquet.write_results(
                out, result_rows(ledger, job, structured), form, structured, dims
            ),
            policy,
        )
        bad = write_stream(
            join(output_url, "failures.parquet"),
            lambda out: outputs_parquet.write_failures(out, failure_rows(ledger, job)),
            policy,
        )
        return ok, bad
    ok = write_lines(join(output_url, "results.jsonl"), result_lines(ledger, job, structured), policy)
    bad = write_lines(join(output_url, "failures.jsonl"), failure_lines(ledger, job), policy)
    return ok, bad
