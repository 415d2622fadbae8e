"""`barge run` of an embeddings job (spec.request.endpoint embeddings) on OpenAI: time and peak RSS, one run per
output format (spec.output.format jsonl, the baseline, then parquet), same input, same emulator.

The emulator answers every input with its deterministic vector (emulator/embeddings.py) in its own process; the
job's child process is timed from spawn to exit, peak RSS from wait4's ru_maxrss. What grows with the vectors:
the ledger (each item's vector is stored in its output column) and results.jsonl; the process's memory should not
(results are ingested page by page and written from the ledger in pages of 500).
Sizes: BENCH_EMB_N inputs (default 100000), BENCH_EMB_DIMS floats each (default 256), BENCH_EMB_FORMAT float or
base64 (default float); BENCH_EMB_OUTPUT the output formats, comma-separated (default jsonl,parquet).
"""

from __future__ import annotations

import json
import os
import signal
import sys
import tempfile
from pathlib import Path

import yaml
from _common import start_emulator
from bench_engine import lines_of, timed

N = int(os.environ.get("BENCH_EMB_N", "100000"))
DIMS = int(os.environ.get("BENCH_EMB_DIMS", "256"))
FORMAT = os.environ.get("BENCH_EMB_FORMAT", "float")
OUTPUTS = os.environ.get("BENCH_EMB_OUTPUT", "jsonl,parquet").split(",")


def run_one(base: str, tmp: Path, data: Path, output_format: str) -> tuple[dict[str, object], str]:
    spec = {
        "provider": {
            "type": "openai",
            "model": "text-embedding-3-small",
            "secretRef": {"name": "k"},
            "baseURL": f"{base}/v1",
        },
        "input": {"url": str(data)},
        "output": {"url": str(tmp / f"out-{output_format}"), "format": output_format},
        "request": {"endpoint": "embeddings", "dimensions": DIMS, "encodingFormat": FORMAT},
    }
    job = tmp / f"job-{output_format}.yaml"
    doc = {"apiVersion": "barge.dev/v1alpha1", "kind": "LLMBatchJob", "metadata": {"name": "emb"}, "spec": spec}
    job.write_text(yaml.safe_dump(doc))
    env = {**os.environ, "BARGE_API_KEY": "k", "BARGE_MIN_BATCH_WINDOW": "0"}
    ledger = tmp / f"ledger-{output_format}.db"
    cmd = [sys.executable, "-m", "barge.cli", "run", str(job), "--ledger", str(ledger), "--poll", "0.5"]
    seconds, rss, out, code = timed([*cmd, "--json"], env)
    assert code == 0, out
    final = json.loads(out.strip().splitlines()[-1])
    results = tmp / f"out-{output_format}" / f"results.{output_format}"
    if output_format == "jsonl":
        count = lines_of(results)
    else:  # counted by a reader of its own (pyarrow, a dev dependency), not by the writer's return value
        import pyarrow.parquet as pq

        count = pq.ParquetFile(results).metadata.num_rows
    row = (
        f"| {output_format} | {final['phase']} | {count:,} | {seconds:.1f} | {rss:,.0f} "
        f"| {results.stat().st_size / 1e6:,.0f} | {ledger.stat().st_size / 1e6:,.0f} | {final['usage']['costUSD']} |"
    )
    ledger.unlink()  # the next format's run starts with the disk this one used given back
    return final, row


def main() -> None:
    proc, base = start_emulator({"batch": {"processingSeconds": 1}})
    rows = []
    try:
        with tempfile.TemporaryDirectory(prefix="barge-bench-emb-") as name:
            tmp = Path(name)
            data = tmp / "in.jsonl"
            with data.open("w") as fh:
                for i in range(N):
                    fh.write(json.dumps({"id": f"d{i}", "text": f"document {i} about barges and rivers"}) + "\n")
            for output_format in OUTPUTS:
                rows.append(run_one(base, tmp, data, output_format)[1])
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(30)
    print(f"\n`barge run` of an embeddings job ({N:,} inputs, {DIMS} dimensions, {FORMAT}; barge emulator)")
    print("| output | phase | results | seconds | peak RSS MB | results file MB | ledger MB | cost USD |")
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    for row in rows:
        print(row)


if __name__ == "__main__":
    main()
