"""Parquet files, written streaming with bounded memory, and read back one row group at a time.

Why a room of its own: a job's results (`spec.output.format: parquet`, batch/outputs.py) and the FOCUS cost export
(reports/parquet.py) are written here, and the cascade reads an upstream's results.parquet back (cascade/source.py);
this package is the only importer of the Parquet library (an import-linter contract).

Why arro3 (arro3-core, arro3-io: Arrow and Parquet from the Rust crates, ~34 MB installed) and not pyarrow (~130 MB
installed): the operator's image carries it. Columns are built from Python lists, except vectors, which go from
float32 bytes straight into a fixed-size list column (no per-float object).

| kind        | Parquet/Arrow type                 | values given                                         |
| ----------- | ---------------------------------- | ---------------------------------------------------- |
| `string`    | utf8                               | str or None; anything else as its JSON text          |
| `int64`     | int64                              | int or None                                          |
| `decimal`   | decimal128(38, 18)                 | decimal text (exact, never a float) or None          |
| `timestamp` | timestamp(ms, UTC)                 | whole seconds since the epoch or None                |
| `vector`    | fixed_size_list<float32>[dims]     | little-endian float32 bytes of `dims` values or None |
"""

from barge.columnar.reader import read_rows
from barge.columnar.writer import Column, vector_bytes, write_parquet

__all__ = ["Column", "read_rows", "vector_bytes", "write_parquet"]
