"""ledger/backoff.py on SQLite (the shards' PostgreSQL runs it in tests/integration/test_shared_admission.py): the
shared backoff keeps the later end and the higher strikes of two writers, and is cleared only once passed."""

from __future__ import annotations

from pathlib import Path

from barge.ledger import Ledger, backoff


def test_the_backoff_keeps_the_later_end_and_the_higher_strikes_and_clears_once_passed(tmp_path: Path) -> None:
    ledger = Ledger(str(tmp_path / "l.db"))
    assert backoff.read(ledger, "dep") is None
    backoff.strike(ledger, "dep", 2, 500.0)
    backoff.strike(ledger, "dep", 1, 400.0)  # another shard's older news: kept as the later and the higher
    assert backoff.read(ledger, "dep") == backoff.Backoff(2, 500.0)
    backoff.strike(ledger, "dep", 3, 900.0)
    assert backoff.read(ledger, "dep") == backoff.Backoff(3, 900.0)
    assert backoff.read(ledger, "other") is None
    backoff.clear(ledger, "dep", 899.0)  # not yet passed: kept
    assert backoff.read(ledger, "dep") == backoff.Backoff(3, 900.0)
    backoff.clear(ledger, "dep", 900.0)
    assert backoff.read(ledger, "dep") is None
    ledger.close()
