"""The synchronous path against `barge emulator --vllm` at concurrency 64 (issue 14, point 6: >= 80% of a bare
httpx load generator's requests/s, same emulator, same run).

The emulator stands in for a vLLM engine pool (its own process, `--max-num-seqs 256` so that it never queues
what 64 callers send; 50 ms per request, the emulator's default sync latency). Both sides send the same
chat-completions bodies, one request per item, 64 at a time:
- floor: a bare httpx load generator (one AsyncClient, 64 tasks, POST and parse the JSON answer, nothing kept);
- Barge: the engine-pool path of the batch engine (JobRunner with sync_only, as the operator runs a job on a
  pool: `make_provider("openai", ...)` on the pool's endpoint, concurrency 64, a SQLite ledger planned with the
  items first); timed from the first request to the last result in the ledger. The deadline fallback runs the
  same code (JobRunner._fallback, batch/fallback.py).
Each side runs in a child process of its own, alternately, BENCH_SYNC_ROUNDS times (2); BENCH_SYNC_ITEMS (4000).
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from _common import start_emulator

MODEL = "meta-llama/Llama-3.1-8B-Instruct"
CONCURRENCY = 64
ITEMS = int(os.environ.get("BENCH_SYNC_ITEMS", "4000"))
ROUNDS = int(os.environ.get("BENCH_SYNC_ROUNDS", "2"))
TARGET = 0.8


def text(n: int) -> str:
    return f"Claim {n}: the customer reports water damage in the kitchen after a pipe burst; " * 3


async def bare(url: str) -> dict[str, Any]:
    import httpx2 as httpx

    queue = list(range(ITEMS))
    ok = 0
    limits = httpx.Limits(max_connections=CONCURRENCY, max_keepalive_connections=CONCURRENCY)
    async with httpx.AsyncClient(base_url=url, limits=limits, timeout=60) as client:

        async def worker() -> None:
            nonlocal ok
            while queue:
                n = queue.pop()
                body = {"model": MODEL, "max_tokens": 50, "messages": [{"role": "user", "content": text(n)}]}
                response = await client.post("/v1/chat/completions", json=body)
                response.raise_for_status()
                ok += bool(json.loads(response.content)["choices"])

        started, cpu = time.perf_counter(), time.process_time()
        await asyncio.gather(*(worker() for _ in range(CONCURRENCY)))
        elapsed, cpu = time.perf_counter() - started, time.process_time() - cpu
    return {"requests": ok, "seconds": elapsed, "cpu": cpu}


async def barge(url: str, tmp: Path) -> dict[str, Any]:
    from barge.api.batchjob import LLMBatchJobSpec
    from barge.batch import prices
    from barge.batch.job import EngineSettings, Job
    from barge.batch.runner import JobRunner
    from barge.ledger import Ledger
    from barge.providers import make_provider
    from barge.storage import StoragePolicy, read_lines

    data = tmp / "input.jsonl"
    data.write_text("".join(json.dumps({"id": str(n), "text": text(n)}) + "\n" for n in range(ITEMS)))
    spec = LLMBatchJobSpec.model_validate(
        {
            "provider": {"type": "pool", "model": MODEL, "poolRef": {"name": "bench"}},
            "input": {"url": str(data)},
            "output": {"url": str(tmp / "out")},
            "request": {"template": "{{ text }}", "maxTokens": 50},
        }
    )
    job = Job(
        key=f"bench/sync/{time.time()}",
        spec=spec,
        tenant="bench",
        run_date="2026-11-30",
        model=MODEL,
        lines=lambda: read_lines(str(data), StoragePolicy()),
    )
    ledger = Ledger(str(tmp / "ledger.db"))
    runner = JobRunner(
        job,
        make_provider("openai", "none", base_url=f"{url}/v1"),  # as operator/jobs.py builds an engine pool's
        ledger,
        prices.load(),
        EngineSettings(),
        sync_only=True,
        sync_limits=(CONCURRENCY, 0, 0),
    )
    spent: list[float] = []
    cpu: list[float] = []
    fallback = runner._fallback

    async def timed_fallback() -> None:
        started, used = time.perf_counter(), time.process_time()
        await fallback()
        spent.append(time.perf_counter() - started)
        cpu.append(time.process_time() - used)

    runner._fallback = timed_fallback  # type: ignore[method-assign]
    started = time.perf_counter()
    snap = await runner.step()
    total = time.perf_counter() - started
    await runner.provider.close()
    return {
        "requests": snap.counts.get("succeeded", 0),
        "seconds": sum(spent),
        "cpu": sum(cpu),
        "total": total,
        "phase": snap.phase,
    }


def child(*args: str) -> dict[str, Any]:
    out = subprocess.run([sys.executable, __file__, "--child", *args], check=True, capture_output=True, text=True)
    return dict(json.loads(out.stdout.strip().splitlines()[-1]))


def main() -> None:
    if sys.argv[1:2] == ["--child"]:
        who, url = sys.argv[2:4]
        with tempfile.TemporaryDirectory(prefix="barge-bench-") as tmp:
            result = asyncio.run(bare(url) if who == "bare" else barge(url, Path(tmp)))
        print(json.dumps(result))
        return
    proc, url = start_emulator({"sync": {"latencyMs": 50}}, "--vllm", MODEL, "--max-num-seqs", "256")
    rows = []
    try:
        for _ in range(ROUNDS):
            rows.append((child("bare", url), child("barge", url)))
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(30)
    print(
        f"\nSynchronous path vs a bare httpx load generator: barge emulator --vllm, {ITEMS:,} requests, concurrency "
        f"{CONCURRENCY}, 50 ms each (ideal {CONCURRENCY / 0.05:,.0f} req/s)"
    )
    print(
        "| round | httpx req/s (floor) | Barge req/s | Barge / floor | target | met | client CPU ms/request "
        "httpx / Barge | Barge step incl. plan, s |"
    )
    print("| ---: | ---: | ---: | ---: | ---: | --- | ---: | ---: |")
    ratios = []
    for i, (floor, ours) in enumerate(rows, 1):
        if floor["requests"] != ITEMS or ours["requests"] != ITEMS:
            raise RuntimeError(f"not every request succeeded: {floor}, {ours}")
        f_rate, b_rate = floor["requests"] / floor["seconds"], ours["requests"] / ours["seconds"]
        ratios.append(b_rate / f_rate)
        print(
            f"| {i} | {f_rate:,.0f} | {b_rate:,.0f} | {b_rate / f_rate:.0%} | >= {TARGET:.0%} "
            f"| {'yes' if b_rate / f_rate >= TARGET else 'NO'} "
            f"| {floor['cpu'] / ITEMS * 1000:.2f} / {ours['cpu'] / ITEMS * 1000:.2f} | {ours['total']:.1f} |"
        )
    print(
        f"(median ratio {statistics.median(ratios):.0%}; each side in its own process, the emulator in a third; "
        "machine shared with other work)"
    )


if __name__ == "__main__":
    main()
