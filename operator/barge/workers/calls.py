"""One paid model call per message: a call record per (tenant, correlationId), kept beside the queue.

The result file (runtime.py) says "answered" only once it is written; between the provider's answer and that write,
and before the queue's ack, a replica can stop (killed past its grace period, evicted, OOM), its store can fail,
or another replica can claim the message (XAUTOCLAIM after `claim_idle_ms`). Each of those redelivered a message
whose call was already paid, and the redelivery paid again. So before calling, a replica asks its call record:

| the record says                | meaning                                         | the replica                  |
| ------------------------------ | ----------------------------------------------- | ---------------------------- |
| nothing                        | never called                                    | takes the lease, calls       |
| `answered` (with the answer)   | paid and answered; the save or the ack was lost | saves that answer, completes |
| the lease is another replica's | a live replica is calling it now                | leaves it to that replica    |
| `calling`, no lease            | a replica stopped during its call: maybe paid   | dead-letters it, never calls |

The lease (`<stream>:<group>:lease:<key>`, a short expiry refreshed while the replica holds the message) tells a
live holder from a dead one; the record (`<stream>:<group>:call:<key>`) outlives it. While a replica holds a
message it also re-claims it to itself every third of `claim_idle_ms` (XCLAIM JUSTID: no delivery counted), so
no other replica claims an in-flight message at all. A record is removed once the answer is saved and acknowledged,
and when the provider says it did not answer (an error response); the result file keeps "answered" from then on.

Redis Streams only: RabbitMQ and Service Bus workers keep the result file and the replica's memory (`NoCalls`).
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from enum import Enum
from typing import Any, Protocol

from barge.workers.queues import Message, Queue, RedisStreams

RECORD_SECONDS = 7 * 24 * 3600
"""How long a call record outlives its last change: longer than any redelivery of its message."""


class Verdict(Enum):
    CALL = "call"
    ANSWERED = "answered"
    BUSY = "busy"
    INTERRUPTED = "interrupted"


@dataclass(frozen=True)
class Begun:
    verdict: Verdict
    record: dict[str, Any] | None = None
    """The answer kept by the replica that was paid for it (ANSWERED)."""
    holder: str = ""
    """Who called (BUSY: the live replica; INTERRUPTED: the one that stopped)."""


class Calls(Protocol):
    async def begin(self, key: str) -> Begun:
        """Right before the model call: may this replica call for `key`?"""
        ...

    async def answered(self, key: str, record: dict[str, Any]) -> None:
        """The provider answered (paid): keep the answer until it is saved."""
        ...

    async def done(self, key: str) -> None:
        """Saved and settled, or the provider said it did not answer: forget the call."""
        ...

    async def release(self, key: str) -> None:
        """This replica no longer holds `key` (its record, if any, stays)."""
        ...

    async def hold(self, messages: list[Message]) -> None:
        """Still working on these: keep their leases and keep other replicas from claiming them."""
        ...

    @property
    def hold_seconds(self) -> float:
        """How often `hold` must run while messages are held."""
        ...


class NoCalls:
    """Queues with no store beside them: every call allowed (the result file and the replica's memory guard)."""

    hold_seconds = 3600.0

    async def begin(self, key: str) -> Begun:
        return Begun(Verdict.CALL)

    async def answered(self, key: str, record: dict[str, Any]) -> None:
        return None

    async def done(self, key: str) -> None:
        return None

    async def release(self, key: str) -> None:
        return None

    async def hold(self, messages: list[Message]) -> None:
        return None


_REFRESH = "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('pexpire', KEYS[1], ARGV[2]) end return 0"
_RELEASE = "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) end return 0"


class RedisCalls:
    """Call records and leases in the queue's own Redis (the stream's keyspace, one prefix per consumer group)."""

    def __init__(self, queue: RedisStreams, record_seconds: int = RECORD_SECONDS) -> None:
        self.queue = queue
        self.redis: Any = queue.redis
        self.prefix = f"{queue.stream}:{queue.group}"
        # a holder refreshes every third of claim_idle_ms; a dead holder's lease is gone a third before its
        # message can be claimed again, so a claimer finds either a live lease or none
        self.lease_ms = max(1, queue.claim_idle_ms * 2 // 3)
        self.record_seconds = record_seconds
        # the consumer (the pod's name) and this process: a restarted container is not its predecessor
        self.token = f"{queue.consumer}/{os.getpid()}/{os.urandom(3).hex()}"
        self._leases: set[str] = set()
        self._refresh = self.redis.register_script(_REFRESH)
        self._release = self.redis.register_script(_RELEASE)

    @property
    def hold_seconds(self) -> float:
        return self.queue.claim_idle_ms / 3000

    def _lease(self, key: str) -> str:
        return f"{self.prefix}:lease:{key}"

    def _record(self, key: str) -> str:
        return f"{self.prefix}:call:{key}"

    async def begin(self, key: str) -> Begun:
        if not await self.redis.set(self._lease(key), self.token, nx=True, px=self.lease_ms):
            holder = await self.redis.get(self._lease(key))
            return Begun(Verdict.BUSY, holder=holder.decode() if isinstance(holder, bytes) else str(holder or ""))
        self._leases.add(key)
        raw = await self.redis.get(self._record(key))
        if raw:
            record = json.loads(raw)
            if record.get("state") == "answered":
                return Begun(Verdict.ANSWERED, record=record.get("record"))
            return Begun(Verdict.INTERRUPTED, holder=str(record.get("by", "")))
        calling = {"state": "calling", "by": self.token, "at": time.time()}
        await self.redis.set(self._record(key), json.dumps(calling), ex=self.record_seconds)
        return Begun(Verdict.CALL)

    async def answered(self, key: str, record: dict[str, Any]) -> None:
        kept = {"state": "answered", "by": self.token, "at": time.time(), "record": record}
        await self.redis.set(self._record(key), json.dumps(kept), ex=self.record_seconds)

    async def done(self, key: str) -> None:
        await self.redis.delete(self._record(key))

    async def release(self, key: str) -> None:
        if key in self._leases:
            self._leases.discard(key)
            await self._release(keys=[self._lease(key)], args=[self.token])

    async def hold(self, messages: list[Message]) -> None:
        for key in list(self._leases):
            await self._refresh(keys=[self._lease(key)], args=[self.token, self.lease_ms])
        if messages:
            q = self.queue
            await self.redis.xclaim(q.stream, q.group, q.consumer, 0, [m.id for m in messages], justid=True)


def calls_for(queue: Queue) -> Calls:
    return RedisCalls(queue) if isinstance(queue, RedisStreams) else NoCalls()
