"""DNS rebinding of an allowlisted storage endpoint (REVIEW-3 H1's second half), against real servers on loopback.

The admin allowlists a storage host as a public one (`endpoints.allow: [{host: localhost}]`, no `private`). At
admission the name answered a public address, so the endpoint check passed (the answer admission saw is given to
`check_endpoint` as its resolver: DNS is the part that changes, nothing else is stood in for). When the storage
client connects, the same name resolves to 127.0.0.1: s3fs (aiobotocore's aiohttp), adlfs (azure-core) and http(s)
storage (fsspec's aiohttp) each ask the connect-time check for the address they are about to use, and refuse it.
Loopback is what the guard refuses here for real: only an endpoint entry with `private: true` lets a name reach it,
and the controls (the same server through an entry with `private: true`) show the servers answer, so the refusal is
the guard's. Without the connect-time check every refused read below returns the file."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import ClassVar

import pytest

from barge import policy as p
from barge.netguard import AddressCheck
from barge.storage import StorageError, StoragePolicy, credential_endpoints, credential_options, read_lines
from tests.integration.test_storage_az_guard import _connection, azurite  # noqa: F401 (azurite: a fixture)
from tests.integration.test_storage_s3_guard import SECRET, moto_port  # noqa: F401 (moto_port: a fixture)

ADMITTED = ["93.184.216.34"]
"""What the name answered when the job was admitted: a public address."""
PUBLIC = p.Policy(endpoints=(p.Endpoint("localhost"),))
PRIVATE = p.Policy(endpoints=(p.Endpoint("localhost", private=True),))


def admitted(policy: p.Policy, endpoint: str) -> None:
    """Admission's check of an endpoint (operator/admission.py check_base_url), with the DNS answer it saw."""
    p.check_endpoint(policy, "storage", endpoint, lambda _host: ADMITTED)


class _File(BaseHTTPRequestHandler):
    seen: ClassVar[list[str]] = []

    def _answer(self, body: bool) -> None:
        self.seen.append(self.path)
        data = b'{"id":1}\n'
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


@pytest.fixture
def http_port() -> Iterator[int]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _File)
    _File.seen = []
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield int(server.server_address[1])
    server.shutdown()
    server.server_close()


def test_s3_endpoint_rebound_to_loopback_is_refused_at_connect(moto_port: int) -> None:  # noqa: F811
    endpoint = f"http://localhost:{moto_port}"
    options = credential_options("s3", {**SECRET, "endpoint_url": endpoint})
    assert credential_endpoints(options) == [endpoint]
    admitted(PUBLIC, endpoint)
    storage = StoragePolicy(prefixes=("s3://shared/acme/",), options=options, addresses=AddressCheck(PUBLIC))
    with pytest.raises(StorageError, match="endpoint policy"):
        list(read_lines("s3://shared/acme/in.jsonl", storage))
    control = StoragePolicy(prefixes=("s3://shared/acme/",), options=options, addresses=AddressCheck(PRIVATE))
    assert list(read_lines("s3://shared/acme/in.jsonl", control)) == [(1, b'{"id":1}')]


def test_blob_endpoint_rebound_to_loopback_is_refused_at_connect(azurite: int) -> None:  # noqa: F811
    options = credential_options("az", {"connection_string": _connection(f"http://localhost:{azurite}")})
    for endpoint in credential_endpoints(options):
        admitted(PUBLIC, endpoint)
    storage = StoragePolicy(prefixes=("az://barge-acme/",), options=options, addresses=AddressCheck(PUBLIC))
    with pytest.raises(StorageError, match="endpoint policy"):
        list(read_lines("az://barge-acme/in.jsonl", storage))
    control = StoragePolicy(prefixes=("az://barge-acme/",), options=options, addresses=AddressCheck(PRIVATE))
    assert list(read_lines("az://barge-acme/in.jsonl", control)) == [(1, b'{"id":1}')]


def test_http_storage_host_rebound_to_loopback_is_refused_at_connect(http_port: int) -> None:
    prefix = f"http://localhost:{http_port}/acme/"
    admitted(PUBLIC, prefix)
    storage = StoragePolicy(prefixes=(prefix,), addresses=AddressCheck(PUBLIC))
    with pytest.raises(StorageError, match="endpoint policy"):
        list(read_lines(prefix + "in.jsonl", storage))
    assert _File.seen == []  # not one request reached the server
    control = StoragePolicy(prefixes=(prefix,), addresses=AddressCheck(PRIVATE))
    assert list(read_lines(prefix + "in.jsonl", control)) == [(1, b'{"id":1}')]
