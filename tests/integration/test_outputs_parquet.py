"""results.parquet and failures.parquet (`spec.output.format: parquet`, batch/outputs_parquet.py) on both ledger
backends: the same rows as results.jsonl and failures.jsonl of the same job, in the same order, typed; the vector a
fixed-size float32 list column. Read back with pyarrow (a second, independent Parquet implementation: Barge writes
with arro3) and with barge.columnar's own reader."""

from __future__ import annotations

import array
import base64
import json
import random
import subprocess
import sys
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from barge.batch.outputs import write_outputs
from barge.batch.outputs_parquet import Form, result_from_row
from barge.columnar import read_rows
from barge.ledger import ItemUpdate, Ledger
from barge.providers.content import embedding_output, pack
from barge.storage import StoragePolicy

N = 1_213  # over two pages of outputs (500 rows each)
DIMS = 8


def vector(i: int) -> list[float]:
    return [float(i) + k / 8 for k in range(DIMS)]  # exact in float32


def b64(values: list[float]) -> str:
    return base64.b64encode(array.array("f", values).tobytes()).decode()


def embeddings_job(ledger: Ledger, job: str) -> dict[int, str]:
    """N items: most vectors as JSON lists, some as base64; a few answers that are no vector of DIMS numbers; the
    rest refused, invalid, failed. Returns each line's state."""
    ledger.ensure_job(job, "h")
    ledger.add_items(job, ({"custom_id": f"c{i}", "line": i, "state": "pending"} for i in range(1, N + 1)))
    rng = random.Random(5)
    states = {i: rng.choice(("succeeded",) * 6 + ("refused", "invalid", "failed")) for i in range(1, N + 1)}
    updates = []
    for i, state in states.items():
        output = None
        if state == "succeeded":
            value: Any = b64(vector(i)) if i % 5 == 0 else vector(i)
            if i % 97 == 0:
                value = vector(i)[:3]  # too short: an untrusted answer
            if i % 89 == 0:
                value = ["not", "numbers"]
            output = embedding_output(value)
        elif state == "refused":
            output = "refused text"
        updates.append(ItemUpdate(f"c{i}", state, "e", f"r{i}", 1, "batch", output, (i, 0, 0, 0)))
    ledger.apply(job, updates)
    return states


def jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(x) for x in path.read_text().splitlines()]


def test_embeddings_as_parquet_hold_the_jsonl_rows_with_vectors_typed(ledger_url: str, tmp_path: Path) -> None:
    ledger = Ledger(ledger_url)
    job = "ns/emb"
    states = embeddings_job(ledger, job)
    counts = write_outputs(ledger, job, str(tmp_path / "j"), StoragePolicy())
    assert write_outputs(ledger, job, str(tmp_path / "p"), StoragePolicy(), False, Form("parquet", True)) == counts
    assert sorted(p.name for p in (tmp_path / "p").iterdir()) == ["failures.parquet", "results.parquet"]

    table = pq.read_table(tmp_path / "p" / "results.parquet")
    kind = table.schema.field("embedding").type
    assert pa.types.is_fixed_size_list(kind), kind
    assert kind.list_size == DIMS
    assert pa.types.is_float32(kind.value_type)
    assert pa.types.is_int64(table.schema.field("input_tokens").type)
    rows = table.to_pylist()
    lines = jsonl(tmp_path / "j" / "results.jsonl")
    assert (
        [r["custom_id"] for r in rows]
        == [r["custom_id"] for r in lines]
        == [f"c{i}" for i in sorted(states) if states[i] in ("succeeded", "refused")]
    )
    checked = invalid = 0
    for row, line in zip(rows, lines, strict=True):
        i = int(row["custom_id"][1:])
        assert row["input_tokens"] == line["usage"]["input_tokens"] == i
        assert (row["status"], row["output"], row["via"], row["attempt"]) == (
            line["status"], line["output"], line["via"], line["attempt"]
        )  # fmt: skip
        if line["status"] == "refused":
            assert row["embedding"] is None
            assert row["embedding_invalid"] is None
        elif i % 97 == 0 or i % 89 == 0:  # kept whole, beside a null vector
            assert row["embedding"] is None
            assert json.loads(row["embedding_invalid"]) == line["embedding"]
            invalid += 1
        else:
            assert row["embedding"] == vector(i)
            want = line["embedding"] if isinstance(line["embedding"], list) else vector(i)  # base64 in jsonl
            assert row["embedding"] == want
            checked += 1
    assert checked > 500
    assert invalid >= 2

    back = [result_from_row(r) for r in read_rows(str(tmp_path / "p" / "results.parquet"))]
    for got, line in zip(back, lines, strict=True):  # the reader gives the jsonl line back, vectors as floats
        if isinstance(line.get("embedding"), str):  # base64 in results.jsonl, floats in the column
            line["embedding"] = vector(int(line["custom_id"][1:]))
        assert got == line
    failures = pq.read_table(tmp_path / "p" / "failures.parquet").to_pylist()
    assert {row.pop("unlisted") for row in failures} == {None}  # a column of every row, null but in the last
    assert failures == jsonl(tmp_path / "j" / "failures.jsonl")
    ledger.close()


