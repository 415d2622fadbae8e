"""What the job daemons read on every poll, read once and shared: Secrets, namespace labels, pools, provider clients.

Hundreds of live jobs each used to GET their Secret and namespace and build a provider client on every poll.
- Secrets and namespace labels: a short-TTL cache (TTL_SECONDS) keyed by namespace/name, shared by every job, with
  one read in flight per key (500 jobs started at once cost one GET). Chosen over a watch-invalidated cache because
  a watch needs list/watch on every Secret of the namespace, and the operator's RBAC is "get Secrets, by name"
  (least privilege). Only found values are kept: a missing or refused Secret is read again at the next poll, so a
  Secret created later is picked up at once. A rotated key is seen within TTL_SECONDS; the delete handler reads
  fresh (`fresh=True`), so a deleted Secret is never used to cancel.
- InferencePools: from the watch Kopf already runs (the operator lists and watches them anyway), so a pool's
  readiness is never older than its last event; a pool not seen yet is read from the API server.
- Provider clients (`Clients`): one per (provider, credential hash, base URL, API version), built on first use and
  kept while used (LRU-bounded, closed when idle), as the SDKs advise: each client owns a connection pool.
"""

from __future__ import annotations

import asyncio
import hashlib
import time
from collections import OrderedDict
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from barge.operator.kube import Kube
from barge.providers import BatchProvider

TTL_SECONDS = 30.0
"""How long a Secret's value or a namespace's labels are reused (a rotated key is used within this)."""
CLIENTS = 64
"""Provider clients kept at most per engine loop (least recently used closed first)."""
IDLE_SECONDS = 600.0
"""A client unused this long is closed."""

K = TypeVar("K")
V = TypeVar("V")


class _Abandoned(Exception):
    """The load that others waited for was cancelled."""


class TTLCache(Generic[K, V]):
    """Values kept `ttl` seconds after they were read; one load in flight per key; failures are not kept."""

    def __init__(self, ttl: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.ttl = ttl
        self.clock = clock
        self._values: dict[K, tuple[float, V]] = {}
        self._loading: dict[K, asyncio.Future[V]] = {}
        self.loads = 0

    async def get(self, key: K, load: Callable[[], Awaitable[V]]) -> V:
        found = self._values.get(key)
        if found is not None and self.clock() - found[0] < self.ttl:
            return found[1]
        while (pending := self._loading.get(key)) is not None:
            try:
                return await asyncio.shield(pending)
            except _Abandoned:  # its loader was cancelled: load it here
                continue
        future: asyncio.Future[V] = asyncio.get_running_loop().create_future()
        self._loading[key] = future
        try:
            self.loads += 1
            value = await load()
        except BaseException as exc:
            future.set_exception(exc if isinstance(exc, Exception) else _Abandoned())
            future.exception()  # marked retrieved: there may be no waiter
            raise
        else:
            self._values[key] = (self.clock(), value)
            future.set_result(value)
            return value
        finally:
            del self._loading[key]

    def drop(self, key: K) -> None:
        self._values.pop(key, None)


class CachedKube(Kube):
    """Kube whose Secret and namespace-label reads go through TTL caches (see the module docstring)."""

    def __init__(self, ttl: float = TTL_SECONDS) -> None:
        super().__init__()
        self.secrets: TTLCache[tuple[str, str], dict[str, str]] = TTLCache(ttl)
        self.namespaces: TTLCache[str, dict[str, str]] = TTLCache(ttl)

    async def namespace_labels(self, name: str) -> dict[str, str]:
        load = super().namespace_labels
        return dict(await self.namespaces.get(name, lambda: load(name)))

    async def secret_data(self, namespace: str, name: str, *, fresh: bool = False) -> dict[str, str]:
        if fresh:
            self.secrets.drop((namespace, name))
        load = super().secret_data
        return dict(await self.secrets.get((namespace, name), lambda: load(namespace, name)))


@dataclass
class Watched:
    """Objects of one kind as the watch last delivered them, by (namespace, name)."""

    bodies: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)

    def observe(self, event: Mapping[str, Any]) -> None:
        body = event.get("object") or {}
        meta = body.get("metadata") or {}
        key = (str(meta.get("namespace") or ""), str(meta.get("name") or ""))
        if event.get("type") == "DELETED":
            self.bodies.pop(key, None)
        elif key[1]:
            self.bodies[key] = dict(body)

    def get(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self.bodies.get((namespace, name))


@dataclass(frozen=True)
class ClientSpec:
    """What a provider client is built from; `secret` never appears in a repr (logs, tracebacks)."""

    kind: str
    secret: str = field(repr=False)
    base_url: str = ""
    api_version: str = ""
    guarded: bool = True
    """Connections checked against the admin's endpoint policy (every provider but an engine pool's vLLM)."""

    @property
    def key(self) -> tuple[str, str, str, str, bool]:
        digest = hashlib.sha256(self.secret.encode()).hexdigest()
        return (self.kind, digest, self.base_url, self.api_version, self.guarded)


@dataclass
class _Entry:
    provider: BatchProvider
    used: float
    users: int = 0
    evicted: bool = False


class Clients:
    """The provider clients of one event loop (a client is bound to the loop it was built on)."""

    def __init__(
        self,
        build: Callable[[ClientSpec], BatchProvider],
        limit: int = CLIENTS,
        idle: float = IDLE_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.build = build
        self.limit = limit
        self.idle = idle
        self.clock = clock
        self._entries: OrderedDict[tuple[str, str, str, str, bool], _Entry] = OrderedDict()
        self.built = 0

    @asynccontextmanager
    async def lease(self, spec: ClientSpec) -> AsyncIterator[BatchProvider]:
        key = spec.key
        entry = self._entries.get(key)
        if entry is None:
            entry = self._entries[key] = _Entry(self.build(spec), self.clock())
            self.built += 1
        self._entries.move_to_end(key)
        entry.users += 1
        entry.used = self.clock()
        await self._trim()
        try:
            yield entry.provider
        finally:
            entry.users -= 1
            entry.used = self.clock()
            if entry.evicted and entry.users == 0:
                await entry.provider.close()

    async def _trim(self) -> None:
        now = self.clock()
        stale = [k for k, e in self._entries.items() if e.users == 0 and now - e.used >= self.idle]
        over = len(self._entries) - len(stale) - self.limit
        stale += [k for k in self._entries if k not in stale][: max(0, over)]
        for key in stale:
            entry = self._entries.pop(key)
            entry.evicted = True
            if entry.users == 0:
                await entry.provider.close()

    async def close(self) -> None:
        entries, self._entries = list(self._entries.values()), OrderedDict()
        for entry in entries:
            await entry.provider.close()
