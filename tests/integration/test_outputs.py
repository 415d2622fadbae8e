"""results.jsonl and failures.jsonl (batch/outputs.py) on both backends: each file holds its states' items in line
order, every item once, whatever the states' mix, across pages of the ledger's reads (5,000 lines each)."""

from __future__ import annotations

import json
import random
from pathlib import Path

from barge.batch.outputs import FAILURE_STATES, RESULT_STATES, write_outputs
from barge.ledger import ItemUpdate, Ledger
from barge.storage import StoragePolicy

N = 12_007  # over two pages of `Ledger.iter_items`


def test_outputs_are_in_line_order_with_states_interleaved(ledger_url: str, tmp_path: Path) -> None:
    ledger = Ledger(ledger_url)
    job = "ns/outputs"
    ledger.ensure_job(job, "h")
    ledger.add_items(job, ({"custom_id": f"c{i}", "line": i, "state": "pending"} for i in range(1, N + 1)))
    rng = random.Random(3)
    states = {i: rng.choice(("succeeded", "refused", "invalid", "failed", "pending")) for i in range(1, N + 1)}
    ledger.apply(
        job,
        [ItemUpdate(f"c{i}", s, "e", f"r{i}", 1, "batch", f"out {i}") for i, s in states.items() if s != "pending"],
    )

    ok, bad = write_outputs(ledger, job, str(tmp_path / "out"), StoragePolicy())
    results = [json.loads(x) for x in (tmp_path / "out" / "results.jsonl").read_text().splitlines()]
    failures = [json.loads(x) for x in (tmp_path / "out" / "failures.jsonl").read_text().splitlines()]
    expected_results = [i for i in sorted(states) if states[i] in RESULT_STATES]
    expected_failures = [i for i in sorted(states) if states[i] in FAILURE_STATES]
    assert [int(r["custom_id"][1:]) for r in results] == expected_results
    assert [r["status"] for r in results] == [states[i] for i in expected_results]
    assert [r["output"] for r in results] == [f"out {i}" for i in expected_results]
    assert [r["line"] for r in failures] == expected_failures
    assert [r["status"] for r in failures] == [states[i] for i in expected_failures]
    assert (ok, bad) == (len(expected_results), len(expected_failures))
    ledger.close()
