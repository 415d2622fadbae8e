"""http(s) storage against real HTTP servers on loopback (REVIEW-3 H2, L2, L3): the URL checked is the URL sent
(percent-encoded dot segments are decoded before the prefix check), redirects are refused, every connection asks
the address check at the moment of use, and no proxy from the environment is used."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import ClassVar
from urllib.parse import unquote

import pytest

from barge import policy as p
from barge.storage import StorageError, StoragePolicy, StorageRefused, read_lines, read_text

FILES = {
    "/acme/claims.jsonl": b'{"id":1,"text":"acme line"}\n',
    "/globex/claims.jsonl": b'{"id":1,"text":"GLOBEX SECRET"}\n',
    "/internal/secret": b'{"id":1,"text":"INTERNAL-ONLY"}\n',
}


class _Files(BaseHTTPRequestHandler):
    seen: ClassVar[list[str]] = []
    redirect_to: ClassVar[str] = ""

    def _answer(self, body: bool) -> None:
        self.seen.append(self.path)
        if self.redirect_to:
            self.send_response(302)
            self.send_header("Location", self.redirect_to)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        data = FILES.get(unquote(self.path))
        if data is None:
            self.send_response(404)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        self.send_response(200)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if body:
            self.wfile.write(data)

    def do_GET(self) -> None:
        self._answer(True)

    def do_HEAD(self) -> None:
        self._answer(False)

    def log_message(self, *args: object) -> None:
        return


def _serve(host: str, **attrs: object) -> tuple[ThreadingHTTPServer, type[_Files]]:
    handler = type("Handler", (_Files,), {"seen": [], **attrs})
    server = ThreadingHTTPServer((host, 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, handler


@pytest.fixture
def files() -> Iterator[tuple[str, type[_Files]]]:
    server, handler = _serve("127.0.0.1")
    yield f"http://127.0.0.1:{server.server_address[1]}", handler
    server.shutdown()
    server.server_close()


@pytest.fixture
def internal() -> Iterator[tuple[str, type[_Files]]]:
    """An internal-only service (127.0.0.2 stands in for it)."""
    server, handler = _serve("127.0.0.2")
    yield f"http://127.0.0.2:{server.server_address[1]}", handler
    server.shutdown()
    server.server_close()


def test_own_file_is_read(files: tuple[str, type[_Files]]) -> None:
    base, _ = files
    acme = StoragePolicy(prefixes=(f"{base}/acme/",))
    assert list(read_lines(f"{base}/acme/claims.jsonl", acme)) == [(1, b'{"id":1,"text":"acme line"}')]


@pytest.mark.parametrize("dots", ["%2e%2e", "%2E%2E", ".%2e", "%2e.", "%2e%2e%2f..", "%2e%2e%5c", "x/%2e%2e/%2e%2e"])
def test_encoded_dot_segments_cannot_leave_the_prefix(files: tuple[str, type[_Files]], dots: str) -> None:
    """H2: `%2e%2e` passed the prefix check as a name; aiohttp decoded it and the server saw /globex/claims.jsonl."""
    base, handler = files
    acme = StoragePolicy(prefixes=(f"{base}/acme/",))
    with pytest.raises(StorageRefused):
        list(read_lines(f"{base}/acme/{dots}/globex/claims.jsonl", acme))
    assert not any(path.startswith("/globex") for path in handler.seen), handler.seen


def test_the_checked_url_is_the_url_sent(files: tuple[str, type[_Files]]) -> None:
    """A legitimate escape in a name is sent as checked (re-encoded), never decoded into something else."""
    base, handler = files
    FILES["/acme/a b.jsonl"] = b'{"id":2}\n'
    try:
        acme = StoragePolicy(prefixes=(f"{base}/acme/",))
        assert list(read_lines(f"{base}/acme/a%20b.jsonl", acme)) == [(1, b'{"id":2}')]
    finally:
        del FILES["/acme/a b.jsonl"]
    assert handler.seen[-1] == "/acme/a%20b.jsonl"


def test_redirects_are_refused(files: tuple[str, type[_Files]], internal: tuple[str, type[_Files]]) -> None:
    """L2: the allowed host answered 302 to an internal address and fsspec followed it (content reflected into
    prompts). Now a redirect is an error and the internal service sees nothing."""
    base, handler = files
    inside, inside_handler = internal
    handler.redirect_to = f"{inside}/internal/secret"
    acme = StoragePolicy(prefixes=(f"{base}/acme/",))
    with pytest.raises(StorageError, match="redirect"):
        list(read_lines(f"{base}/acme/in.jsonl", acme))
    with pytest.raises(StorageError, match="redirect"):
        read_text(f"{base}/acme/in.jsonl", acme, limit=1000)
    assert inside_handler.seen == []


def test_no_proxy_from_the_environment(
    files: tuple[str, type[_Files]], internal: tuple[str, type[_Files]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A proxy connects on the operator's behalf, out of the address check's sight: HTTP(S)_PROXY is ignored."""
    base, handler = files
    proxy, proxy_handler = internal
    monkeypatch.setenv("HTTP_PROXY", proxy)
    monkeypatch.setenv("http_proxy", proxy)
    monkeypatch.setenv("NO_PROXY", "")
    acme = StoragePolicy(prefixes=(f"{base}/acme/",))
    assert next(iter(read_lines(f"{base}/acme/claims.jsonl", acme)))[1].startswith(b'{"id":1')
    assert proxy_handler.seen == []
    assert set(handler.seen) == {"/acme/claims.jsonl"}


