"""Poison messages for queue workers, against a real redis-server: each message ends in its own visible state
(answered, dead-lettered with a reason, or abandoned and counted), its siblings of the same receive are
answered once, and an output-store outage never makes the model be paid twice."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

from tests.conftest import Factory
from tests.integration.test_workers import dead_letters, pending, push, worker_for


async def test_poison_messages_do_not_touch_their_siblings(
    redis_url: str, start_emulator: Factory, tmp_path: Path
) -> None:
    stream = f"s-{uuid.uuid4().hex[:8]}"
    emu = start_emulator()
    await push(
        redis_url,
        stream,
        {"correlationId": "good-1", "payload": {"text": "first"}},
        {"correlationId": "self-key", "payload": {"self": 1, "text": "a key named self"}},
        b"[" * 100_000 + b"]" * 100_000,  # deep JSON
        {"correlationId": "huge", "payload": {"text": "x", "n": 1_000_000_000}},
        {"correlationId": "good-2", "payload": {"text": "second"}},
    )
    w = worker_for(
        redis_url,
        stream,
        emu.url,
        tmp_path,
        request={"template": "{{ text * (n if n is defined else 1) }}", "maxTokens": 20},
    )
    await w.run(idle_exit=True, wait_ms=200)
    answered = {p.stem for p in (tmp_path / "out").glob("*.json")}
    assert answered == {"good-1", "good-2", "self-key"}
    dead = await dead_letters(redis_url, stream)
    assert sorted(d["reason"] for d in dead) == ["invalid", "invalid"]
    assert any("nested" in d["detail"] or "recursion" in d["detail"] for d in dead)
    assert any("template limit" in d["detail"] for d in dead)
    assert w.model_calls == 3, "each answerable message paid once, nothing else"
    assert await pending(redis_url, stream) == 0
    await w.queue.close()


async def test_output_store_outage_abandons_and_never_pays_twice(
    redis_url: str, start_emulator: Factory, tmp_path: Path
) -> None:
    stream = f"s-{uuid.uuid4().hex[:8]}"
    emu = start_emulator()
    blocker = tmp_path / "store"
    blocker.write_text("a file where the output directory should be")  # every write fails
    await push(
        redis_url,
        stream,
        {"correlationId": "c-1", "payload": {"text": "one"}},
        {"correlationId": "c-2", "payload": {"text": "two"}},
    )
    w = worker_for(redis_url, stream, emu.url, tmp_path, output={"url": str(blocker / "out")}, maxDeliveries=20)
    await w.run(idle_exit=True, wait_ms=200)
    assert w.model_calls == 2
    assert await pending(redis_url, stream) == 2, "abandoned for redelivery, not lost"
    errors = w.metrics.registry.get_sample_value(
        "barge_worker_errors_total", {"pool": "", "worker": "", "kind": "storage"}
    )
    assert errors is not None
    assert errors >= 2  # each delivery while the store is down (redeliveries may come within the same run)
    blocker.unlink()  # the store is back
    for _ in range(20):
        await w.run(idle_exit=True, wait_ms=150)
        if await pending(redis_url, stream) == 0:
            break
    assert w.model_calls == 2, "the redelivered messages were saved from memory, not asked again"
    saved = {p.stem: json.loads(p.read_text()) for p in (blocker / "out").glob("*.json")}
    assert set(saved) == {"c-1", "c-2"}
    await w.queue.close()


async def test_rabbitmq_message_that_kills_replicas_is_dead_lettered(
    rabbitmq_url: str, start_emulator: Factory, tmp_path: Path
) -> None:
    """A replica that dies holding a message (no ack) makes RabbitMQ requeue it without counting; Barge counts
    that delivery itself, so the message is dead-lettered after maxDeliveries instead of looping forever."""
    import aio_pika

    from barge.providers import make_provider
    from barge.workers.queues import RabbitMQ
    from barge.workers.runtime import Worker
    from tests.integration.test_workers import settings

    name = f"q-{uuid.uuid4().hex[:8]}"
    conn = await aio_pika.connect_robust(rabbitmq_url)
    channel = await conn.channel()
    await channel.declare_queue(name, durable=True)
    await channel.default_exchange.publish(
        aio_pika.Message(json.dumps({"correlationId": "killer", "payload": {"text": "x"}}).encode()), routing_key=name
    )
    seen = []
    for _ in range(6):  # replicas that crash while handling it: receive, then the connection drops
        doomed = RabbitMQ(rabbitmq_url, name)
        got = await doomed.receive(1, 1000)
        seen += [m.deliveries for m in got]
        await doomed.close()
    assert seen == sorted(seen)
    assert seen[-1] > seen[0], "deliveries grow although nothing was ever acked"
    emu = start_emulator()
    w = Worker(RabbitMQ(rabbitmq_url, name), make_provider("openai", "k", base_url=f"{emu.url}/v1"), settings(tmp_path))
    await w.run(idle_exit=True, wait_ms=500)
    assert w.model_calls == 0
    dead = await channel.declare_queue(f"{name}.dead", durable=True)
    letter = await dead.get(timeout=5)
    assert letter.headers["x-barge-reason"] == "infrastructure"
    await letter.ack()
    await w.queue.close()
    await conn.close()
