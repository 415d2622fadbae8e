"""The batch engine against `barge emulator`, beside a naive SDK script, in one run.

Each measurement runs in a fresh child process so its peak RSS (ru_maxrss from wait4) is its own:
  barge     JobRunner: plan (ledger) + submit (streamed shards), then ingestion of every result
  naive     the typical script: build every request in memory, one create, read all results into memory
Ingestion is also measured on PostgreSQL when a server is available (BENCH_PG_URL).
Sizes: BENCH_SIZES (default "10000,100000" items of ~2 KB each, so 100k items is ~200 MB of JSONL).
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from _common import start_emulator

PAD = "z" * 1900


def write_input(path: Path, n: int) -> int:
    with path.open("wb") as fh:
        for i in range(n):
            fh.write(json.dumps({"id": f"i{i}", "text": f"item {i} {PAD}"}).encode() + b"\n")
    return path.stat().st_size


# --- children -------------------------------------------------------------------------------------------------
async def child_barge(kind: str, url: str, data: Path, ledger_url: str) -> dict[str, Any]:
    from barge.api.batchjob import LLMBatchJobSpec
    from barge.batch import prices
    from barge.batch.runner import EngineSettings, Job, JobRunner
    from barge.ledger import Ledger
    from barge.providers import make_provider
    from barge.storage import StoragePolicy, read_lines

    model = "claude-sonnet-4-6" if kind == "anthropic" else "gpt-4o-mini"
    spec = LLMBatchJobSpec.model_validate(
        {
            "provider": {"type": kind, "model": model, "secretRef": {"name": "k"}},
            "input": {"url": str(data)},
            "output": {"url": str(data.parent / f"out-{kind}")},
            "request": {"template": "{{ text }}", "maxTokens": 50},
        }
    )
    job = Job(
        key=f"bench/{kind}/{time.time()}",
        spec=spec,
        tenant="b",
        run_date="2026-11-30",
        model=model,
        lines=lambda: read_lines(str(data), StoragePolicy()),
        storage=StoragePolicy(),
    )
    provider = make_provider(kind, "k", base_url=f"{url}/v1" if kind == "openai" else url)
    runner = JobRunner(job, provider, Ledger(ledger_url), prices.load(), EngineSettings(min_batch_window=0))
    started = time.perf_counter()
    snap = await runner.step()  # plan + submit every shard
    submitted = time.perf_counter() - started
    ingest = 0.0
    while not snap.terminal:
        await asyncio.sleep(0.2)
        t = time.perf_counter()
        before = snap.counts["succeeded"]
        snap = await runner.step()
        if snap.counts["succeeded"] != before:
            ingest += time.perf_counter() - t
    return {
        "submit_s": submitted,
        "ingest_s": ingest,
        "results": snap.counts["succeeded"],
        "phase": snap.phase,
        "batches": len(snap.batches),
    }


async def child_naive(kind: str, url: str, data: Path) -> dict[str, Any]:
    lines = [json.loads(x) for x in data.read_text().splitlines()]
    started = time.perf_counter()
    n = 0
    if kind == "anthropic":
        import anthropic

        client = anthropic.AsyncAnthropic(api_key="k", base_url=url)
        ids = []
        for start in range(0, len(lines), 100_000):
            requests = [
                {
                    "custom_id": x["id"],
                    "params": {
                        "model": "claude-sonnet-4-6",
                        "max_tokens": 50,
                        "messages": [{"role": "user", "content": x["text"]}],
                    },
                }
                for x in lines[start : start + 100_000]
            ]
            ids.append((await client.messages.batches.create(requests=requests)).id)  # type: ignore[arg-type]
        submitted = time.perf_counter() - started
        for batch_id in ids:
            while (await client.messages.batches.retrieve(batch_id)).processing_status != "ended":
                await asyncio.sleep(0.2)
        t = time.perf_counter()
        results = []
        for batch_id in ids:
            results += [r async for r in await client.messages.batches.results(batch_id)]
        n = len(results)
    else:
        import openai

        oclient = openai.AsyncOpenAI(api_key="k", base_url=f"{url}/v1")
        ids = []
        for start in range(0, len(lines), 50_000):
            body = "".join(
                json.dumps(
                    {
                        "custom_id": x["id"],
                        "method": "POST",
                        "url": "/v1/chat/completions",
                        "body": {
                            "model": "gpt-4o-mini",
                            "max_tokens": 50,
                            "messages": [{"role": "user", "content": x["text"]}],
                        },
                    }
                )
                + "\n"
                for x in lines[start : start + 50_000]
            ).encode()
            file = await oclient.files.create(file=("in.jsonl", body), purpose="batch")
            ids.append(
                (
                    await oclient.batches.create(
                        input_file_id=file.id, endpoint="/v1/chat/completions", completion_window="24h"
                    )
                ).id
            )
        submitted = time.perf_counter() - started
        outs = []
        for batch_id in ids:
            while (b := await oclient.batches.retrieve(batch_id)).status != "completed":
                await asyncio.sleep(0.2)
            outs.append(b.output_file_id)
        t = time.perf_counter()
        results = []
        for file_id in outs:
            text = (await oclient.files.content(str(file_id))).text
            results += [json.loads(x) for x in text.splitlines() if x]
        n = len(results)
    return {"submit_s": submitted, "ingest_s": time.perf_counter() - t, "results": n, "phase": "-", "batches": len(ids)}


def run_child_rss(*args: str) -> tuple[dict[str, Any], float]:
    proc = subprocess.Popen([sys.executable, __file__, "--child", *args], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    out = proc.stdout.read()
    _, _, usage = os.wait4(proc.pid, 0)
    proc.returncode = 0
    return json.loads(out.strip().splitlines()[-1]), usage.ru_maxrss / 1024


def main() -> None:
    if sys.argv[1:2] == ["--child"]:
        mode, kind, url, data = sys.argv[2:6]
        if mode == "barge":
            result = asyncio.run(child_barge(kind, url, Path(data), sys.argv[6]))
        else:
            result = asyncio.run(child_naive(kind, url, Path(data)))
        print(json.dumps(result))
        return
    sizes = [int(x) for x in os.environ.get("BENCH_SIZES", "10000,100000").split(",")]
    pg = os.environ.get("BENCH_PG_URL", "")
    proc, url = start_emulator({"batch": {"processingSeconds": 1}})
    rows = []
    try:
        with tempfile.TemporaryDirectory(prefix="barge-bench-") as tmp:
            for n in sizes:
                data = Path(tmp) / f"in-{n}.jsonl"
                size_mb = write_input(data, n) / 1e6
                for kind in ("anthropic", "openai"):
                    for who in ("barge", "naive"):
                        args = [who, kind, url, str(data)]
                        if who == "barge":
                            args.append(str(Path(tmp) / f"ledger-{kind}-{n}.db"))
                        result, rss = run_child_rss(*args)
                        rows.append((n, size_mb, kind, f"{who} (sqlite)" if who == "barge" else who, result, rss))
                    if pg:
                        result, rss = run_child_rss("barge", kind, url, str(data), pg)
                        rows.append((n, size_mb, kind, "barge (postgresql)", result, rss))
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(30)
    print("\nBatch engine vs a naive SDK script (barge emulator in its own process; peak RSS of each run)")
    print(
        "| items | input MB | provider | who | batches | plan+submit s | submit items/s | ingest results/s "
        "| peak RSS MB |"
    )
    print("| ---: | ---: | --- | --- | ---: | ---: | ---: | ---: | ---: |")
    for n, size_mb, kind, who, r, rss in rows:
        ingest = r["results"] / r["ingest_s"] if r["ingest_s"] else 0
        print(
            f"| {n:,} | {size_mb:.0f} | {kind} | {who} | {r['batches']} | {r['submit_s']:.1f} "
            f"| {n / r['submit_s']:,.0f} | {ingest:,.0f} | {rss:,.0f} |"
        )


if __name__ == "__main__":
    main()
