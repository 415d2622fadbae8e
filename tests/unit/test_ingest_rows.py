"""Ingestion's ledger rows agree with the routing table: its hot path for succeeded results skips `route` (no
ItemUpdate per result), so each outcome's row is checked against `route`'s answer here."""

from __future__ import annotations

import pytest

from barge.batch.ingest import _as_row, _row
from barge.batch.routing import route
from barge.providers.base import Outcome, Result, Usage


@pytest.mark.parametrize("outcome", list(Outcome))
@pytest.mark.parametrize("attempts", [0, 2])
def test_rows_follow_the_routing_table(outcome: Outcome, attempts: int) -> None:
    result = Result("c1", outcome, text="out", usage=Usage(5, 6, 7, 8), error_type="e", message="m")
    expected = _as_row(route(result, attempts, 3))
    row = _row(result, attempts, 3)
    if outcome in (Outcome.SUCCEEDED, Outcome.REFUSED):  # results keep their text and usage, via the batch
        assert row == (*expected[:5], "batch", "out", 5, 6, 7, 8)
    elif outcome is Outcome.INVALID_OUTPUT:  # a broken structured answer was paid for: its usage, not its text
        assert row == (*expected[:5], "batch", None, 5, 6, 7, 8)
    else:
        assert row == expected
