"""The client the operator builds for an engine pool (REVIEW-3 H6), against real HTTP servers on loopback: an
answer is read up to 16 MiB, a redirect is not followed, HTTP(S)_PROXY in the operator's environment is not used,
and the pool's name may not resolve to a metadata or link-local address. Built exactly as targets.py asks for it
(ClientSpec(..., guarded=False))."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import ClassVar

import pytest

from barge.operator.cache import ClientSpec
from barge.operator.jobs import client_builder
from barge.policy import Policy
from barge.providers import BatchProvider, Outcome, Request
from barge.providers.guard import MAX_ANSWER

ANSWER = (
    b'{"choices":[{"message":{"content":"ok"},"finish_reason":"stop"}],'
    b'"usage":{"prompt_tokens":1,"completion_tokens":1}}'
)


class _Engine(BaseHTTPRequestHandler):
    hits: ClassVar[list[str]] = []
    mode: ClassVar[str] = "ok"
    target: ClassVar[str] = ""
    release: ClassVar[threading.Event] = threading.Event()

    def do_POST(self) -> None:
        self.hits.append(self.path)
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        if self.mode == "redirect":
            self.send_response(307)
            self.send_header("Location", f"{self.target}/latest/meta-data/iam/")
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        if self.mode == "held":  # 6 MiB now, the rest once the test has seen every answer start
            size = 6 << 20
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(size + len(ANSWER)))
            self.end_headers()
            try:
                self.wfile.write(b" " * size)
                self.wfile.flush()
                self.release.wait(5)
                self.wfile.write(ANSWER)
            except OSError:
                pass
            return
        if self.mode == "big":
            size = MAX_ANSWER + (4 << 20)
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(size + len(ANSWER)))
            self.end_headers()
            chunk = b" " * (1 << 20)
            try:
                for _ in range(size >> 20):
                    self.wfile.write(chunk)
                self.wfile.write(ANSWER)
            except OSError:
                pass  # the client stopped reading: what it must do
            return
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(ANSWER)))
        self.end_headers()
        self.wfile.write(ANSWER)

    def log_message(self, *args: object) -> None:
        return


def _serve(host: str, **attrs: object) -> tuple[ThreadingHTTPServer, type[_Engine]]:
    handler = type("Handler", (_Engine,), {"hits": [], "release": threading.Event(), **attrs})
    server = ThreadingHTTPServer((host, 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, handler


@pytest.fixture
def servers() -> Iterator[list[tuple[str, type[_Engine]]]]:
    started = [_serve("127.0.0.1"), _serve("127.0.0.2")]
    yield [(f"http://{s.server_address[0]}:{s.server_address[1]}", h) for s, h in started]
    for s, _ in started:
        s.shutdown()
        s.server_close()


def _pool_client(url: str) -> BatchProvider:
    return client_builder(Policy())(ClientSpec("openai", "none", f"{url}/v1", guarded=False))


def ask() -> Request:
    return Request("c-1", "m", "hi", 10)


async def test_a_pool_answer_is_read_up_to_16_mib(servers: list[tuple[str, type[_Engine]]]) -> None:
    (url, engine), _ = servers
    engine.mode = "big"
    client = _pool_client(url)
    try:
        result = await client.complete(ask())
    finally:
        await client.close()
    assert result.outcome is Outcome.TRANSIENT, (result.outcome, result.error_type)
    assert "MiB" in result.message


async def test_the_answers_in_flight_together_are_bounded(servers: list[tuple[str, type[_Engine]]]) -> None:
    """Each answer under the 16 MiB cap, but 20 of 6 MiB at once: the pool client holds no more than its budget
    (POOL_ANSWER_BUDGET, 64 MiB) of them; the others are refused as read errors (transient, retried later)."""
    import asyncio

    (url, engine), _ = servers
    engine.mode = "held"
    client = _pool_client(url)
    try:
        results = await asyncio.gather(*(client.complete(Request(f"c-{i}", "m", "hi", 10)) for i in range(20)))
    finally:
        engine.release.set()
        await client.close()
    outcomes = [r.outcome for r in results]
    assert Outcome.SUCCEEDED in outcomes
    refused = [r for r in results if r.outcome is Outcome.TRANSIENT]
    assert refused, "all 20 answers (120 MiB) were held at once"
    assert all("in flight" in r.message for r in refused), [r.message for r in refused]


async def test_a_pool_redirect_is_not_followed(servers: list[tuple[str, type[_Engine]]]) -> None:
    (url, engine), (inside, internal) = servers
    engine.mode, engine.target = "redirect", inside
    client = _pool_client(url)
    try:
        result = await client.complete(ask())
    finally:
        await client.close()
    assert internal.hits == [], "the redirect reached the internal address"
    assert result.outcome is not Outcome.SUCCEEDED


async def test_a_pool_client_ignores_proxies_from_the_environment(
    servers: list[tuple[str, type[_Engine]]], monkeypatch: pytest.MonkeyPatch
) -> None:
    (url, engine), (proxy, proxy_handler) = servers
    for name in ("HTTP_PROXY", "http_proxy", "HTTPS_PROXY", "https_proxy", "ALL_PROXY"):
        monkeypatch.setenv(name, proxy)
    monkeypatch.setenv("NO_PROXY", "")
    monkeypatch.setenv("no_proxy", "")
    client = _pool_client(url)
    try:
        result = await client.complete(ask())
    finally:
        await client.close()
    assert proxy_handler.hits == [], "the pool's prompt left through the proxy"
    assert engine.hits == ["/v1/chat/completions"]
    assert result.outcome is Outcome.SUCCEEDED
    assert result.text == "ok"


async def test_a_pool_address_outside_the_cluster_ranges_is_refused(servers: list[tuple[str, type[_Engine]]]) -> None:
    """A tenant can replace the pool's Service with an ExternalName one, so the name leads wherever it says: the
    pool client refuses metadata and link-local addresses at connect time. Shown on loopback (nothing leaves the
    machine): the same client with a check that refuses 127.0.0.1 never reaches the engine."""
    from barge.netguard import AddressCheck, Blocked, guarded_session

    (url, engine), _ = servers
    assert not AddressCheck()("gpu.team-b.svc", "169.254.169.254")
    assert not AddressCheck()("gpu.team-b.svc", "fe80::1")
    assert not AddressCheck()("gpu.team-b.svc", "2002:a9fe:a9fe::1")
    assert AddressCheck()("gpu.team-b.svc", "10.96.12.7")
    session = guarded_session(lambda host, address: address != "127.0.0.1", refuse_redirects=False)
    try:
        with pytest.raises(Blocked, match="endpoint policy"):
            await session.post(f"{url}/v1/chat/completions", data=b"{}")
    finally:
        await session.close()
    assert engine.hits == []
