"""Queue workers against a real redis-server (Debian's) and the emulator's synchronous endpoint: every outcome
path, redelivery after a worker dies, no second model call for an answered message, dead-letter reasons."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

from redis import asyncio as aioredis

from barge.emulator.core import REPLY_PREFIX
from barge.providers import make_provider
from barge.workers.queues import RedisStreams
from barge.workers.runtime import Worker, WorkerSettings
from tests.conftest import Factory


def settings(tmp_path: Path, **over: Any) -> WorkerSettings:
    base: dict[str, Any] = {
        "model": "gpt-4o-mini",
        "output": {"url": str(tmp_path / "out")},
        "maxDeliveries": 3,
        "request": {"system": "Summarise.", "template": "{{ text }}", "maxTokens": 50},
    }
    base.update(over)
    return WorkerSettings.from_config(base)


async def push(url: str, stream: str, *bodies: dict[str, Any] | bytes) -> None:
    r = aioredis.from_url(url)
    for body in bodies:
        await r.xadd(stream, {"body": body if isinstance(body, bytes) else json.dumps(body)})
    await r.aclose()


async def dead_letters(url: str, stream: str) -> list[dict[str, str]]:
    r = aioredis.from_url(url)
    entries = await r.xrange(f"{stream}:dead")
    await r.aclose()
    return [{k.decode(): v.decode() for k, v in fields.items()} for _, fields in entries]


async def pending(url: str, stream: str) -> int:
    r = aioredis.from_url(url)
    info = await r.xpending(stream, "barge")
    await r.aclose()
    return int(info["pending"])


def worker_for(redis_url: str, stream: str, emu_url: str, tmp_path: Path, consumer: str = "w1", **over: Any) -> Worker:
    queue = RedisStreams(redis_url, stream, "barge", consumer=consumer, claim_idle_ms=100)
    return Worker(
        queue, make_provider("openai", "k", base_url=f"{emu_url}/v1", sync_retries=0), settings(tmp_path, **over)
    )


async def test_success_refusal_invalid_and_malformed(redis_url: str, start_emulator: Factory, tmp_path: Path) -> None:
    stream = f"s-{uuid.uuid4().hex[:8]}"
    emu = start_emulator()
    (tmp_path / "claim.json").write_text(json.dumps({"text": "from a claim check"}))
    await push(
        redis_url,
        stream,
        {"correlationId": "inline-1", "tenant": "t1", "payload": {"text": "hello worker"}},
        {"correlationId": "url-1", "tenant": "t1", "payloadUrl": str(tmp_path / "claim.json")},
        b"{not json",
        {"correlationId": "no-field", "payload": {"other": 1}},
    )
    w = worker_for(redis_url, stream, emu.url, tmp_path)
    await w.run(idle_exit=True, wait_ms=200)
    out = {p.stem: json.loads(p.read_text()) for p in (tmp_path / "out").glob("*.json")}
    assert out["inline-1"]["output"] == f"{REPLY_PREFIX}hello worker"
    assert out["url-1"]["output"] == f"{REPLY_PREFIX}from a claim check"
    assert out["inline-1"]["status"] == "succeeded"
    dead = await dead_letters(redis_url, stream)
    assert sorted(d["reason"] for d in dead) == ["invalid", "invalid"]
    assert any("template" in d["detail"] or "other" in d["detail"] or "text" in d["detail"] for d in dead)
    assert await pending(redis_url, stream) == 0
    await w.queue.close()

    refusing = start_emulator({"sync": {"outcomes": {"refusal": 1.0}}})
    stream2 = f"s-{uuid.uuid4().hex[:8]}"
    await push(redis_url, stream2, {"correlationId": "r-1", "payload": {"text": "x"}})
    w2 = worker_for(redis_url, stream2, refusing.url, tmp_path)
    await w2.run(idle_exit=True, wait_ms=200)
    assert json.loads((tmp_path / "out" / "r-1.json").read_text())["status"] == "refused"
    assert await pending(redis_url, stream2) == 0, "a refusal is an answer: completed, not redelivered"
    await w2.queue.close()


async def test_invalid_request_is_dead_lettered_once(redis_url: str, start_emulator: Factory, tmp_path: Path) -> None:
    stream = f"s-{uuid.uuid4().hex[:8]}"
    emu = start_emulator({"sync": {"outcomes": {"invalid_request": 1.0}}})
    await push(redis_url, stream, {"correlationId": "bad-1", "payload": {"text": "x"}})
    w = worker_for(redis_url, stream, emu.url, tmp_path)
    await w.run(idle_exit=True, wait_ms=200)
    dead = await dead_letters(redis_url, stream)
    assert [d["reason"] for d in dead] == ["invalid"]
    assert w.model_calls == 1
    await w.queue.close()


async def test_infrastructure_failures_redeliver_then_dead_letter(
    redis_url: str, start_emulator: Factory, tmp_path: Path
) -> None:
    stream = f"s-{uuid.uuid4().hex[:8]}"
    emu = start_emulator({"sync": {"outcomes": {"server_error": 1.0}}})
    await push(redis_url, stream, {"correlationId": "flaky-1", "payload": {"text": "x"}})
    w = worker_for(redis_url, stream, emu.url, tmp_path)
    for _ in range(20):
        if await dead_letters(redis_url, stream):
            break
        await w.run(idle_exit=True, wait_ms=150)
    dead = await dead_letters(redis_url, stream)
    assert [d["reason"] for d in dead] == ["infrastructure"]
    assert dead[0]["deliveries"] == "3"
    assert w.model_calls == 3  # maxDeliveries
    assert await pending(redis_url, stream) == 0
    await w.queue.close()


async def test_killed_worker_message_is_redelivered_and_answered_once(
    redis_url: str, start_emulator: Factory, tmp_path: Path
) -> None:
    stream = f"s-{uuid.uuid4().hex[:8]}"
    emu = start_emulator()
    await push(redis_url, stream, {"correlationId": "c-1", "payload": {"text": "survive"}})
    dying = RedisStreams(redis_url, stream, "barge", consumer="dies", claim_idle_ms=100)
    taken = await dying.receive(1, 200)  # read, never acknowledged: the replica was killed mid-message
    assert len(taken) == 1
    await dying.close()
    w = worker_for(redis_url, stream, emu.url, tmp_path, consumer="survivor")
    import asyncio

    await asyncio.sleep(0.2)
    await w.run(idle_exit=True, wait_ms=200)
    assert json.loads((tmp_path / "out" / "c-1.json").read_text())["output"] == f"{REPLY_PREFIX}survive"
    assert w.model_calls == 1
    # the same message delivered again (e.g. its ack was lost): completed without a second model call
    await push(redis_url, stream, {"correlationId": "c-1", "payload": {"text": "survive"}})
    await w.run(idle_exit=True, wait_ms=200)
    assert w.model_calls == 1
    assert emu.store.sync_requests == 1
    assert await pending(redis_url, stream) == 0
    await w.queue.close()


async def test_rate_limit_share_is_enforced(redis_url: str, start_emulator: Factory, tmp_path: Path) -> None:
    stream = f"s-{uuid.uuid4().hex[:8]}"
    emu = start_emulator({"sync": {"quota": {"requestsPerMinute": 6}}})
    await push(redis_url, stream, *({"correlationId": f"m-{n}", "payload": {"text": "x"}} for n in range(6)))
    w = worker_for(redis_url, stream, emu.url, tmp_path, limits={"requestsPerMinute": 60})
    await w.run(idle_exit=True, wait_ms=200)
    assert emu.store.rate_limited == 0, "a replica paces itself: one request a second, never a burst"
    assert len(list((tmp_path / "out").glob("*.json"))) == 6
    unlimited = start_emulator({"sync": {"quota": {"requestsPerMinute": 3}}})
    stream2 = f"s-{uuid.uuid4().hex[:8]}"
    await push(redis_url, stream2, *({"correlationId": f"u-{n}", "payload": {"text": "x"}} for n in range(4)))
    w2 = worker_for(redis_url, stream2, unlimited.url, tmp_path / "u", maxDeliveries=1)
    await w2.run(idle_exit=True, wait_ms=200)
    assert unlimited.store.rate_limited > 0, "without its limiter the same worker runs into 429s"
    await w2.queue.close()
    await w.queue.close()


async def test_backlog_metric_is_the_groups_lag(redis_url: str, start_emulator: Factory, tmp_path: Path) -> None:
    stream = f"s-{uuid.uuid4().hex[:8]}"
    await push(redis_url, stream, *({"correlationId": f"b-{n}", "payload": {"text": "x"}} for n in range(7)))
    w = worker_for(redis_url, stream, start_emulator().url, tmp_path, pool="ingest", worker="doc-ingest")
    labels = {"pool": "ingest", "worker": "doc-ingest"}
    dead = {**labels, "reason": "infrastructure"}
    assert w.metrics.registry.get_sample_value("barge_worker_dead_lettered_total", dead) == 0  # listed from 0
    await w._sample_backlog()
    assert w.metrics.registry.get_sample_value("barge_worker_backlog", labels) == 7
    await w.run(idle_exit=True, wait_ms=200)
    assert await w.queue.backlog() == 0
    assert w.metrics.registry.get_sample_value("barge_worker_messages_total", {**labels, "outcome": "succeeded"}) == 7
    await w.queue.close()


async def test_rabbitmq_outcomes(rabbitmq_url: str, start_emulator: Factory, tmp_path: Path) -> None:
    import aio_pika

    from barge.workers.queues import RabbitMQ

    name = f"q-{uuid.uuid4().hex[:8]}"
    conn = await aio_pika.connect_robust(rabbitmq_url)
    channel = await conn.channel()
    await channel.declare_queue(name, durable=True)
    for body in (
        {"correlationId": "ok-1", "payload": {"text": "rabbit"}},
        {"correlationId": "ok-1", "payload": {"text": "rabbit"}},
        b"garbage",
    ):
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        await channel.default_exchange.publish(aio_pika.Message(data), routing_key=name)
    assert await RabbitMQ(rabbitmq_url, name).backlog() == 3  # what barge_worker_backlog reports
    emu = start_emulator()
    w = Worker(
        RabbitMQ(rabbitmq_url, name),
        make_provider("openai", "k", base_url=f"{emu.url}/v1", sync_retries=0),
        settings(tmp_path),
    )
    w.settings = settings(tmp_path)
    for _ in range(3):
        await w.run(idle_exit=True, wait_ms=300)
    assert json.loads((tmp_path / "out" / "ok-1.json").read_text())["output"] == f"{REPLY_PREFIX}rabbit"
    assert w.model_calls == 1, "the duplicate was completed without a second model call"

    broken = start_emulator({"sync": {"outcomes": {"server_error": 1.0}}})
    await channel.default_exchange.publish(
        aio_pika.Message(json.dumps({"correlationId": "flaky", "payload": {"text": "x"}}).encode()), routing_key=name
    )
    w2 = Worker(
        RabbitMQ(rabbitmq_url, name),
        make_provider("openai", "k", base_url=f"{broken.url}/v1", sync_retries=0),
        settings(tmp_path),
    )
    for _ in range(6):
        await w2.run(idle_exit=True, wait_ms=300)
    assert w2.model_calls == 3
    dead = await channel.declare_queue(f"{name}.dead", durable=True)
    reasons = []
    while (message := await dead.get(fail=False, timeout=1)) is not None:
        reasons.append(message.headers["x-barge-reason"])
        await message.ack()
    assert sorted(reasons) == ["infrastructure", "invalid"]
    await w.queue.close()
    await w2.queue.close()
    await conn.close()
