"""Provider HTTP clients that ask the endpoint policy before every connection, never follow redirects, and read no
answer past a size.

Admission checks a base URL's addresses once; a name can resolve elsewhere a minute later (DNS rebinding),
and both SDKs follow redirects by default, so an allowed host could bounce a request to a metadata address.
This backend resolves the host itself at connect time, asks `allowed(host, address)` for every address, and
connects to the address it checked (TLS still verifies the host name): `barge.netguard.resolve_checked`, the check
http(s) storage, s3 endpoints and engine pools share.

The size: the operator is shared by every team, and an endpoint (a provider's, or a pool's engine in a team's
namespace) that answered an endless body would grow one buffer until the operator, and every team's jobs with it,
ran out of memory. An answer is read up to `MAX_ANSWER` bytes, then refused as a read error (the SDKs retry it, then
it is a transient failure). Results files are exempt: Barge reads them line by line, and bounds each line
(providers/jsonl.py).
"""

from __future__ import annotations

import importlib
from collections.abc import AsyncIterator, Iterable
from types import ModuleType
from typing import Any

import httpcore2
import httpx2

from barge.netguard import MAX_ANSWER, AddressCheck, Allowed, Blocked, guarded_session, resolve_checked

__all__ = ["MAX_ANSWER", "Allowed", "CappedTransport", "GuardedBackend", "guarded_transport", "pool_http_client"]


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
        try:
            infos = await resolve_checked(host, port, self.allowed)
        except (Blocked, OSError) as exc:  # the endpoint policy, or a name that does not resolve
            raise httpcore2.ConnectError(exc.strerror or str(exc)) from exc
        addresses = list(dict.fromkeys(str(info[4][0]) for info in infos))
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


#: Paths of results files (Anthropic's results, OpenAI's and Azure's file content): streamed, bounded per line.
STREAMED = ("/results", "/content")


class _Capped(httpx2.AsyncByteStream):
    def __init__(self, inner: httpx2.AsyncByteStream, limit: int, host: str) -> None:
        self.inner, self.limit, self.host = inner, limit, host

    async def __aiter__(self) -> AsyncIterator[bytes]:
        seen = 0
        async for chunk in self.inner:
            seen += len(chunk)
            if seen > self.limit:
                raise httpx2.ReadError(f"an answer from {self.host} over {self.limit >> 20} MiB: not read further")
            yield chunk

    async def aclose(self) -> None:
        await self.inner.aclose()


class CappedTransport(httpx2.AsyncBaseTransport):
    """`inner`, with every answer but a results file read up to `limit` bytes."""

    def __init__(self, inner: httpx2.AsyncBaseTransport, limit: int = MAX_ANSWER) -> None:
        self.inner, self.limit = inner, limit

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        response = await self.inner.handle_async_request(request)
        if request.url.path.endswith(STREAMED):
            return response
        stream = _Capped(response.stream, self.limit, request.url.host)  # type: ignore[arg-type]
        return httpx2.Response(
            response.status_code, headers=response.headers, stream=stream, extensions=response.extensions
        )

    async def aclose(self) -> None:
        await self.inner.aclose()


def pool_http_client(sdk: ModuleType, connections: int = 1000) -> Any:
    """The SDK's aiohttp client for an engine pool's vLLM, which a tenant can stand in for (a pod with the Service's
    labels, or an ExternalName Service of the same name): every answer capped at MAX_ANSWER, no redirect followed,
    no proxy from the environment (a proxy would carry the tenant's prompts out of the cluster), and never a
    metadata or link-local address (`AddressCheck()`; the pool's ClusterIP is private, so private stays allowed).
    aiohttp, not httpx: at 64 calls in flight it costs half the CPU per call (bench/bench_sync.py)."""
    vendored = importlib.import_module(f"{sdk.__name__}._vendor.httpx_aiohttp.transport")
    inner = vendored.AiohttpTransport(
        trust_env=False, client=lambda: guarded_session(AddressCheck(), refuse_redirects=False, connections=connections)
    )
    return sdk.DefaultAioHttpClient(transport=CappedTransport(inner), follow_redirects=False, trust_env=False)
