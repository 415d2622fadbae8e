"""One Parquet file from batches of column values, streamed: one batch in memory at a time, plus the row group
the Parquet writer is encoding (`row_group` rows, compressed pages). arro3 is imported when a file is written, not
with this module: a process that never writes Parquet (most operator processes, every planner) does not carry its
~9 MB."""

from __future__ import annotations

import array
import base64
import binascii
import sys
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, BinaryIO, Literal

import orjson

if TYPE_CHECKING:
    from arro3.core import Array, DataType, RecordBatch

Kind = Literal["string", "int64", "decimal", "timestamp", "vector"]

#: Rows per row group: a group is held (encoded) until it is complete. 2,000 rows of 1,536-dimension vectors are
#: 12 MB before compression; of 4 KB texts, 8 MB.
ROW_GROUP = 2000
PRECISION, SCALE = 38, 18


@dataclass(frozen=True)
class Column:
    name: str
    kind: Kind
    dims: int = 0
    """vector: the values in each vector."""

    def arrow_type(self) -> DataType:
        from arro3.core import DataType, Field

        if self.kind == "string":
            return DataType.string()
        if self.kind == "int64":
            return DataType.int64()
        if self.kind == "decimal":
            return DataType.decimal128(PRECISION, SCALE)
        if self.kind == "timestamp":
            return DataType.timestamp("ms", tz="UTC")  # Parquet has no seconds unit
        return DataType.list(Field("item", DataType.float32(), nullable=False), list_size=self.dims)


def vector_bytes(value: Any) -> bytes | None:
    """An embedding as little-endian float32 bytes: from a JSON list of numbers, or from base64 text (OpenAI's
    `encoding_format: base64`, already little-endian float32). None when it is neither (an untrusted answer)."""
    if isinstance(value, str):
        try:
            raw = base64.b64decode(value, validate=True)
        except (binascii.Error, ValueError):
            return None
        return raw if len(raw) % 4 == 0 else None
    if not isinstance(value, list) or any(isinstance(v, bool) for v in value):
        return None
    try:
        floats = array.array("f", value)
    except (TypeError, OverflowError):
        return None
    if sys.byteorder == "big":
        floats.byteswap()
    return floats.tobytes()


def _strings(values: list[Any]) -> list[str | None]:
    return [v if v is None or isinstance(v, str) else orjson.dumps(v).decode() for v in values]


def _array(column: Column, values: list[Any]) -> Array:
    from arro3.core import Array, DataType, fixed_size_list_array

    kind = column.kind
    if kind == "string":
        return Array(_strings(values), type=DataType.string())
    if kind == "int64":
        return Array(values, type=DataType.int64())
    if kind == "decimal":  # exact: decimal text cast by Arrow, never through a float
        return Array(_strings(values), type=DataType.string()).cast(column.arrow_type())
    if kind == "timestamp":
        millis = [None if v is None else v * 1000 for v in values]
        return Array(millis, type=DataType.int64()).cast(column.arrow_type())
    empty = bytes(4 * column.dims)
    flat = b"".join(empty if v is None else v for v in values)
    mask = Array([v is None for v in values], type=DataType.bool())
    return fixed_size_list_array(
        Array.from_buffer(array.array("f", flat)), column.dims, type=column.arrow_type(), mask=mask
    )


def write_parquet(
    out: BinaryIO | str,
    columns: Sequence[Column],
    batches: Iterable[Sequence[list[Any]]],
    metadata: dict[str, str] | None = None,
    row_group: int = ROW_GROUP,
) -> int:
    """Write the batches (each one list of values per column, in `columns` order, all of one length) as one
    zstd-compressed Parquet file; returns the rows written. A vector of another length than its column's `dims`
    is a ValueError (the caller checks them first)."""
    from arro3.core import Field, RecordBatch, RecordBatchReader, Schema
    from arro3.io import write_parquet as _write

    schema = Schema([Field(c.name, c.arrow_type(), nullable=True) for c in columns], metadata=metadata or {})
    written = [0]

    def records() -> Iterator[RecordBatch]:
        for values in batches:
            for column, data in zip(columns, values, strict=True):
                if column.kind == "vector" and any(v is not None and len(v) != 4 * column.dims for v in data):
                    raise ValueError(f"column {column.name}: a vector is not {column.dims} float32 values")
            written[0] += len(values[0]) if values else 0
            yield RecordBatch.from_arrays([_array(c, v) for c, v in zip(columns, values, strict=True)], schema=schema)

    _write(
        RecordBatchReader.from_batches(schema, records()),
        out,
        compression="zstd(1)",
        max_row_group_size=row_group,
    )
    return written[0]
