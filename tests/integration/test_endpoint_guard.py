"""Provider clients in operator mode, against real HTTP servers on loopback: every connection asks the endpoint
policy (so a name that resolves elsewhere later is still refused), redirects are not followed, and whatever a
host answers is repeated only as a short printable line (server-side request forgery with the answer reflected
back was one of issue 12's attacks)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import ClassVar

import pytest

from barge import policy as p
from barge.providers import Outcome, Request, guard, jsonl, make_provider
from tests.conftest import Factory

LEAK = "INTERNAL-ONLY-RESPONSE-BODY"


class _Hostile(BaseHTTPRequestHandler):
    hits: ClassVar[list[str]] = []
    redirect_to = ""

    def do_POST(self) -> None:
        self.hits.append(self.path)
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        if self.redirect_to:
            self.send_response(307)
            self.send_header("Location", self.redirect_to)
            self.end_headers()
            return
        body = (f"<html>\x1b[2J{LEAK} " * 500).encode()
        self.send_response(500)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        return


@pytest.fixture
def hostile() -> Iterator[tuple[str, type[_Hostile]]]:
    handler = type("Handler", (_Hostile,), {"hits": []})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}", handler
    server.shutdown()
    server.server_close()


def ask() -> Request:
    return Request("c-1", "gpt-4o-mini", "hello", 10)


async def test_ssrf_to_loopback_is_refused_at_connect_time(start_emulator: Factory) -> None:
    emu = start_emulator()
    closed = p.Policy()  # 127.0.0.1 not allowlisted: what a rebinding name would resolve to later
    provider = make_provider(
        "openai", "k", base_url=f"{emu.url}/v1", sync_retries=0, guard=lambda h, a: p.address_allowed(closed, h, a)
    )
    result = await provider.complete(ask())
    await provider.close()
    assert result.outcome is Outcome.TRANSIENT
    assert "endpoint policy" in result.message
    assert emu.store.sync_requests == 0, "not one byte reached the loopback service"

    opened = p.Policy(endpoints=(p.Endpoint("127.0.0.1", private=True),))
    provider = make_provider(
        "openai", "k", base_url=f"{emu.url}/v1", sync_retries=0, guard=lambda h, a: p.address_allowed(opened, h, a)
    )
    assert (await provider.complete(ask())).outcome is Outcome.SUCCEEDED
    await provider.close()
    assert emu.store.sync_requests == 1


async def test_ssrf_through_a_redirect_is_not_followed(
    start_emulator: Factory, hostile: tuple[str, type[_Hostile]]
) -> None:
    inside = start_emulator()  # stands for the metadata service or an internal API
    url, handler = hostile
    handler.redirect_to = f"{inside.url}/v1/chat/completions"
    provider = make_provider("openai", "k", base_url=f"{url}/v1", sync_retries=0, guard=lambda h, a: True)
    result = await provider.complete(ask())
    await provider.close()
    assert handler.hits == ["/v1/chat/completions"]
    assert inside.store.sync_requests == 0, "the redirect was not followed"
    assert result.outcome is not Outcome.SUCCEEDED


async def test_ssrf_error_body_is_never_reflected_raw(hostile: tuple[str, type[_Hostile]]) -> None:
    url, _ = hostile
    provider = make_provider("openai", "k", base_url=f"{url}/v1", sync_retries=0, guard=lambda h, a: True)
    result = await provider.complete(ask())
    await provider.close()
    assert result.outcome is Outcome.TRANSIENT
    assert len(result.message) <= p.MAX_ERROR_CHARS
    assert "\x1b" not in result.message
    assert result.message.count(LEAK) <= 10  # bounded: at most a fragment of the 500 copies


class _Endless(BaseHTTPRequestHandler):
    """A hostile endpoint (nothing real answers so): 200 with a body that does not end (64 MiB, chunked), or a
    results file of `LINES` short lines, sent as it is made."""

    LINE = b'{"custom_id": "c", "result": {"type": "errored"}}\n'
    LINES = 400_000  # 20 MB: more than MAX_ANSWER
    sent: ClassVar[list[int]] = []

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self._stream(b'{"choices": [{"message": {"content": "' + b"x" * 65536, forever=True)

    def do_GET(self) -> None:  # a results file, one short line after another
        self._stream(self.LINE * 1000, forever=False)

    def _stream(self, chunk: bytes, *, forever: bool) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        sent = 0
        try:
            for _ in range(1000 if forever else self.LINES // 1000):  # "forever": 64 MiB, 4x the cap
                self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                sent += len(chunk)
            self.wfile.write(b"0\r\n\r\n")
        except OSError:  # the client stopped reading
            pass
        self.sent.append(sent)

    def log_message(self, *args: object) -> None:
        return


async def test_an_endless_answer_is_not_read_past_the_cap_but_a_results_file_is_read_whole() -> None:
    server = ThreadingHTTPServer(("127.0.0.1", 0), type("Handler", (_Endless,), {"sent": []}))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}"
    opened = p.Policy(endpoints=(p.Endpoint("127.0.0.1", private=True),))
    provider = make_provider(
        "anthropic", "k", base_url=url, sync_retries=0, guard=lambda h, a: p.address_allowed(opened, h, a)
    )
    try:
        result = await provider.complete(Request("c-1", "claude-sonnet-4-6", "hello", 10))
        assert result.outcome is Outcome.TRANSIENT
        assert "over 16 MiB" in result.message
        lines = 0
        provider._results_urls["msgbatch_x"] = f"{url}/v1/messages/batches/msgbatch_x/results"  # as a retrieve leaves
        async for page in jsonl.pages(provider._result_bytes("msgbatch_x")):  # a results file: no cap
            lines += len(page)
        assert lines == _Endless.LINES
    finally:
        await provider.close()
        server.shutdown()
        server.server_close()
    assert _Endless.LINES * len(_Endless.LINE) > guard.MAX_ANSWER
    endless = sum(server.RequestHandlerClass.sent) - _Endless.LINES * len(_Endless.LINE)  # type: ignore[attr-defined]
    assert guard.MAX_ANSWER < endless < 4 * guard.MAX_ANSWER  # read up to the cap, then no further
