"""results.parquet and failures.parquet (`spec.output.format: parquet`): the rows of results.jsonl and
failures.jsonl (batch/outputs.py) as typed columns, written in pages of RESULT_PAGE rows, so memory stays one page
plus the row group being encoded, whatever the job's size.

results.parquet's columns, in order (a column is there for every job of its kind, null where a row has no value):

| column | type | for |
| --- | --- | --- |
| id, custom_id, status, output | string | every job |
| output_json | string (the JSON text) | jobs with spec.request.responseFormat |
| embedding | fixed_size_list<float32>[dims] | embeddings jobs |
| embedding_invalid | string (the answer's JSON) | embeddings jobs: a vector that is not `dims` numbers |
| content, tool_calls | string (JSON text) | answers with more than one text block, or tool calls |
| stop_reason, finish_reason | string | answers that stopped for another reason than the ordinary one |
| input_tokens, output_tokens, cache_read_tokens, cache_write_tokens, attempt | int64 | every job |
| via | string | every job |

`dims` is spec.request.dimensions, else the length of the job's first vector. An answer's vector of another length,
or one that is not numbers (an untrusted provider answer), is kept whole in `embedding_invalid`, never dropped.
failures.parquet: line, unlisted (int64); id, custom_id, status, reason, error_type (string).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from itertools import islice
from typing import Any, BinaryIO

import orjson

from barge.api.batchjob import LLMBatchJobSpec
from barge.columnar import Column, vector_bytes, write_parquet

#: Rows per Parquet batch (outputs.RESULT_PAGE: the ledger's page).
PAGE = 500
USAGE = ("input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens")
JSON_TEXT = ("output_json", "content", "tool_calls")


@dataclass(frozen=True)
class Form:
    format: str = "jsonl"
    vectors: bool = False
    """An embeddings job: the embedding columns are written."""
    dims: int | None = None
    """spec.request.dimensions; None: the first vector's length."""

    @classmethod
    def of(cls, spec: LLMBatchJobSpec) -> Form:
        return cls(spec.output.format, spec.request.endpoint == "embeddings", spec.request.dimensions)


JSONL = Form()


def first_dims(rows: Iterable[dict[str, Any]]) -> int:
    """The length of the first vector among `rows` (0 when none has one)."""
    for row in rows:
        vector = vector_bytes(row.get("embedding"))
        if vector:
            return len(vector) // 4
    return 0


def result_columns(form: Form, structured: bool, dims: int) -> list[Column]:
    columns = [Column(name, "string") for name in ("id", "custom_id", "status", "output")]
    if structured:
        columns.append(Column("output_json", "string"))
    if form.vectors:
        columns += [Column("embedding", "vector", dims), Column("embedding_invalid", "string")]
    columns += [Column(name, "string") for name in ("content", "tool_calls", "stop_reason", "finish_reason")]
    columns += [Column(name, "int64") for name in USAGE]
    columns += [Column("via", "string"), Column("attempt", "int64")]
    return columns


def _value(row: dict[str, Any], name: str) -> Any:
    if name in USAGE:
        return (row.get("usage") or {}).get(name)
    value = row.get(name)
    if name in JSON_TEXT and value is not None:
        return orjson.dumps(value).decode()
    return value


def _page(rows: list[dict[str, Any]], columns: list[Column], dims: int) -> list[list[Any]]:
    values: list[list[Any]] = [[] for _ in columns]
    for row in rows:
        vector, invalid = None, None
        if "embedding" in row:
            vector = vector_bytes(row["embedding"])
            if vector is None or len(vector) != 4 * dims:
                vector, invalid = None, orjson.dumps(row["embedding"]).decode()
        for i, column in enumerate(columns):
            if column.name == "embedding":
                values[i].append(vector)
            elif column.name == "embedding_invalid":
                values[i].append(invalid)
            else:
                values[i].append(_value(row, column.name))
    return values


def _pages(rows: Iterator[dict[str, Any]], size: int = PAGE) -> Iterator[list[dict[str, Any]]]:
    while page := list(islice(rows, size)):
        yield page


def write_results(
    out: BinaryIO, rows: Iterable[dict[str, Any]], form: Form, structured: bool, dims: int | None = None
) -> int:
    """`rows`: outputs.result_rows. `dims`: the vector length when the caller knows it (else form.dims, else the
    first page's first vector, else 0)."""
    pages = _pages(iter(rows))
    first = next(pages, [])
    size = dims if dims is not None else form.dims if form.dims is not None else first_dims(first)
    columns = result_columns(form, structured, size)

    def batches() -> Iterator[list[list[Any]]]:
        if first:
            yield _page(first, columns, size)
        for page in pages:
            yield _page(page, columns, size)

    return write_parquet(out, columns, batches(), {"generator": "barge"})


def result_from_row(row: dict[str, Any]) -> dict[str, Any]:
    """A results.parquet row (columnar.read_rows) as the results.jsonl line it stands for: usage nested again, the
    JSON text columns parsed, nulls of columns a line would not have left out."""
    line: dict[str, Any] = {}
    for name, value in row.items():
        if name in USAGE:
            line.setdefault("usage", {})[name] = value
        elif name == "output_json":  # a structured job's succeeded lines all have it, null when not JSON
            if row.get("status") == "succeeded":
                line[name] = None if value is None else orjson.loads(value)
        elif value is None and name not in ("id", "custom_id", "status", "output", "via", "attempt"):
            continue
        elif name in JSON_TEXT or name == "embedding_invalid":
            line["embedding" if name == "embedding_invalid" else name] = orjson.loads(value)
        else:
            line[name] = value
    return line


FAILURE_COLUMNS = [
    Column("line", "int64"),
    *(Column(name, "string") for name in ("id", "custom_id", "status", "reason", "error_type")),
    Column("unlisted", "int64"),
]


def write_failures(out: BinaryIO, rows: Iterable[dict[str, Any]]) -> int:
    def batches() -> Iterator[list[list[Any]]]:
        for page in _pages(iter(rows)):
            yield [[row.get(c.name) for row in page] for c in FAILURE_COLUMNS]

    return write_parquet(out, FAILURE_COLUMNS, batches(), {"generator": "barge"})