def test_every_connection_asks_the_endpoint_policy(files: tuple[str, type[_Files]]) -> None:
    """Operator mode: the admin's endpoint policy decides at connect time (a name that resolves to loopback later,
    DNS rebinding, is refused like a literal one); an allowlisted private host is read."""
    from barge.netguard import AddressCheck

    base, handler = files
    closed = StoragePolicy(prefixes=(f"{base}/acme/",), addresses=AddressCheck(p.Policy()))
    with pytest.raises(StorageError, match="endpoint policy"):
        list(read_lines(f"{base}/acme/claims.jsonl", closed))
    assert handler.seen == []
    opened = p.Policy(endpoints=(p.Endpoint("127.0.0.1", private=True),))
    allowed = StoragePolicy(prefixes=(f"{base}/acme/",), addresses=AddressCheck(opened))
    assert len(list(read_lines(f"{base}/acme/claims.jsonl", allowed))) == 1


@pytest.mark.parametrize(
    "address", ["2002:a9fe:a9fe::1", "2002:a00:1::1", "fec0::1", "192.0.0.192", "2001::5601:5601", "::ffff:a9fe:a9fe"]
)
def test_address_classification_refuses_embedded_and_legacy_forms(address: str) -> None:
    """L3: 6to4 and Teredo forms of special IPv4 addresses, deprecated site-local fec0::/10 and 192.0.0.192
    (a legacy metadata address) were allowed."""
    assert not p.address_allowed(p.Policy(), "api.openai.com", address)


def test_public_addresses_stay_allowed() -> None:
    for address in ("8.8.8.8", "2606:4700::1111", "2002:808:808::1"):
        assert p.address_allowed(p.Policy(), "api.openai.com", address)


@pytest.mark.parametrize(
    "url",
    [
        "https://files.example.com/acme/%2e%2e/globex/claims.jsonl",
        "https://files.example.com/acme/.%2E/globex/claims.jsonl",
        "https://files.example.com/acme/%2E%2E%2Fglobex/claims.jsonl",
        "https://files.example.com/acme/%252e%252e/globex/claims.jsonl",
        "https://files.example.com/acme/x%00.jsonl",
    ],
)
def test_the_prefix_check_sees_the_path_the_server_sees(url: str) -> None:
    with pytest.raises(p.Refused):
        p.check_storage(url, ("https://files.example.com/acme/",))


def test_escapes_of_plain_characters_stay_inside() -> None:
    p.check_storage("https://files.example.com/acme/a%20b%41.jsonl", ("https://files.example.com/acme/",))
    with pytest.raises(p.Refused):
        p.check_storage("https://files.example.com/%61cme2/x", ("https://files.example.com/acme/",))
