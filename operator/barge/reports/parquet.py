"""FOCUS rows as one Parquet file (`barge report focus --format parquet`), typed as FOCUS 1.2's columns are:
Decimal columns as decimal128(38, 18) (exact, never a float), DateTime columns as UTC timestamps, the token counts
of Barge's x_ columns as int64, every other column (KeyValue ones as their JSON object) as a string; an empty
value is a null. The FOCUS version is in the file's metadata and in its x_FocusVersion column.

pyarrow is an optional extra (`pip install 'barge-operator[parquet]'`): ~170 MB installed, it would more than
double Barge's image, whose daily export is CSV. Without it this says so instead of writing anything.
"""

from __future__ import annotations

import importlib
import io
from collections.abc import Sequence
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

from barge.reports import focus

PRECISION, SCALE = 38, 18
QUANTUM = Decimal(1).scaleb(-SCALE)
MISSING = "writing Parquet needs pyarrow: pip install 'barge-operator[parquet]' (Barge's image writes CSV only)"


class ParquetUnavailable(RuntimeError):
    """pyarrow is not installed."""


def _pyarrow() -> tuple[Any, Any]:
    try:
        return importlib.import_module("pyarrow"), importlib.import_module("pyarrow.parquet")
    except ImportError as exc:
        raise ParquetUnavailable(MISSING) from exc


def available() -> bool:
    try:
        _pyarrow()
    except ParquetUnavailable:
        return False
    return True


def _column(pa: Any, name: str, values: list[str]) -> tuple[Any, list[Any]]:
    if name in focus.DECIMALS:
        return pa.decimal128(PRECISION, SCALE), [Decimal(v).quantize(QUANTUM) if v else None for v in values]
    if name in focus.DATETIMES:
        return pa.timestamp("s", tz="UTC"), [
            datetime.strptime(v, focus.DATETIME_FORMAT).replace(tzinfo=UTC) if v else None for v in values
        ]
    if name in focus.INTEGERS:
        return pa.int64(), [int(v) if v else None for v in values]
    return pa.string(), [v or None for v in values]


def to_parquet(rows: Sequence[dict[str, str]]) -> bytes:
    """The rows (focus.build_rows) as a Parquet file of every column of focus.COLUMNS, in order, zstd-compressed."""
    pa, pq = _pyarrow()
    fields, arrays = [], []
    for name in focus.COLUMNS:
        kind, data = _column(pa, name, [row.get(name, "") for row in rows])
        fields.append(pa.field(name, kind, nullable=True))
        arrays.append(pa.array(data, type=kind))
    schema = pa.schema(fields, metadata={"focus_version": focus.FOCUS_VERSION, "generator": "barge"})
    buffer = io.BytesIO()
    pq.write_table(pa.Table.from_arrays(arrays, schema=schema), buffer, compression="zstd")
    return buffer.getvalue()
