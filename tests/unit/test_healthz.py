"""/healthz and the engine loops (review 3, M10; L8's liveness half): an engine loop blocked by one job's
synchronous work makes /healthz answer 503 naming it, and ok again once it wakes."""

from __future__ import annotations

import asyncio
import socket
import threading
import urllib.error
import urllib.request
from pathlib import Path
from typing import cast

import pytest

from barge.batch import prices
from barge.config import OperatorConfig
from barge.ledger import Ledger
from barge.operator import looplag, metrics
from barge.operator.jobs import Context
from barge.operator.kube import Kube


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def get(port: int) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=5) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


async def until(port: int, status: int) -> tuple[int, str]:
    for _ in range(200):
        got = await asyncio.to_thread(get, port)
        if got[0] == status:
            return got
        await asyncio.sleep(0.05)
    return got


async def test_a_blocked_engine_loop_fails_healthz(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(looplag, "STUCK_SECONDS", 0.5)
    ctx = Context(OperatorConfig(), Ledger(str(tmp_path / "l.db")), cast(Kube, None), prices.load())
    engine = ctx.engine  # starts the engine loops, whose lags join ctx.lags
    port = free_port()
    runner = await metrics.start_server(ctx, port)
    release = threading.Event()
    try:
        assert await until(port, 200) == (200, "ok")
        blocked = engine.loops[0]
        blocked.loop.call_soon_threadsafe(release.wait, 30)  # a synchronous write to a stalled mount
        status, text = await until(port, 503)
        assert (status, text) == (503, f"engine loop(s) not waking up: {blocked.name}")
        release.set()
        assert await until(port, 200) == (200, "ok")
    finally:
        release.set()
        await runner.cleanup()
        ctx.stop_engine()


def test_kopfs_own_loop_is_never_reported() -> None:
    old = looplag.Lag()
    old.woke -= 3600
    assert looplag.stuck({"main": old, "engine-0": looplag.Lag()}) == []
    assert looplag.stuck({"main": old, "engine-1": old}) == ["engine-1"]
