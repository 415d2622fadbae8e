"""Queue adapters with one small interface: receive, complete, abandon, dead-letter, delivery count.

Redis Streams: consumer groups (XREADGROUP), XACK to complete; an abandoned entry stays pending and is claimed
again (XAUTOCLAIM) once idle for `claim_idle_ms`, which is also how a killed worker's in-flight messages come
back; XPENDING's delivery counter counts deliveries; the dead-letter stream `<stream>:dead` keeps the reason.
RabbitMQ: manual acks; abandon republishes with an incremented `x-barge-deliveries` header (classic queues
do not count deliveries), dead-letter publishes to `<queue>.dead` with the reason, then acks.
"""

from __future__ import annotations

import socket
from dataclasses import dataclass, field
from typing import Any, Protocol


@dataclass
class Message:
    id: str
    body: bytes
    deliveries: int = 1
    handle: Any = field(default=None, repr=False)


class Queue(Protocol):
    async def receive(self, max_messages: int, wait_ms: int) -> list[Message]: ...
    async def complete(self, message: Message) -> None: ...
    async def abandon(self, message: Message) -> None: ...
    async def dead_letter(self, message: Message, reason: str, detail: str) -> None: ...
    async def backlog(self) -> int | None:
        """Messages waiting to be received (what KEDA scales on); None where the adapter cannot tell."""
        ...

    async def close(self) -> None: ...


class RedisStreams:
    def __init__(
        self,
        url: str,
        stream: str,
        group: str,
        *,
        consumer: str = "",
        claim_idle_ms: int = 30_000,
        password: str | None = None,
    ) -> None:
        from redis import asyncio as aioredis

        self.redis = aioredis.from_url(url if "://" in url else f"redis://{url}", password=password)
        self.stream = stream
        self.group = group
        self.consumer = consumer or f"{socket.gethostname()}"
        self.claim_idle_ms = claim_idle_ms
        self.dead = f"{stream}:dead"
        self._ready = False

    async def _ensure_group(self) -> None:
        if self._ready:
            return
        from redis.exceptions import ResponseError

        try:
            await self.redis.xgroup_create(self.stream, self.group, id="0", mkstream=True)
        except ResponseError as exc:
            if "BUSYGROUP" not in str(exc):
                raise
        self._ready = True

    async def _deliveries(self, entry_id: str) -> int:
        info = await self.redis.xpending_range(self.stream, self.group, min=entry_id, max=entry_id, count=1)
        return int(info[0]["times_delivered"]) if info else 1

    async def receive(self, max_messages: int, wait_ms: int) -> list[Message]:
        await self._ensure_group()
        # Entries a dead or slow consumer left pending come first.
        _, claimed, _ = await self.redis.xautoclaim(
            self.stream, self.group, self.consumer, min_idle_time=self.claim_idle_ms, start_id="0-0", count=max_messages
        )
        entries: list[tuple[Any, dict[bytes, bytes]]] = [(eid, fields) for eid, fields in claimed if fields]
        if not entries:
            read: Any = await self.redis.xreadgroup(
                self.group, self.consumer, {self.stream: ">"}, count=max_messages, block=wait_ms
            )
            entries = [e for _, batch in read for e in batch]
        out = []
        for eid, fields in entries:
            entry_id = eid.decode() if isinstance(eid, bytes) else str(eid)
            out.append(Message(entry_id, fields.get(b"body", b""), await self._deliveries(entry_id)))
        return out

    async def complete(self, message: Message) -> None:
        await self.redis.xack(self.stream, self.group, message.id)

    async def abandon(self, message: Message) -> None:
        """Leave it pending: it is claimed again once idle (and its delivery count grows)."""

    async def dead_letter(self, message: Message, reason: str, detail: str) -> None:
        await self.redis.xadd(
            self.dead,
            {
                "body": message.body,
                "reason": reason,
                "detail": detail[:1000],
                "source_id": message.id,
                "deliveries": str(message.deliveries),
            },
        )
        await self.redis.xack(self.stream, self.group, message.id)

    async def backlog(self) -> int | None:
        """The group's lag: entries not yet delivered to it (Redis 7's XINFO GROUPS, KEDA's lagCount)."""
        await self._ensure_group()
        for group in await self.redis.xinfo_groups(self.stream):
            name = group.get("name")
            if (name.decode() if isinstance(name, bytes) else name) == self.group:
                lag = group.get("lag")
                return int(lag) if lag is not None else None
        return None

    async def close(self) -> None:
        await self.redis.aclose()


