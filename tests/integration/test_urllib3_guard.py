"""boto3's connections behind the endpoint policy at connect time (providers/urllib3_guard.py), as the httpx-based
SDKs' are: a client made while its endpoint was allowed, whose host then resolves to a refused address (DNS
rebinding, played here by a policy that changes its answer), cannot connect; nothing reaches the server. The same
guarded client talks to moto's real S3 server while the policy allows it."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import boto3
import pytest
from botocore.exceptions import EndpointConnectionError

from barge.providers.bedrock_provider import make_bedrock
from barge.providers.urllib3_guard import guard_client
from tests.contract.bedrock_case import BUCKET, s3_endpoint
from tests.contract.bedrock_case import secret as bedrock_secret


class Counting(BaseHTTPRequestHandler):
    seen: list[str] = []  # noqa: RUF012 - the server's one record of what reached it

    def do_GET(self) -> None:
        Counting.seen.append(self.path)
        self.send_response(200)
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def server() -> Iterator[str]:
    Counting.seen = []
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Counting)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://localhost:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()


class Flipping:
    """A policy that allows every address until told not to: a name that resolved to an allowed address when the
    client was made, and resolves to a refused one afterwards."""

    def __init__(self) -> None:
        self.refuse = False
        self.asked: list[tuple[str, str]] = []

    def __call__(self, host: str, address: str) -> bool:
        self.asked.append((host, address))
        return not self.refuse


def s3(url: str) -> Any:
    return boto3.client(
        "s3",
        endpoint_url=url,
        region_name="us-east-1",
        aws_access_key_id="t",
        aws_secret_access_key="t",
        config=boto3.session.Config(retries={"total_max_attempts": 1}),
    )


def test_a_refused_address_is_refused_at_connect_time_and_nothing_is_sent(server: str) -> None:
    policy = Flipping()
    client = guard_client(s3(server), policy)
    client.list_buckets()  # allowed: it reaches the server
    assert Counting.seen == ["/"]
    assert policy.asked
    assert policy.asked[-1][0] == "localhost"
    policy.refuse = True
    client._endpoint.http_session._manager.clear()  # a new connection (a pooled one was checked when it was made)
    with pytest.raises(EndpointConnectionError) as raised:
        client.list_buckets()
    assert "endpoint policy: localhost resolves to 127.0.0.1" in str(raised.value.kwargs.get("error"))
    assert Counting.seen == ["/"]  # the refused request never reached the server


def test_make_bedrock_guards_every_client_a_name_re_resolving_later_is_refused(server: str) -> None:
    """The whole path: make_bedrock's creation-time check passes, then the policy refuses, and the adapter's S3
    client (s3EndpointURL: the counting server) cannot connect."""
    policy = Flipping()
    secret = json.loads(bedrock_secret())
    secret["s3EndpointURL"] = server
    provider = make_bedrock(json.dumps(secret), base_url=server, guard=policy, sync_retries=0)
    assert provider.settings.problem == ""  # allowed when the clients were made
    policy.refuse = True
    clients = provider._clients
    assert set(clients) == {"bedrock", "create", "runtime", "s3"}
    for name, client in clients.items():
        pools = client._endpoint.http_session._pool_classes_by_scheme
        assert {pools["http"].__name__, pools["https"].__name__} == {"CheckedHTTPPool", "CheckedHTTPSPool"}, name
    with pytest.raises(EndpointConnectionError):
        clients["s3"].list_objects_v2(Bucket="b")
    assert Counting.seen == []


def test_a_guarded_client_talks_to_a_real_s3_while_allowed() -> None:
    policy = Flipping()
    client = guard_client(s3(s3_endpoint()), policy)
    names = [b["Name"] for b in client.list_buckets()["Buckets"]]
    assert BUCKET in names
    assert ("127.0.0.1", "127.0.0.1") in policy.asked
