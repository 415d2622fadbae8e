"""Provider HTTP clients that ask the endpoint policy before every connection and never follow redirects.

Admission checks a base URL's addresses once; a name can resolve elsewhere a minute later (DNS rebinding),
and both SDKs follow redirects by default, so an allowed host could bounce a request to a metadata address.
This backend resolves the host itself at connect time, asks `allowed(host, address)` for every address, and
connects to the address it checked (TLS still verifies the host name).
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Callable, Iterable
from typing import Any

import httpcore2
import httpx2

Allowed = Callable[[str, str], bool]


class GuardedBackend(httpcore2.AsyncNetworkBackend):
    """httpcore's own backend, behind the endpoint policy."""

    def __init__(self, allowed: Allowed, inner: httpcore2.AsyncNetworkBackend | None = None) -> None:
        self.allowed = allowed
        self.inner = inner or httpcore2.AnyIOBackend()  # what httpcore's AutoBackend picks under asyncio

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,  # noqa: ASYNC109 - httpcore's interface
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore2.AsyncNetworkStream:
        loop = asyncio.get_running_loop()
        try:
            infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        except OSError as exc:
            raise httpcore2.ConnectError(f"cannot resolve {host}: {exc}") from exc
        addresses = list(dict.fromkeys(str(info[4][0]) for info in infos))
        refused = [a for a in addresses if not self.allowed(host, a)]
        if refused or not addresses:
            raise httpcore2.ConnectError(f"endpoint policy: {host} resolves to {', '.join(refused) or 'nothing'}")
        error: Exception | None = None
        for address in addresses:
            try:
                return await self.inner.connect_tcp(address, port, timeout, local_address, socket_options)
            except httpcore2.ConnectError as exc:
                error = exc
        assert error is not None
        raise error

    async def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,  # noqa: ASYNC109 - httpcore's interface
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore2.AsyncNetworkStream:
        raise httpcore2.ConnectError("endpoint policy: no unix sockets")

    async def sleep(self, seconds: float) -> None:
        await self.inner.sleep(seconds)


def guarded_transport(allowed: Allowed) -> httpx2.AsyncHTTPTransport:
    """An httpx transport whose connections pass the endpoint policy (proxies from the environment are ignored:
    a proxy would connect on our behalf, out of the guard's sight)."""
    transport = httpx2.AsyncHTTPTransport(trust_env=False)
    # httpx offers no public way to pass a network backend; the pool reads this attribute for each new connection.
    transport._pool._network_backend = GuardedBackend(allowed)
    return transport
