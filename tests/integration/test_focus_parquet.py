"""FOCUS 1.2 as Parquet (#31.2): `barge report focus --out x.parquet` (barge.columnar, arro3) writes
the same rows as the CSV with FOCUS's types kept: every Decimal column a decimal128 (exact: the sums equal the
ledger's to the last digit), every DateTime a UTC timestamp, the rest strings, nulls where the CSV is empty. Read
back with pyarrow and checked with test_focus's schema check (the spec's columns, shipped as test data)."""

from __future__ import annotations

import sys
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from barge.cli.main import app
from barge.columnar import read_rows
from barge.ledger import Ledger
from barge.reports import focus
from tests.integration.test_focus import SCHEMA, ledger_cost, problems, ran, read

__all__ = ["ran"]  # the fixture: two jobs of tenant t, one batch and one synchronous


def export(ledger: Ledger, out: Path, *extra: str) -> Any:
    path = ledger.url.removeprefix("sqlite:///")
    return CliRunner().invoke(app, ["report", "focus", "--ledger", path, "--from", "2026-01-01", "--out", str(out),
                                    *extra], env={"COLUMNS": "300"})  # fmt: skip


def as_text(value: Any) -> str:
    """A Parquet value as the CSV writes it (for the schema check and the comparison)."""
    if value is None:
        return ""
    if isinstance(value, datetime):
        assert value.tzinfo is not None
        return value.astimezone(UTC).strftime(focus.DATETIME_FORMAT)
    return str(value)


def test_parquet_keeps_focus_types_and_the_csv_rows(ran: tuple[Ledger, list[tuple[str, str]]], tmp_path: Path) -> None:
    ledger, jobs = ran
    for out in (tmp_path / "focus.parquet", tmp_path / "focus.csv"):
        result = export(ledger, out)
        assert result.exit_code == 0, result.output
    assert "(parquet)" in export(ledger, tmp_path / "again.parquet").output

    table = pq.read_table(tmp_path / "focus.parquet")
    assert table.schema.names == list(focus.COLUMNS)
    assert table.schema.metadata[b"focus_version"] == b"1.2"
    for column in SCHEMA["columns"]:
        kind = table.schema.field(column["name"]).type
        expected = {"Decimal": pa.types.is_decimal, "DateTime": pa.types.is_timestamp}.get(
            column["dataType"], pa.types.is_string
        )
        assert expected(kind), f"{column['name']} ({column['dataType']}) is stored as {kind}"
        if column["dataType"] == "DateTime":
            assert kind.tz == "UTC", column["name"]
    for name in focus.INTEGERS:
        assert pa.types.is_int64(table.schema.field(name).type), name

    parquet_rows = table.to_pylist()
    _, csv_rows = read(tmp_path / "focus.csv")
    assert len(parquet_rows) == len(csv_rows) > 0
    as_csv = [{name: as_text(row[name]) for name in focus.COLUMNS} for row in parquet_rows]
    assert problems(list(focus.COLUMNS), as_csv) == []
    for got, want in zip(as_csv, csv_rows, strict=True):
        for name in focus.COLUMNS:
            if name in focus.DECIMALS and want[name]:
                assert Decimal(got[name]) == Decimal(want[name]), name
            else:
                assert got[name] == want[name], name
    billed, listed, _ = ledger_cost(ledger, jobs)
    assert sum(row["BilledCost"] for row in parquet_rows) == billed > 0
    assert sum(row["ListCost"] for row in parquet_rows) == listed
    assert all(isinstance(row["BilledCost"], Decimal) for row in parquet_rows)  # never a float


def test_parquet_needs_no_pyarrow_and_other_formats_are_refused(
    ran: tuple[Ledger, list[tuple[str, str]]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Barge writes with arro3 (in the image); pyarrow is only this test's reader. With pyarrow unimportable the
    export still writes, and barge.columnar reads the same rows back."""
    ledger, _ = ran
    for name in [m for m in sys.modules if m == "pyarrow" or m.startswith("pyarrow.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "pyarrow", None)  # `import pyarrow` raises ImportError
    out = tmp_path / "focus.parquet"
    result = export(ledger, out)
    assert result.exit_code == 0, result.output
    rows = list(read_rows(str(out)))
    assert export(ledger, tmp_path / "focus.csv").exit_code == 0
    _, csv_rows = read(tmp_path / "focus.csv")
    assert [{n: as_text(r[n]) for n in ("ChargePeriodStart", "x_Requests")} for r in rows] == [
        {n: r[n] for n in ("ChargePeriodStart", "x_Requests")} for r in csv_rows
    ]
    bad = export(ledger, tmp_path / "x.json", "--format", "json")
    assert bad.exit_code == 2
    assert "csv or parquet" in bad.output
