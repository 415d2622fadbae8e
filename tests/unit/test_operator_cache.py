"""The operator's shared reads (operator/cache.py) and engine loops (operator/engine.py), with real provider clients."""

from __future__ import annotations

import asyncio
import contextvars
import threading
from typing import Any

import pytest

from barge.operator.cache import Clients, ClientSpec, TTLCache, Watched
from barge.operator.engine import Engine, EngineLoop
from barge.operator.jobs import client_builder
from barge.operator.kube import NotFound
from barge.policy import Policy


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


async def test_one_load_for_many_readers_and_kept_for_the_ttl() -> None:
    clock, loads = Clock(), []
    cache: TTLCache[str, str] = TTLCache(30.0, clock)

    async def load() -> str:
        loads.append(1)
        await asyncio.sleep(0)
        return f"v{len(loads)}"

    assert await asyncio.gather(*(cache.get("ns/s", load) for _ in range(50))) == ["v1"] * 50
    clock.now = 29.0
    assert await cache.get("ns/s", load) == "v1"
    clock.now = 30.0
    assert await cache.get("ns/s", load) == "v2", "read again once the TTL passed"
    cache.drop("ns/s")
    assert await cache.get("ns/s", load) == "v3"


async def test_a_failed_read_is_not_kept() -> None:
    cache: TTLCache[str, str] = TTLCache(30.0, Clock())
    answers: list[Any] = [NotFound("Secret 's' not found"), "key"]

    async def load() -> str:
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return str(answer)

    with pytest.raises(NotFound):
        await cache.get("s", load)
    assert await cache.get("s", load) == "key", "a Secret created after a miss is read at the next poll"


async def test_a_cancelled_read_leaves_the_waiters_to_read_themselves() -> None:
    cache: TTLCache[str, str] = TTLCache(30.0, Clock())
    started = asyncio.Event()

    async def stuck() -> str:
        started.set()
        await asyncio.Event().wait()
        return "never"

    async def quick() -> str:
        return "read"

    first = asyncio.create_task(cache.get("s", stuck))
    await started.wait()
    waiter = asyncio.create_task(cache.get("s", quick))
    await asyncio.sleep(0)
    first.cancel()
    assert await waiter == "read"
    with pytest.raises(asyncio.CancelledError):
        await first


def test_watched_objects_follow_the_events() -> None:
    pools = Watched()
    body = {"metadata": {"namespace": "a", "name": "gpu"}, "status": {"readyReplicas": 1}}
    pools.observe({"type": "ADDED", "object": body})
    assert pools.get("a", "gpu") == body
    assert pools.get("b", "gpu") is None
    pools.observe({"type": "DELETED", "object": body})
    assert pools.get("a", "gpu") is None


def spec(key: str, url: str = "http://127.0.0.1:9/v1") -> ClientSpec:
    return ClientSpec("openai", key, url)


async def test_clients_are_reused_per_credential_and_url_and_closed_when_evicted() -> None:
    clock = Clock()
    clients = Clients(client_builder(Policy()), limit=2, idle=600.0, clock=clock)
    async with clients.lease(spec("sk-a")) as first:
        pass
    async with clients.lease(spec("sk-a")) as again:
        assert again is first
    assert clients.built == 1
    async with clients.lease(spec("sk-b")) as other, clients.lease(spec("sk-a", "http://127.0.0.1:8/v1")) as third:
        assert len({id(first), id(other), id(third)}) == 3
    assert first.client.is_closed(), "least recently used, over the limit of 2: closed"  # type: ignore[attr-defined]
    assert not other.client.is_closed()  # type: ignore[attr-defined]
    clock.now = 600.0
    async with clients.lease(spec("sk-c")) as fresh:
        assert other.client.is_closed(), "idle for 600 s: closed"  # type: ignore[attr-defined]
    await clients.close()
    assert fresh.client.is_closed()  # type: ignore[attr-defined]


async def test_a_client_in_use_is_closed_only_when_released() -> None:
    clients = Clients(client_builder(Policy()), limit=1)
    async with clients.lease(spec("sk-a")) as busy, clients.lease(spec("sk-b")):
        assert not busy.client.is_closed()  # type: ignore[attr-defined]
    assert busy.client.is_closed()  # type: ignore[attr-defined]
    await clients.close()


def test_the_secret_is_not_in_the_repr() -> None:
    assert "sk-secret" not in repr(spec("sk-secret"))


TENANT: contextvars.ContextVar[str] = contextvars.ContextVar("tenant", default="")


async def test_engine_runs_work_on_its_own_thread_in_the_callers_context() -> None:
    engine = Engine(client_builder(Policy()), threads=2)
    try:
        TENANT.set("acme")

        async def work(loop: EngineLoop) -> tuple[int, str, bool]:
            return threading.get_ident(), TENANT.get(), loop is engine.loop_for("ns/job/uid")

        ident, tenant, own = await engine.call("ns/job/uid", work)
        assert (ident != threading.get_ident(), tenant, own) == (True, "acme", True)
        assert engine.loop_for("ns/job/uid") is engine.loop_for("ns/job/uid")

        async def fails(_: EngineLoop) -> None:
            raise NotFound("gone")

        with pytest.raises(NotFound):
            await engine.call("ns/job/uid", fails)
    finally:
        engine.stop()


async def test_a_cancelled_caller_waits_for_the_step_to_unwind() -> None:
    engine = Engine(client_builder(Policy()), threads=1)
    started, recorded = threading.Event(), threading.Event()

    async def step(_: EngineLoop) -> None:
        async def create() -> None:
            await asyncio.sleep(0.05)
            recorded.set()  # JobRunner records a create in flight, shielded, and settles it before the step ends

        inflight = asyncio.ensure_future(create())
        try:
            started.set()
            await asyncio.shield(inflight)
        finally:
            await inflight

    try:
        caller = asyncio.create_task(engine.call("k", step))
        await asyncio.to_thread(started.wait)
        caller.cancel()
        with pytest.raises(asyncio.CancelledError):
            await caller
        assert recorded.is_set(), "the caller went on only once the step had unwound"
    finally:
        engine.stop()


async def test_base_url_addresses_are_resolved_once_per_ttl_and_still_checked(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every step admits its job again: the base URL's host is looked up once per TTL, not per step, and what it
    resolved to is still checked against the policy each time; a refused URL is never looked up."""
    from barge.operator import admission
    from barge.policy import Endpoint, Refused

    looked_up: list[str] = []
    answers = {"llm.example.com": ["93.184.216.34"], "rebind.example.com": ["127.0.0.1"]}

    def resolve(host: str) -> list[str]:
        looked_up.append(host)
        return answers[host]

    monkeypatch.setattr(admission, "resolve", resolve)
    monkeypatch.setattr(admission, "ADDRESSES", TTLCache[str, list[str]](60.0))
    policy = Policy(endpoints=(Endpoint("llm.example.com"), Endpoint("rebind.example.com")))
    for _ in range(5):
        await admission.check_base_url(policy, "openai", "https://llm.example.com/v1")
    assert looked_up == ["llm.example.com"]
    for _ in range(2):
        with pytest.raises(Refused, match=r"resolves to 127\.0\.0\.1"):
            await admission.check_base_url(policy, "openai", "https://rebind.example.com/v1")
    assert looked_up == ["llm.example.com", "rebind.example.com"]
    with pytest.raises(Refused, match="allowlist"):
        await admission.check_base_url(policy, "openai", "https://elsewhere.example.com/v1")
    assert len(looked_up) == 2
