"""Submission (plan + render + ledger + upload) against `barge emulator`, beside its floor and a naive script.

Each measurement runs in a fresh child process against a fresh emulator, so its peak RSS (ru_maxrss from wait4,
the largest of its process and the planner process) and the emulator's state are its own:
  floor   reads the exact request bytes Barge sends (encoded beforehand, outside the timing) and uploads them
          shard by shard with httpx (httpx2, the SDKs' own) to the same endpoints: nothing rendered, nothing stored
  naive   the typical SDK script: every line parsed, every request built in memory, one SDK create per shard
  barge   one JobRunner step on a SQLite ledger: plan (planner process, ledger items) + every shard submitted;
          its planner server is started with the imports, outside the timing, as `barge run` and the operator do
Sizes: BENCH_SUBMIT_SIZES (default "10000,100000" items of ~2 KB; add 1000000 for the ~2 GB run). The naive script
holds every request in memory (~12 GB at 1M items): it runs up to BENCH_SUBMIT_NAIVE_MAX items (default 200000),
its cells show "-" above. BENCH_SUBMIT_PROVIDERS narrows the providers (default "anthropic,openai");
BENCH_SUBMIT_PROFILE=PREFIX writes a cProfile of each Barge run to PREFIX-<provider>.prof (its main thread only).
BENCH_SUBMIT_IDS=random gives the items ids of 16 random hex digits instead of `i<n>`, which sort nearly in line
order (the ledger's items table is clustered on the custom_id made from the id).
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
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from _common import naive_openai_body, start_emulator, write_input

MODELS = {"anthropic": "claude-sonnet-4-6", "openai": "gpt-4o-mini"}
SHARD = {"anthropic": 100_000, "openai": 50_000}  # the providers' request limits (bytes stay under theirs here)
MAX_TOKENS = 50


def _spec(kind: str, data: Path) -> dict[str, Any]:
    return {
        "provider": {"type": kind, "model": MODELS[kind], "secretRef": {"name": "k"}},
        "input": {"url": str(data)},
        "output": {"url": str(data.parent / f"out-{kind}")},
        "request": {"template": "{{ text }}", "maxTokens": MAX_TOKENS},
    }


def write_floor_shards(kind: str, data: Path, out: Path) -> list[Path]:
    """The bytes Barge uploads, shard by shard (Anthropic: the create body; OpenAI: the JSONL file)."""
    from barge.api.batchjob import LLMBatchJobSpec
    from barge.batch.plan import RequestFactory
    from barge.batch.render import Renderer
    from barge.providers.encoding import encoder

    spec = LLMBatchJobSpec.model_validate(_spec(kind, data))
    renderer, factory, encode = (
        Renderer(spec, "2026-11-30", "b"),
        RequestFactory(MODELS[kind], spec.request),
        encoder(kind),
    )
    paths: list[Path] = []
    fh: Any = None
    with data.open("rb") as source:
        for number, raw in enumerate(source, start=1):
            if (number - 1) % SHARD[kind] == 0:
                if fh is not None:
                    fh.write(b"]}" if kind == "anthropic" else b"")
                    fh.close()
                paths.append(out / f"floor-{kind}-{len(paths)}.bin")
                fh = paths[-1].open("wb")
                fh.write(b'{"requests":[' if kind == "anthropic" else b"")
            elif kind == "anthropic":
                fh.write(b",")
            rendered = renderer.render(number, renderer.parse(raw))
            fh.write(encode(factory(rendered.custom_id, rendered.user)) + (b"" if kind == "anthropic" else b"\n"))
    if fh is not None:
        fh.write(b"]}" if kind == "anthropic" else b"")
        fh.close()
    return paths


# --- children -------------------------------------------------------------------------------------------------
def _chunks(path: Path) -> Iterator[bytes]:
    with path.open("rb") as fh:
        while chunk := fh.read(1 << 20):
            yield chunk


def child_floor(kind: str, url: str, shards: list[str]) -> dict[str, Any]:
    import httpx2 as httpx

    headers = {"x-api-key": "k", "anthropic-version": "2023-06-01", "authorization": "Bearer k"}
    started = time.perf_counter()
    with httpx.Client(base_url=url, headers=headers, timeout=600) as client:
        for shard in shards:
            path = Path(shard)
            if kind == "anthropic":
                r = client.post(
                    "/v1/messages/batches", content=_chunks(path), headers={"content-type": "application/json"}
                )
            else:
                with path.open("rb") as fh:
                    up = client.post("/v1/files", files={"file": ("batch.jsonl", fh)}, data={"purpose": "batch"})
                up.raise_for_status()
                body = {
                    "input_file_id": up.json()["id"],
                    "endpoint": "/v1/chat/completions",
                    "completion_window": "24h",
                }
                r = client.post("/v1/batches", json=body)
            r.raise_for_status()
    return {"seconds": time.perf_counter() - started, "batches": len(shards)}


async def child_naive(kind: str, url: str, data: Path) -> dict[str, Any]:
    import anthropic
    import openai

    started = time.perf_counter()
    lines = [json.loads(x) for x in data.read_text().splitlines()]
    step = SHARD[kind]
    ids = []
    if kind == "anthropic":
        client = anthropic.AsyncAnthropic(api_key="k", base_url=url, timeout=600)
        for start in range(0, len(lines), step):
            requests = [
                {
                    "custom_id": x["id"],
                    "params": {
                        "model": MODELS[kind],
                        "max_tokens": MAX_TOKENS,
                        "messages": [{"role": "user", "content": x["text"]}],
                    },
                }
                for x in lines[start : start + step]
            ]
            ids.append((await client.messages.batches.create(requests=requests)).id)  # type: ignore[arg-type]
    else:
        oclient = openai.AsyncOpenAI(api_key="k", base_url=f"{url}/v1", timeout=600)
        for start in range(0, len(lines), step):
            body = naive_openai_body(lines[start : start + step], MODELS[kind], MAX_TOKENS)
            file = await oclient.files.create(file=("in.jsonl", body), purpose="batch")
            batch = await oclient.batches.create(
                input_file_id=file.id, endpoint="/v1/chat/completions", completion_window="24h"
            )
            ids.append(batch.id)
    return {"seconds": time.perf_counter() - started, "batches": len(ids)}


async def child_barge(kind: str, url: str, data: Path, ledger_url: str) -> dict[str, Any]:
    from barge.api.batchjob import LLMBatchJobSpec
    from barge.batch import prices, zygote
    from barge.batch.job import EngineSettings, Job
    from barge.batch.runner import JobRunner
    from barge.ledger import Ledger
    from barge.providers import make_provider
    from barge.storage import StoragePolicy, read_lines

    # Imports stay outside the timing, as in the other two; the planner server's too: `barge run` and the operator
    # start it before anything else, so that it imports on the other core while this process loads its SDK.
    zygote.SERVER.warm()
    __import__(kind)
    started = time.perf_counter()
    spec = LLMBatchJobSpec.model_validate(_spec(kind, data))
    job = Job(
        key=f"bench/{kind}",
        spec=spec,
        tenant="b",
        run_date="2026-11-30",
        model=MODELS[kind],
        lines=lambda: read_lines(str(data), StoragePolicy()),
        storage=StoragePolicy(),
    )
    provider = make_provider(kind, "k", base_url=f"{url}/v1" if kind == "openai" else url)
    warnings: list[str] = []

    def on_event(reason: str, message: str, kind: str) -> None:
        if kind == "Warning":  # e.g. CreateUncertain: a create that timed out under load, reconciled next step
            warnings.append(f"{reason}: {message}")

    settings = EngineSettings(min_batch_window=0)
    runner = JobRunner(job, provider, Ledger(ledger_url), prices.load(), settings, on_event=on_event)
    snap = await runner.step()  # plan + every shard submitted
    steps = 1
    while snap.counts["submitted"] != snap.counts["total"] and steps < 5:  # as `barge run` would go on
        snap, steps = await runner.step(), steps + 1
    seconds = time.perf_counter() - started
    await provider.close()
    if snap.counts["submitted"] != snap.counts["total"]:
        raise SystemExit(f"barge submitted {snap.counts['submitted']} of {snap.counts['total']}: {warnings[-3:]}")
    if warnings:
        print(f"barge {kind}: {steps} steps; {warnings[:3]}", file=sys.stderr)
    return {"seconds": seconds, "batches": len(snap.batches)}


def run_child(*args: str) -> tuple[dict[str, Any], float]:
    """Run one measurement in a fresh process; its result and its peak RSS in MB (planner process included)."""
    proc = subprocess.Popen([sys.executable, __file__, "--child", *args], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    out = proc.stdout.read()
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise SystemExit(f"child {args[:2]} failed with exit code {proc.returncode}")
    return json.loads(out.strip().splitlines()[-1]), usage.ru_maxrss / 1024


def measure(who: str, kind: str, args: list[str]) -> tuple[dict[str, Any], float]:
    proc, url = start_emulator({"batch": {"processingSeconds": 3600}})
    try:
        return run_child(who, kind, url, *args)
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(60)


def main() -> None:
    if sys.argv[1:2] == ["--child"]:
        who, kind, url = sys.argv[2:5]
        rest = sys.argv[5:]
        if who == "floor":
            result = child_floor(kind, url, rest)
        elif who == "naive":
            result = asyncio.run(child_naive(kind, url, Path(rest[0])))
        elif profile := os.environ.get("BENCH_SUBMIT_PROFILE"):  # cProfile of Barge's own process, to this file
            import cProfile

            with cProfile.Profile() as prof:
                result = asyncio.run(child_barge(kind, url, Path(rest[0]), rest[1]))
            prof.dump_stats(f"{profile}-{kind}.prof")
        else:
            result = asyncio.run(child_barge(kind, url, Path(rest[0]), rest[1]))
        print(json.dumps(result))
        return
    sizes = [int(x) for x in os.environ.get("BENCH_SUBMIT_SIZES", "10000,100000").split(",")]
    kinds = os.environ.get("BENCH_SUBMIT_PROVIDERS", "anthropic,openai").split(",")
    rows = []
    with tempfile.TemporaryDirectory(prefix="barge-bench-submit-") as tmp:
        for n in sizes:
            data = Path(tmp) / f"in-{n}.jsonl"
            size_mb = write_input(data, n, random_ids=os.environ.get("BENCH_SUBMIT_IDS") == "random") / 1e6
            for kind in kinds:
                shards = [str(p) for p in write_floor_shards(kind, data, Path(tmp))]
                floor, floor_rss = measure("floor", kind, shards)
                naive: dict[str, Any] = {"seconds": float("nan"), "batches": 0}
                naive_rss = float("nan")
                if n <= int(os.environ.get("BENCH_SUBMIT_NAIVE_MAX", "200000")):
                    naive, naive_rss = measure("naive", kind, [str(data)])
                ledger = Path(tmp) / f"ledger-{kind}-{n}.db"
                barge, barge_rss = measure("barge", kind, [str(data), str(ledger)])
                for path in (*map(Path, shards), *Path(tmp).glob(f"ledger-{kind}-{n}.db*")):
                    path.unlink()
                base = floor["seconds"]
                for who, r, rss in (
                    ("floor", floor, floor_rss),
                    ("naive", naive, naive_rss),
                    ("barge", barge, barge_rss),
                ):
                    rows.append((n, size_mb, kind, who, r, rss, r["seconds"] / base, r["seconds"] / naive["seconds"]))
            data.unlink()
    print("\nSubmission (plan + render + ledger + upload) vs its floor and a naive SDK script")
    print("(barge emulator in its own process, fresh per run; peak RSS: the largest process of each run)")
    print("| items | input MB | provider | who | batches | seconds | items/s | x floor | x naive | peak RSS MB |")
    print("| ---: | ---: | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    for n, size_mb, kind, who, r, rss, x_floor, x_naive in rows:
        cells = [f"{r['seconds']:.2f}", f"{n / r['seconds']:,.0f}", f"{x_floor:.2f}", f"{x_naive:.2f}", f"{rss:,.0f}"]
        cells = ["-" if c == "nan" else c for c in cells]
        print(f"| {n:,} | {size_mb:.0f} | {kind} | {who} | {r['batches'] or '-'} | {' | '.join(cells)} |")


if __name__ == "__main__":
    main()