class RabbitMQ:
    def __init__(self, url: str, queue: str) -> None:
        self.url = url
        self.queue_name = queue
        self.dead = f"{queue}.dead"
        self._conn: Any = None
        self._channel: Any = None
        self._queue: Any = None

    async def _open(self) -> None:
        if self._channel is not None:
            return
        import aio_pika

        self._conn = await aio_pika.connect_robust(self.url)
        self._channel = await self._conn.channel()
        await self._channel.set_qos(prefetch_count=64)
        self._queue = await self._channel.declare_queue(self.queue_name, durable=True)
        await self._channel.declare_queue(self.dead, durable=True)

    async def receive(self, max_messages: int, wait_ms: int) -> list[Message]:
        await self._open()
        out: list[Message] = []
        for _ in range(max_messages):
            incoming = await self._queue.get(no_ack=False, fail=False, timeout=wait_ms / 1000)
            if incoming is None:
                break
            deliveries = int((incoming.headers or {}).get("x-barge-deliveries", 0)) + 1
            message = Message(str(incoming.message_id or incoming.delivery_tag), incoming.body, deliveries, incoming)
            if incoming.redelivered:
                # A consumer died holding it (RabbitMQ requeues without counting): count that delivery in a
                # persistent copy, so a message that kills replicas still reaches maxDeliveries.
                await self._move(
                    message, {**(incoming.headers or {}), "x-barge-deliveries": deliveries}, self.queue_name
                )
                continue
            out.append(message)
        return out

    async def complete(self, message: Message) -> None:
        await message.handle.ack()

    async def _move(self, message: Message, headers: dict[str, Any], routing_key: str) -> None:
        """Publish a persistent copy with `headers` to `routing_key`, then ack the original."""
        import aio_pika

        await self._channel.default_exchange.publish(
            aio_pika.Message(
                message.body,
                headers=headers,
                message_id=message.handle.message_id,
                delivery_mode=aio_pika.DeliveryMode.PERSISTENT,
            ),
            routing_key=routing_key,
        )
        await message.handle.ack()

    async def abandon(self, message: Message) -> None:
        headers = {**(message.handle.headers or {}), "x-barge-deliveries": message.deliveries}
        await self._move(message, headers, self.queue_name)

    async def dead_letter(self, message: Message, reason: str, detail: str) -> None:
        headers: dict[str, Any] = {
            "x-barge-reason": reason,
            "x-barge-detail": detail[:1000],
            "x-barge-deliveries": message.deliveries,
        }
        await self._move(message, headers, self.dead)

    async def backlog(self) -> int | None:
        """Ready messages in the queue (a passive declare's message count, KEDA's QueueLength over AMQP)."""
        await self._open()
        declared = await self._channel.declare_queue(self.queue_name, passive=True)
        return int(declared.declaration_result.message_count)

    async def close(self) -> None:
        if self._conn is not None:
            await self._conn.close()


class ServiceBus:
    """Azure Service Bus in peek-lock mode: complete, abandon (the broker counts deliveries and dead-letters past
    its own MaxDeliveryCount), dead-letter with reason and description. One pooled connection per replica."""

    def __init__(self, connection_string: str, queue: str, *, client: Any = None) -> None:
        if client is None:
            from azure.servicebus.aio import ServiceBusClient

            client = ServiceBusClient.from_connection_string(connection_string)
        self.client = client
        self.queue = queue
        self._receiver: Any = None

    async def _open(self) -> Any:
        if self._receiver is None:
            self._receiver = self.client.get_queue_receiver(queue_name=self.queue, prefetch_count=0)
        return self._receiver

    async def receive(self, max_messages: int, wait_ms: int) -> list[Message]:
        receiver = await self._open()
        received = await receiver.receive_messages(max_message_count=max_messages, max_wait_time=wait_ms / 1000)
        return [
            Message(
                str(m.message_id),
                b"".join(m.body) if not isinstance(m.body, bytes) else m.body,
                int(m.delivery_count or 0) + 1,
                m,
            )
            for m in received
        ]

    async def complete(self, message: Message) -> None:
        await (await self._open()).complete_message(message.handle)

    async def abandon(self, message: Message) -> None:
        await (await self._open()).abandon_message(message.handle)

    async def dead_letter(self, message: Message, reason: str, detail: str) -> None:
        await (await self._open()).dead_letter_message(message.handle, reason=reason, error_description=detail[:4096])

    async def backlog(self) -> int | None:
        """Not visible to a receiver (it needs the management client and Manage rights): KEDA reads it."""
        return None

    async def close(self) -> None:
        if self._receiver is not None:
            await self._receiver.close()
        await self.client.close()
