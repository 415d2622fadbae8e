"""End to end, as a user sees it: `barge run` of a 100k-item job beside a naive in-memory SDK script, same emulator.

Both do the same job, each in a fresh child process timed from spawn to exit (interpreter start and imports
included), peak RSS from wait4's ru_maxrss:
  barge  `python -m barge.cli run job.yaml --ledger <new SQLite file> --poll P --json`: plan, submit, wait,
         ingest, results.jsonl / failures.jsonl, provider copies deleted
  naive  the script people write first: read the input into memory, build every request, one create per
         provider limit (Anthropic 100,000, OpenAI 50,000 requests), poll every P seconds, read all results
         into memory through the SDK (Anthropic: its typed results iterator; OpenAI: files.content and json),
         write results.jsonl in input order
Target (issue 14 point 5): Barge's time <= 0.8x the naive script's, with a fraction of its memory.
Sizes: BENCH_ENGINE_N (default 100000 items of ~2 KB, ~200 MB of JSONL); poll interval BENCH_ENGINE_POLL (0.5 s).
Submission alone is measured by bench_submit.py, ingestion alone by bench_ingest.py.
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

import yaml
from _common import naive_openai_body, start_emulator, write_input

N = int(os.environ.get("BENCH_ENGINE_N", "100000"))
POLL = float(os.environ.get("BENCH_ENGINE_POLL", "0.5"))
MODELS = {"anthropic": "claude-sonnet-4-6", "openai": "gpt-4o-mini"}
TARGET = 0.8


def manifest(tmp: Path, kind: str, base: str, data: Path) -> Path:
    path = tmp / f"job-{kind}.yaml"
    spec = {
        "provider": {
            "type": kind,
            "model": MODELS[kind],
            "secretRef": {"name": "k"},
            "baseURL": f"{base}/v1" if kind == "openai" else base,
        },
        "input": {"url": str(data)},
        "output": {"url": str(tmp / f"out-barge-{kind}")},
        "successRatio": "0.9",
        "request": {"template": "{{ text }}", "maxTokens": 50},
    }
    doc = {"apiVersion": "barge.dev/v1alpha1", "kind": "LLMBatchJob", "metadata": {"name": f"e2e-{kind}"}, "spec": spec}
    path.write_text(yaml.safe_dump(doc))
    return path


# --- the naive script (a child process) ---------------------------------------------------------------------------
async def naive(kind: str, base: str, data: Path, out: Path) -> int:
    items = [json.loads(x) for x in data.read_text().splitlines()]
    results: dict[str, Any] = {}
    if kind == "anthropic":
        import anthropic

        client = anthropic.AsyncAnthropic(api_key="k", base_url=base)
        ids = []
        for start in range(0, len(items), 100_000):
            requests = [
                {
                    "custom_id": x["id"],
                    "params": {
                        "model": MODELS[kind],
                        "max_tokens": 50,
                        "messages": [{"role": "user", "content": x["text"]}],
                    },
                }
                for x in items[start : start + 100_000]
            ]
            ids.append((await client.messages.batches.create(requests=requests)).id)  # type: ignore[arg-type]
        for batch_id in ids:
            while (await client.messages.batches.retrieve(batch_id)).processing_status != "ended":
                await asyncio.sleep(POLL)
        for batch_id in ids:
            async for r in await client.messages.batches.results(batch_id):
                if r.result.type == "succeeded":
                    text = "".join(b.text for b in r.result.message.content if b.type == "text")
                    results[r.custom_id] = {"output": text, "usage": r.result.message.usage.model_dump()}
    else:
        import openai

        oclient = openai.AsyncOpenAI(api_key="k", base_url=f"{base}/v1")
        ids = []
        for start in range(0, len(items), 50_000):
            body = naive_openai_body(items[start : start + 50_000], MODELS[kind], 50)
            file = await oclient.files.create(file=("in.jsonl", body), purpose="batch")
            batch = await oclient.batches.create(
                input_file_id=file.id, endpoint="/v1/chat/completions", completion_window="24h"
            )
            ids.append(batch.id)
        for batch_id in ids:
            while (b := await oclient.batches.retrieve(batch_id)).status != "completed":
                await asyncio.sleep(POLL)
            text = (await oclient.files.content(str(b.output_file_id))).text
            for line in text.splitlines():
                if line:
                    r = json.loads(line)
                    body = r["response"]["body"]
                    results[r["custom_id"]] = {
                        "output": body["choices"][0]["message"]["content"],
                        "usage": body["usage"],
                    }
    out.mkdir(parents=True, exist_ok=True)
    with (out / "results.jsonl").open("w") as fh:
        for x in items:
            if x["id"] in results:
                fh.write(json.dumps({"id": x["id"], **results[x["id"]]}) + "\n")
    return len(results)


# --- the parent ---------------------------------------------------------------------------------------------------
def timed(cmd: list[str], env: dict[str, str]) -> tuple[float, float, str, int]:
    """(wall seconds, peak RSS MB, stdout, exit code) of a fresh child process."""
    started = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, env=env, text=True)
    assert proc.stdout is not None
    out = proc.stdout.read()
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    return time.perf_counter() - started, usage.ru_maxrss / 1024, out, proc.returncode


def lines_of(path: Path) -> int:
    with path.open("rb") as fh:
        return sum(1 for _ in fh)


def main() -> None:
    if sys.argv[1:2] == ["--naive"]:
        kind, base, data, out = sys.argv[2:6]
        print(asyncio.run(naive(kind, base, Path(data), Path(out))))
        return
    proc, base = start_emulator({"batch": {"processingSeconds": 1}})
    rows = []
    try:
        with tempfile.TemporaryDirectory(prefix="barge-bench-engine-") as name:
            tmp = Path(name)
            data = tmp / "in.jsonl"
            size_mb = write_input(data, N) / 1e6
            env = {**os.environ, "BARGE_API_KEY": "k", "BARGE_MIN_BATCH_WINDOW": "0"}
            for kind in ("anthropic", "openai"):
                job = manifest(tmp, kind, base, data)
                cmd = [sys.executable, "-m", "barge.cli", "run", str(job), "--ledger", str(tmp / f"l-{kind}.db")]
                b_s, b_rss, out, code = timed([*cmd, "--poll", str(POLL), "--json"], env)
                assert code == 0, out
                phase = json.loads(out.strip().splitlines()[-1])["phase"]
                b_results = lines_of(tmp / f"out-barge-{kind}" / "results.jsonl")
                naive_out = tmp / f"out-naive-{kind}"
                n_s, n_rss, out, code = timed(
                    [sys.executable, __file__, "--naive", kind, base, str(data), str(naive_out)], env
                )
                assert code == 0, out
                n_results = lines_of(naive_out / "results.jsonl")
                rows.append((kind, size_mb, phase, b_results, b_s, b_rss, n_results, n_s, n_rss))
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(30)
    print(f"\n`barge run` end to end vs a naive in-memory SDK script ({N:,} items, barge emulator, poll {POLL} s)")
    print(
        "| provider | input MB | naive s | naive peak RSS MB | Barge s | Barge peak RSS MB | Barge time / naive time "
        "| Barge RSS / naive RSS | target | met |"
    )
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- | --- |")
    for kind, size_mb, phase, b_results, b_s, b_rss, n_results, n_s, n_rss in rows:
        assert b_results == n_results, (kind, phase, b_results, n_results)
        met = "yes" if b_s <= TARGET * n_s and b_rss < n_rss else "no"
        print(
            f"| {kind} | {size_mb:.0f} | {n_s:.1f} | {n_rss:,.0f} | {b_s:.1f} | {b_rss:,.0f} | {b_s / n_s:.2f}x "
            f"| {b_rss / n_rss:.2f} | <= {TARGET}x time, less memory | {met} |"
        )


if __name__ == "__main__":
    main()