def test_chat_results_keep_tool_calls_output_json_and_stop_reasons(tmp_path: Path) -> None:
    ledger = Ledger(str(tmp_path / "l.db"))
    job = "ns/chat"
    ledger.ensure_job(job, "h")
    ledger.add_items(job, ({"custom_id": f"c{i}", "line": i, "state": "pending"} for i in range(1, 4)))
    call = [{"id": "t1", "type": "function", "function": {"name": "route", "arguments": '{"complex": true}'}}]
    ledger.apply(
        job,
        [
            ItemUpdate("c1", "succeeded", output='{"complex": false}', attempts=1, usage=(3, 4, 1, 0)),
            ItemUpdate("c2", "succeeded", output=pack("", {"tool_calls": call, "finish_reason": "tool_calls"})),
            ItemUpdate("c3", "succeeded", output=pack("cut", {"stop_reason": ["odd", 1]})),  # untrusted shape
        ],
    )
    write_outputs(ledger, job, str(tmp_path / "j"), StoragePolicy(), True)
    write_outputs(ledger, job, str(tmp_path / "p"), StoragePolicy(), True, Form("parquet"))
    table = pq.read_table(tmp_path / "p" / "results.parquet")
    assert "embedding" not in table.schema.names
    rows = table.to_pylist()
    assert json.loads(rows[0]["output_json"]) == {"complex": False}
    assert (rows[0]["input_tokens"], rows[0]["output_tokens"], rows[0]["cache_read_tokens"]) == (3, 4, 1)
    assert json.loads(rows[1]["tool_calls"]) == call
    assert rows[1]["finish_reason"] == "tool_calls"
    assert json.loads(rows[2]["stop_reason"]) == ["odd", 1]  # not a string: its JSON text
    back = [result_from_row(r) for r in read_rows(str(tmp_path / "p" / "results.parquet"))]
    lines = jsonl(tmp_path / "j" / "results.jsonl")
    assert back[:2] == lines[:2]
    assert back[2]["stop_reason"] == '["odd",1]'
    assert lines[2]["stop_reason"] == ["odd", 1]
    ledger.close()


def test_a_failed_parquet_write_leaves_no_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Whole or nothing, as for JSON lines: a write that fails half way leaves neither the file nor its .partial."""
    ledger = Ledger(str(tmp_path / "l.db"))
    job = "ns/emb"
    embeddings_job(ledger, job)
    import barge.batch.outputs_parquet as module

    real = module._page

    def breaks(rows: list[dict[str, Any]], columns: Any, dims: int) -> list[list[Any]]:
        if int(rows[0]["custom_id"][1:]) > 600:
            raise RuntimeError("the store went away")
        return real(rows, columns, dims)

    monkeypatch.setattr(module, "_page", breaks)
    with pytest.raises(Exception, match="the store went away"):
        write_outputs(ledger, job, str(tmp_path / "p"), StoragePolicy(), False, Form("parquet", True))
    assert list((tmp_path / "p").iterdir()) == []
    ledger.close()


def test_arro3_is_loaded_only_when_parquet_is_written() -> None:
    """~9 MB of every operator and planner process: the runner, the cascade and the reports import barge.columnar,
    which loads arro3 only when it writes or reads a file."""
    code = (
        "import sys; import barge.batch.runner, barge.cascade.source, barge.reports.export, barge.operator.handlers; "
        "print(sorted(m for m in sys.modules if m.startswith('arro3')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.strip() == "[]", out.stdout
