"""A queue message is paid once, whatever happens to the replica that called for it (#34: on the node one of 240
messages was answered twice). Real parts: Debian's redis-server, the emulator's synchronous endpoint, and for the
process cases the real `barge worker` command, signalled as the kubelet signals a Pod (SIGTERM at a scale-down,
SIGKILL past the grace period or at an eviction).

Each case redelivers a message whose call was already paid, as the node did: the replica was killed after the
provider answered but before the save and the ack; another replica claimed a live replica's in-flight message; the
output store failed after the answer and the redelivery reached another replica (whose memory did not hold it).
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml
from redis import asyncio as aioredis

from barge.emulator.server import EmulatorThread
from barge.providers import make_provider
from barge.workers.queues import RedisStreams
from barge.workers.runtime import Worker
from tests.conftest import Factory
from tests.integration.test_workers import dead_letters, pending, push, settings

BARGE = str(Path(sys.executable).parent / "barge")


def calls_arrived(emu: EmulatorThread) -> int:
    """Calls the emulator received (counted on arrival; `sync_requests` counts them once answered)."""
    return sum(n for route, n in emu.store.requests.items() if route.endswith("/chat/completions"))


async def until(what: str, ok: Any, within: float = 30.0) -> None:
    deadline = time.monotonic() + within
    while not ok():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not reached in {within:.0f}s")
        await asyncio.sleep(0.05)


def replica(
    redis_url: str,
    stream: str,
    emu: EmulatorThread,
    tmp_path: Path,
    consumer: str,
    claim_idle_ms: int = 100,
    **over: Any,
) -> Worker:
    """A replica in this process (its own consumer, as each Pod is)."""
    queue = RedisStreams(redis_url, stream, "barge", consumer=consumer, claim_idle_ms=claim_idle_ms)
    provider = make_provider("openai", "k", base_url=f"{emu.url}/v1", sync_retries=0)
    return Worker(queue, provider, settings(tmp_path, **over))


def start_worker(
    tmp_path: Path, redis_url: str, stream: str, emu: EmulatorThread, **over: Any
) -> subprocess.Popen[str]:
    """`barge worker --config`, configured as the operator configures a pod (workers.worker_config)."""
    config: dict[str, Any] = {
        "pool": "mini",
        "worker": "docs",
        "model": "gpt-4o-mini",
        "provider": {"type": "openai", "baseURL": f"{emu.url}/v1", "apiKeyEnv": "BARGE_API_KEY"},
        "queue": {"type": "redis-streams", "address": redis_url, "stream": stream, "consumerGroup": "barge"},
        "request": {"system": "Summarise.", "template": "{{ text }}", "maxTokens": 16},
        "output": {"url": str(tmp_path / "out")},
        "maxDeliveries": 5,
        "claimIdleMs": 600,
        "limits": {"requestsPerMinute": 0, "tokensPerMinute": 0, "tokensPerRequest": 1000},
        **over,
    }
    path = tmp_path / f"worker-{uuid.uuid4().hex[:6]}.yaml"
    path.write_text(yaml.safe_dump(config))
    env = {**os.environ, "POD_NAME": path.stem, "BARGE_API_KEY": "k"}
    return subprocess.Popen(
        [BARGE, "worker", "--config", str(path)], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )


async def test_a_replica_killed_after_its_call_was_paid_is_never_paid_again(
    redis_url: str, start_emulator: Factory, tmp_path: Path
) -> None:
    stream = f"s-{uuid.uuid4().hex[:8]}"
    emu = start_emulator({"sync": {"latencyMs": 1500}})
    await push(redis_url, stream, {"correlationId": "c-1", "payload": {"text": "paid once"}})
    dying = start_worker(tmp_path, redis_url, stream, emu)
    try:
        await until("the replica's call reached the provider", lambda: calls_arrived(emu) == 1)
    finally:
        dying.kill()  # SIGKILL: the grace period ran out, or the kubelet evicted the Pod
        dying.wait(10)
    await until("the provider answered (and billed) the killed replica's call", lambda: emu.store.sync_requests == 1)
    survivor = replica(redis_url, stream, emu, tmp_path, "survivor")
    await asyncio.sleep(0.7)  # the dead replica's message idle past claimIdleMs: claimed, as on the node
    await survivor.run(idle_exit=True, wait_ms=200)
    await survivor.queue.close()
    assert emu.store.sync_requests == 1, "the redelivery of a paid call was paid again"
    assert survivor.model_calls == 0
    dead = await dead_letters(redis_url, stream)
    assert [d["reason"] for d in dead] == ["infrastructure"], "visible: never silently dropped"
    assert "stopped during its model call" in dead[0]["detail"]
    assert await pending(redis_url, stream) == 0
    assert not (tmp_path / "out" / "c-1.json").exists()


async def test_sigterm_finishes_the_call_in_flight_and_calls_nothing_more(
    redis_url: str, start_emulator: Factory, tmp_path: Path
) -> None:
    stream = f"s-{uuid.uuid4().hex[:8]}"
    emu = start_emulator({"sync": {"latencyMs": 800}})
    await push(redis_url, stream, *({"correlationId": f"t-{n}", "payload": {"text": f"doc {n}"}} for n in range(4)))
    # 6 a minute: the first call at once, the next three paced 10 s apart (the scale-down's SIGTERM comes between)
    stopping = start_worker(
        tmp_path, redis_url, stream, emu, limits={"requestsPerMinute": 6, "tokensPerMinute": 0, "tokensPerRequest": 1}
    )
    await until("the first call reached the provider", lambda: calls_arrived(emu) == 1)
    stopping.send_signal(signal.SIGTERM)
    out, _ = stopping.communicate(timeout=60)
    assert stopping.returncode == 0, out
    assert emu.store.sync_requests == 1, f"called after SIGTERM: {out}"
    assert json.loads((tmp_path / "out" / "t-0.json").read_text())["status"] == "succeeded", out
    survivor = replica(redis_url, stream, emu, tmp_path, "survivor")
    await asyncio.sleep(0.7)
    for _ in range(10):
        await survivor.run(idle_exit=True, wait_ms=200)
        if await pending(redis_url, stream) == 0:
            break
        await asyncio.sleep(0.3)
    await survivor.queue.close()
    assert sorted(p.stem for p in (tmp_path / "out").glob("*.json")) == [f"t-{n}" for n in range(4)]
    assert emu.store.sync_requests == 4
    assert not await dead_letters(redis_url, stream)


async def test_a_live_replicas_call_is_never_claimed_by_another(
    redis_url: str, start_emulator: Factory, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, "barge.worker")
    stream = f"s-{uuid.uuid4().hex[:8]}"
    emu = start_emulator({"sync": {"latencyMs": 3000}})  # a slow answer: longer than the claim's idle time
    await push(redis_url, stream, {"correlationId": "slow-1", "payload": {"text": "slow"}})
    calling = replica(redis_url, stream, emu, tmp_path, "calling", claim_idle_ms=900)
    other = replica(redis_url, stream, emu, tmp_path, "other", claim_idle_ms=900)
    first = asyncio.create_task(calling.run(idle_exit=True, wait_ms=200))
    await until("the call reached the provider", lambda: calls_arrived(emu) == 1)
    while not first.done():  # the other replica polls, as replicas do, while the slow call runs
        await other.run(idle_exit=True, wait_ms=200)
        await asyncio.sleep(0.1)
    await first
    for w in (calling, other):
        await w.queue.close()
    assert calls_arrived(emu) == 1, "another replica claimed the in-flight message and paid for it again"
    assert (calling.model_calls, other.model_calls) == (1, 0)
    # held: re-claimed by its replica while in flight, so the other never even received it (no lease was needed)
    assert not [r.message for r in caplog.records if "is being answered by" in r.message]
    assert json.loads((tmp_path / "out" / "slow-1.json").read_text())["status"] == "succeeded"
    assert await pending(redis_url, stream) == 0
    assert not await dead_letters(redis_url, stream)


async def test_an_answer_the_store_refused_is_saved_by_another_replica_without_paying(
    redis_url: str, start_emulator: Factory, tmp_path: Path
) -> None:
    stream = f"s-{uuid.uuid4().hex[:8]}"
    emu = start_emulator()
    blocker = tmp_path / "store"
    blocker.write_text("a file where the output directory should be")  # every write fails
    await push(redis_url, stream, {"correlationId": "c-1", "payload": {"text": "one"}})
    out = {"url": str(blocker / "out")}
    first = replica(redis_url, stream, emu, tmp_path, "first", output=out, maxDeliveries=20)
    await first.run(idle_exit=True, wait_ms=200)
    await first.queue.close()
    assert first.model_calls == 1
    assert await pending(redis_url, stream) == 1, "abandoned for redelivery"
    blocker.unlink()  # the store is back; the redelivery reaches another replica, which never saw the answer
    second = replica(redis_url, stream, emu, tmp_path, "second", output=out, maxDeliveries=20)
    for _ in range(10):
        await asyncio.sleep(0.2)
        await second.run(idle_exit=True, wait_ms=200)
        if await pending(redis_url, stream) == 0:
            break
    await second.queue.close()
    assert second.model_calls == 0, "the other replica paid again for an answer already paid"
    assert emu.store.sync_requests == 1
    assert json.loads((blocker / "out" / "c-1.json").read_text())["status"] == "succeeded"
    r = aioredis.from_url(redis_url)
    assert not await r.keys(f"{stream}:barge:call:*"), "the call record goes once the answer is saved"
    await r.aclose()
