"""urllib3 connections that ask the endpoint policy first, as the httpx-based SDKs' do (guard.py): boto3's clients
(`guard_client`) and google-auth's token refreshes (`guarded_pool_manager`).

Why: make_bedrock checks the endpoints a job names (baseURL, the Secret's s3EndpointURL) when it makes the clients;
a name can resolve elsewhere a minute later (DNS rebinding), and botocore's urllib3 connections resolved it again
at every connection, unchecked. Here each new connection resolves the host itself, asks `allowed(host, address)`
for every address, and connects only to an address it checked (TLS still verifies the host name: urllib3 keeps
`host` for SNI and the certificate, only the address dialled changes). A refused address is a connection error
naming it, which botocore retries and then raises (the adapter makes it a transient failure, then Fatal at its
attempts' end, as for any endpoint that does not answer).

botocore has no public hook for its connection classes: its URLLib3Session keeps them in `_pool_classes_by_scheme`
and hands them to its PoolManager, which makes pools (and their connections) on first use. `guard_client` swaps
them on a client's session before its first request. The pinned botocore (requirements.lock) is the one this is
written against; tests/integration/test_urllib3_guard.py fails if a later one no longer has those attributes.
"""

from __future__ import annotations

import socket
from typing import Any

import urllib3
from botocore.awsrequest import (  # type: ignore[import-untyped]
    AWSHTTPConnection,
    AWSHTTPConnectionPool,
    AWSHTTPSConnection,
    AWSHTTPSConnectionPool,
)
from urllib3.exceptions import NameResolutionError, NewConnectionError

from barge.netguard import Allowed


def _checked_conn(conn: Any, allowed: Allowed, connect: Any) -> socket.socket:
    host = conn._dns_host
    try:
        infos = socket.getaddrinfo(host, conn.port, type=socket.SOCK_STREAM)
    except socket.gaierror as exc:
        raise NameResolutionError(conn.host, conn, exc) from exc
    addresses = list(dict.fromkeys(str(info[4][0]) for info in infos))
    refused = [a for a in addresses if not allowed(host, a)]
    if refused or not addresses:
        raise NewConnectionError(conn, f"endpoint policy: {host} resolves to {', '.join(refused) or 'nothing'}")
    error: Exception | None = None
    for address in addresses:
        conn._dns_host = address  # dial the checked address; `host` (SNI, certificate) is left as it was
        try:
            return connect()  # type: ignore[no-any-return]
        except NewConnectionError as exc:  # this address does not answer: the next one
            error = exc
        finally:
            conn._dns_host = host
    assert error is not None
    raise error


def guard_client(client: Any, allowed: Allowed) -> Any:
    """`client` (a boto3 client, before its first request) with every connection behind `allowed`."""

    class CheckedHTTPConnection(AWSHTTPConnection):  # type: ignore[misc]
        def _new_conn(self) -> socket.socket:
            return _checked_conn(self, allowed, super()._new_conn)

    class CheckedHTTPSConnection(AWSHTTPSConnection):  # type: ignore[misc]
        def _new_conn(self) -> socket.socket:
            return _checked_conn(self, allowed, super()._new_conn)

    class CheckedHTTPPool(AWSHTTPConnectionPool):  # type: ignore[misc]
        ConnectionCls = CheckedHTTPConnection

    class CheckedHTTPSPool(AWSHTTPSConnectionPool):  # type: ignore[misc]
        ConnectionCls = CheckedHTTPSConnection

    session = client._endpoint.http_session
    classes = session._pool_classes_by_scheme  # the proxy managers it makes later read the same mapping
    classes.update({"http": CheckedHTTPPool, "https": CheckedHTTPSPool})
    session._manager.pool_classes_by_scheme = classes
    return client


def guarded_pool_manager(allowed: Allowed, **kwargs: Any) -> urllib3.PoolManager:
    """A urllib3 PoolManager whose every new connection is checked as `guard_client`'s are (no proxy from the
    environment: a PoolManager reads none)."""

    class CheckedHTTPConnection(urllib3.connection.HTTPConnection):
        def _new_conn(self) -> socket.socket:
            return _checked_conn(self, allowed, super()._new_conn)

    class CheckedHTTPSConnection(urllib3.connection.HTTPSConnection):
        def _new_conn(self) -> socket.socket:
            return _checked_conn(self, allowed, super()._new_conn)

    class CheckedHTTPPool(urllib3.HTTPConnectionPool):
        ConnectionCls = CheckedHTTPConnection

    class CheckedHTTPSPool(urllib3.HTTPSConnectionPool):
        ConnectionCls = CheckedHTTPSConnection

    manager = urllib3.PoolManager(**kwargs)
    manager.pool_classes_by_scheme = {"http": CheckedHTTPPool, "https": CheckedHTTPSPool}
    return manager
