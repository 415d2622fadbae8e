"""FOCUS files from the ledger, written to storage: what `barge report focus` and the operator's daily timer do.

Reads the spend rows of [start, end) (ledger/spend.py: one range of the hour index), builds the rows
(reports/focus.py) and writes one CSV object through barge.storage, so a file:// URL gets the same whole-or-nothing
write and an s3:// or az:// URL the same credentials as a job's output. `barge report focus` also writes Parquet
(reports/parquet.py); the operator's daily file is CSV.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from barge.batch import prices
from barge.ledger import Ledger, spend
from barge.reports import focus, parquet
from barge.storage import StoragePolicy, join, write_lines, write_stream

DAY = 86400


def focus_rows(
    ledger: Ledger,
    table: prices.PriceTable,
    start: float,
    end: float,
    *,
    tenant: str | None = None,
    period: str = "hour",
    billing_account: str = "barge",
) -> list[dict[str, str]]:
    rows = spend.rows_between(ledger, start, end, tenant)
    return focus.build_rows(rows, table, period=period, billing_account=billing_account)


def write_csv(url: str, rows: list[dict[str, str]], policy: StoragePolicy) -> int:
    """The rows as one CSV object at `url`; how many rows."""
    text = focus.to_csv(rows)
    write_lines(url, (line.encode() for line in text.split("\n")[:-1]), policy)  # exact: quoted newlines too
    return len(rows)


def write_parquet(url: str, rows: list[dict[str, str]], policy: StoragePolicy) -> int:
    """The rows as one Parquet object at `url` (reports/parquet.py); how many rows."""
    return write_stream(url, lambda out: parquet.write(out, rows), policy)


def daily_name(day_start: float) -> str:
    return f"focus-{focus.FOCUS_VERSION}-{datetime.fromtimestamp(day_start, UTC):%Y-%m-%d}.csv"


def previous_day(now: float) -> tuple[float, float]:
    """[start, end) of the UTC day before the one holding `now`."""
    today = datetime.fromtimestamp(now, UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    return (today - timedelta(days=1)).timestamp(), today.timestamp()


def export_day(
    ledger: Ledger,
    table: prices.PriceTable,
    prefix: str,
    day: tuple[float, float],
    policy: StoragePolicy,
    *,
    period: str = "hour",
    billing_account: str = "barge",
) -> tuple[str, int]:
    """One day's FOCUS file under `prefix` (focus-1.2-YYYY-MM-DD.csv, rewritten whole if it exists): (url, rows)."""
    url = join(prefix, daily_name(day[0]))
    rows = focus_rows(ledger, table, *day, period=period, billing_account=billing_account)
    return url, write_csv(url, rows, policy)
