"""The seed's claim, measured: workers capped by the model quota beat twice as many uncapped ones.

`barge emulator` enforces a tokens-per-minute quota on its synchronous endpoint; a Redis stream holds a
backlog of messages; then, for the same wall-clock window,
  (a) as many `barge worker` processes as the cap allows, each limiting itself to its share of the quota;
  (b) twice that many, with the limiter off (what an uncapped autoscaler produces).
Prints completed messages per minute, 429s received, tokens per minute achieved against the quota, dead letters.
Needs redis-server (Debian). BENCH_WINDOW seconds per run (default 120), measured after a 15 s warm-up.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import redis
import yaml
from _common import start_emulator

from barge.api.pool import InferencePool
from barge.k8s.workers import quota_caps

WINDOW = float(os.environ.get("BENCH_WINDOW", "120"))
WARMUP = 15.0
TPM = 30_000
TOKENS_PER_REQUEST = 100  # ~ 200 characters in, max_tokens 50
RPM_PER_REPLICA = 60
TEXT = "x" * 200


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def emulator_state(url: str) -> dict[str, int]:
    with urllib.request.urlopen(f"{url}/_emulator/state", timeout=5) as resp:  # noqa: S310 - loopback
        data = json.loads(resp.read())
    return {"sync_requests": data["sync_requests"], "rate_limited": data["rate_limited"]}


def run(label: str, replicas: int, limit: bool, emu_url: str, redis_url: str, tmp: Path) -> dict[str, float]:
    stream = f"bench-{label}"
    r = redis.Redis.from_url(redis_url)
    pipe = r.pipeline()
    for n in range(5000):
        pipe.xadd(stream, {"body": json.dumps({"correlationId": f"{label}-{n}", "payload": {"text": TEXT}})})
    pipe.execute()
    # The limits the operator would put in each replica's ConfigMap for a pool with this quota.
    pool = InferencePool.model_validate(
        {
            "metadata": {"name": "bench", "namespace": "bench", "uid": "u"},
            "spec": {
                "model": "gpt-4o-mini",
                "provider": {"type": "openai", "model": "gpt-4o-mini", "secretRef": {"name": "k"}},
                "quota": {"tokensPerMinute": TPM},
                "workers": [
                    {
                        "name": "w",
                        "queue": {"type": "redis-streams", "address": "r", "stream": "s"},
                        "tokensPerRequest": TOKENS_PER_REQUEST,
                        "requestsPerMinutePerReplica": RPM_PER_REPLICA,
                        "maxReplicas": replicas,
                        "output": {"url": "file:///tmp/x/"},
                    }
                ],
            },
        }
    )
    cap = quota_caps(pool)["w"]
    config = {
        "model": "gpt-4o-mini",
        "provider": {"type": "openai", "baseURL": f"{emu_url}/v1"},
        "queue": {"type": "redis-streams", "address": redis_url, "stream": stream, "consumerGroup": "barge"},
        "request": {"system": "", "template": "{{ text }}", "maxTokens": 50},
        "output": {"url": str(tmp / label)},
        "maxDeliveries": 5,
        "concurrency": 4,
        "limits": {
            "requestsPerMinute": cap.requests_per_minute if limit else 0,
            "tokensPerMinute": cap.tokens_per_minute if limit else 0,
            "tokensPerRequest": TOKENS_PER_REQUEST,
        },
    }
    path = tmp / f"{label}.yaml"
    path.write_text(yaml.safe_dump(config))
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "barge.cli", "worker", "--config", str(path)],
            env={**os.environ, "BARGE_API_KEY": "bench"},
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for _ in range(replicas)
    ]

    def answered() -> int:
        return len(list((tmp / label).glob("*.json"))) if (tmp / label).exists() else 0

    time.sleep(WARMUP)  # processes start and the first burst settles; the window is measured after it
    before, done0 = emulator_state(emu_url), answered()
    time.sleep(WINDOW)
    after, done1 = emulator_state(emu_url), answered()  # counted at the window's end, before shutdown
    for p in procs:
        p.send_signal(signal.SIGTERM)
    for p in procs:
        try:
            p.wait(90)
        except subprocess.TimeoutExpired:
            p.kill()
    done = done1 - done0
    dead = r.xlen(f"{stream}:dead")
    minutes = WINDOW / 60
    return {
        "replicas": replicas,
        "done_per_min": done / minutes,
        "rate_limited": after["rate_limited"] - before["rate_limited"],
        "tpm": done * TOKENS_PER_REQUEST / minutes,
        "dead": dead,
    }


def main() -> None:
    binary = shutil.which("redis-server")
    if binary is None:
        sys.exit("redis-server is needed (apt-get install redis-server)")
    cap = max(1, math.floor(TPM / (TOKENS_PER_REQUEST * RPM_PER_REPLICA)))
    with tempfile.TemporaryDirectory(prefix="barge-bench-workers-") as tmpdir:
        tmp = Path(tmpdir)
        port = free_port()
        server = subprocess.Popen(
            [binary, "--port", str(port), "--save", "", "--appendonly", "no"], stdout=subprocess.DEVNULL
        )
        emu, emu_url = start_emulator({"sync": {"latencyMs": 50, "quota": {"tokensPerMinute": TPM}}})
        try:
            time.sleep(0.5)
            redis_url = f"redis://127.0.0.1:{port}/0"
            capped = run("capped", cap, True, emu_url, redis_url, tmp)
            time.sleep(120)  # in-flight retries drain and the emulator's one-minute quota window empties
            uncapped = run("uncapped", cap * 2, False, emu_url, redis_url, tmp)
        finally:
            emu.send_signal(signal.SIGINT)
            emu.wait(30)
            server.terminate()
    print(
        f"\nQueue workers against a {TPM:,} tokens/minute quota ({TOKENS_PER_REQUEST} tokens a request, "
        f"{RPM_PER_REPLICA} requests/minute a replica: cap = {cap}); window {WINDOW:.0f}s each"
    )
    print("| run | replicas | completed/min | 429s received | tokens/min achieved | vs quota | dead letters |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    for name, r in (("(a) capped, limiter on", capped), ("(b) 2x, limiter off", uncapped)):
        print(
            f"| {name} | {r['replicas']:.0f} | {r['done_per_min']:,.0f} | {r['rate_limited']:,.0f} "
            f"| {r['tpm']:,.0f} | {r['tpm'] / TPM:.0%} | {r['dead']:.0f} |"
        )


if __name__ == "__main__":
    main()
