"""Can the emulator keep up with Barge? Accept a ~200 MB batch and serve its results, per provider.

Runs `barge emulator` as its own process (so client and server do not share a GIL) and drives it over raw
HTTP with httpx, streaming the body in and the results out. Prints one table; the naive baseline is a
client that reads the whole results body into memory before parsing it (what `response.json()`-style code
does, then parses every line), measured against the same server in the same run. "served" counts result
lines on the raw stream: what the emulator delivers, not what a Python JSON parser can digest.
"""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Iterator

import httpx2 as httpx
from _common import start_emulator

N_ANTHROPIC = int(os.environ.get("BENCH_EMULATOR_N", "100000"))
N_OPENAI = min(N_ANTHROPIC, 50_000)
PAD = "x" * 1900  # ~2 KB per Anthropic request -> ~200 MB at 100k


def anthropic_body(n: int) -> Iterator[bytes]:
    yield b'{"requests":['
    for i in range(n):
        params = {
            "model": "claude-sonnet-4-6",
            "max_tokens": 64,
            "messages": [{"role": "user", "content": f"item {i} {PAD}"}],
        }
        yield (b"," if i else b"") + json.dumps({"custom_id": f"r{i}", "params": params}).encode()
    yield b"]}"


def openai_file(n: int) -> bytes:
    pad = "y" * 3900  # ~4 KB per line -> ~200 MB at 50k
    return b"".join(
        json.dumps(
            {
                "custom_id": f"o{i}",
                "method": "POST",
                "url": "/v1/chat/completions",
                "body": {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": f"{i} {pad}"}]},
            }
        ).encode()
        + b"\n"
        for i in range(n)
    )


def wait_ended(client: httpx.Client, url: str, field: str, done: set[str]) -> None:
    while client.get(url).json()[field] not in done:
        time.sleep(0.2)


def stream_count(client: httpx.Client, url: str) -> tuple[int, float]:
    """Results the server delivers per second: newlines counted on the raw stream, nothing held."""
    started, count = time.perf_counter(), 0
    with client.stream("GET", url) as resp:
        for chunk in resp.iter_bytes(1 << 20):
            count += chunk.count(b"\n")
    return count, time.perf_counter() - started


def naive_count(client: httpx.Client, url: str) -> tuple[int, float]:
    started = time.perf_counter()
    text = client.get(url).text
    count = sum(1 for line in text.splitlines() if line and json.loads(line))
    return count, time.perf_counter() - started


def main() -> None:
    proc, base = start_emulator({"batch": {"processingSeconds": 1}})
    rows = []
    try:
        with httpx.Client(timeout=600, headers={"x-api-key": "bench", "authorization": "Bearer bench"}) as client:
            size = sum(len(chunk) for chunk in anthropic_body(N_ANTHROPIC))
            started = time.perf_counter()
            resp = client.post(
                f"{base}/v1/messages/batches",
                content=anthropic_body(N_ANTHROPIC),
                headers={"content-type": "application/json"},
            )
            resp.raise_for_status()
            accept = time.perf_counter() - started
            batch_id = resp.json()["id"]
            wait_ended(client, f"{base}/v1/messages/batches/{batch_id}", "processing_status", {"ended"})
            results_url = f"{base}/v1/messages/batches/{batch_id}/results"
            _, first = stream_count(client, results_url)  # the first read serialises the results file
            n, secs = stream_count(client, results_url)
            n2, secs2 = naive_count(client, results_url)
            rows.append(("anthropic", N_ANTHROPIC, size, accept, n, first, secs, n2, secs2))

            data = openai_file(N_OPENAI)
            started = time.perf_counter()
            file_id = client.post(
                f"{base}/v1/files", files={"file": ("in.jsonl", data)}, data={"purpose": "batch"}
            ).json()["id"]
            batch = client.post(
                f"{base}/v1/batches",
                json={"input_file_id": file_id, "completion_window": "24h", "endpoint": "/v1/chat/completions"},
            ).json()
            accept = time.perf_counter() - started
            wait_ended(client, f"{base}/v1/batches/{batch['id']}", "status", {"completed", "failed", "expired"})
            out = client.get(f"{base}/v1/batches/{batch['id']}").json()["output_file_id"]
            _, first = stream_count(client, f"{base}/v1/files/{out}/content")
            n, secs = stream_count(client, f"{base}/v1/files/{out}/content")
            n2, secs2 = naive_count(client, f"{base}/v1/files/{out}/content")
            rows.append(("openai", N_OPENAI, len(data), accept, n, first, secs, n2, secs2))
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(30)
    print("\nEmulator throughput (barge emulator in its own process, raw HTTP client)")
    print(
        "| provider | requests | body MB | accept s | results | first read results/s | served results/s "
        "| naive read-all + parse results/s |"
    )
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for name, reqs, size, accept, n, first, secs, n2, secs2 in rows:
        print(
            f"| {name} | {reqs:,} | {size / 1e6:.0f} | {accept:.1f} | {n:,} | {n / first:,.0f} | {n / secs:,.0f} "
            f"| {n2 / secs2:,.0f} |"
        )


if __name__ == "__main__":
    main()
