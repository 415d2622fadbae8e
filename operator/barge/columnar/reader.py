"""Rows of a Parquet file as dicts, one record batch in memory at a time."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, BinaryIO

BATCH = 1000
MAGIC = b"PAR1"
#: What a pyo3 panic is not: arro3 panics (a BaseException) on some corrupt files instead of raising.
PASS = (KeyboardInterrupt, SystemExit, GeneratorExit)


def _starts_as_parquet(source: BinaryIO | str) -> bool:
    if isinstance(source, str):
        with open(source, "rb") as handle:
            return handle.read(4) == MAGIC
    head = source.read(4)
    source.seek(0)
    return head == MAGIC


def read_rows(source: BinaryIO | str, batch_size: int = BATCH) -> Iterator[dict[str, Any]]:
    """Each row as {column: value}: strings, ints, None; a vector as a list of floats. A file that is not Parquet
    is a ValueError naming why."""
    from arro3.io import read_parquet  # on use: see writer.py

    if not _starts_as_parquet(source):
        raise ValueError("not a Parquet file: it does not begin with PAR1")
    try:
        reader = iter(read_parquet(source, batch_size=batch_size))
    except BaseException as exc:  # arro3 raises plain Exceptions, or panics, on a corrupt file
        if isinstance(exc, PASS):
            raise
        raise ValueError(f"not a Parquet file: {exc}") from None
    while True:
        try:
            batch = next(reader)
        except StopIteration:
            return
        except BaseException as exc:
            if isinstance(exc, PASS):
                raise
            raise ValueError(f"a corrupt Parquet file: {exc}") from None
        names = batch.column_names
        columns = [batch.column(i).to_pylist() for i in range(batch.num_columns)]
        for values in zip(*columns, strict=True):
            yield dict(zip(names, values, strict=True))
