"""Several processes opening one empty PostgreSQL ledger at once (shards or replicas starting together, as a
chart install does): each makes or upgrades the schema in turn (Ledger._schema_lock), so every one opens it.
Without the lock all but one failed on PostgreSQL's unique type names (bench/bench_shards.py found it)."""

from __future__ import annotations

import subprocess
import sys
import time

from tests.conftest import REPO, fresh_database

OPENERS = 6
#: Imported first, then all released at once (their stdin closed), so that they really open the ledger together.
OPEN = "import sys; from barge.ledger import Ledger; sys.stdin.read(); Ledger(sys.argv[1]).close(); print('opened')"


def test_six_processes_open_one_empty_postgresql_ledger_at_once(postgres_url: str) -> None:
    url = fresh_database(postgres_url, "open")
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", OPEN, url], cwd=REPO, env={"PYTHONPATH": str(REPO / "operator")},
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )
        for _ in range(OPENERS)
    ]  # fmt: skip
    time.sleep(3.0)  # every one has imported Barge and waits
    for p in procs:
        assert p.stdin is not None
        p.stdin.close()
    for p in procs:
        p.wait(120)
    outcomes = [(p.stdout.read(), p.stderr.read()) for p in procs if p.stdout and p.stderr]
    assert [p.returncode for p in procs] == [0] * OPENERS, [err[-800:] for _, err in outcomes]
    assert [out.strip() for out, _ in outcomes] == ["opened"] * OPENERS
