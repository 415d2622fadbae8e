"""FOCUS rows as one Parquet file (`barge report focus --format parquet`), typed as FOCUS 1.2's columns are:
Decimal columns as decimal128(38, 18) (exact, never a float), DateTime columns as UTC timestamps, the token counts
of Barge's x_ columns as int64, every other column (KeyValue ones as their JSON object) as a string; an empty
value is a null. The FOCUS version is in the file's metadata and in its x_FocusVersion column. Written by
barge.columnar (in the image: the operator's daily file can be Parquet too).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any, BinaryIO

from barge.columnar import Column, write_parquet
from barge.reports import focus

SCALE = 18
QUANTUM = Decimal(1).scaleb(-SCALE)
#: Rows per Parquet batch (a day of hourly rows is a few thousand).
BATCH = 5000


def _column(name: str) -> Column:
    if name in focus.DECIMALS:
        return Column(name, "decimal")
    if name in focus.DATETIMES:
        return Column(name, "timestamp")
    if name in focus.INTEGERS:
        return Column(name, "int64")
    return Column(name, "string")


def _values(column: Column, values: list[str]) -> list[Any]:
    if column.kind == "decimal":
        return [str(Decimal(v).quantize(QUANTUM)) if v else None for v in values]
    if column.kind == "timestamp":
        return [
            int(datetime.strptime(v, focus.DATETIME_FORMAT).replace(tzinfo=UTC).timestamp()) if v else None
            for v in values
        ]
    if column.kind == "int64":
        return [int(v) if v else None for v in values]
    return [v or None for v in values]


def write(out: BinaryIO, rows: Sequence[dict[str, str]]) -> int:
    """The rows (focus.build_rows) as a Parquet file of every column of focus.COLUMNS, in order, zstd-compressed."""
    columns = [_column(name) for name in focus.COLUMNS]
    batches = (
        [_values(c, [row.get(c.name, "") for row in rows[start : start + BATCH]]) for c in columns]
        for start in range(0, len(rows), BATCH)
    )
    metadata = {"focus_version": focus.FOCUS_VERSION, "generator": "barge"}
    return write_parquet(out, columns, batches, metadata)
