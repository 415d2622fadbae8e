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
import threading
from collections.abc import AsyncIterator, Iterable
from types import ModuleType
from typing import Any

import httpcore2
import httpx2

from barge.netguard import MAX_ANSWER, AddressCheck, Allowed, Blocked, guarded_session, resolve_checked

__all__ = [
    "MAX_ANSWER",
    "POOL_ANSWER_BUDGET",
    "Allowed",
    "AnswerBudget",
    "CappedTransport",
    "GuardedBackend",
    "guarded_transport",
    "pool_http_client",
]


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


class AnswerBudget:
    """Bytes of answers one client reads at once. The per-answer cap alone still lets an engine pool (or a pod
    wearing its Service's labels) answer 16 MiB to each of up to 256 requests in flight: 4 GiB in the shared
    operator. An answer whose next chunk would pass the budget is refused as a read error (retried, then
    transient), so the answers being read never hold more than `limit` bytes together. Engine loops run in
    threads of their own, hence the lock."""

    def __init__(self, limit: int) -> None:
        self.limit, self.held, self.peak = limit, 0, 0
        self._lock = threading.Lock()

    def take(self, size: int) -> bool:
        with self._lock:
            if self.held + size > self.limit:
                return False
            self.held += size
            self.peak = max(self.peak, self.held)
            return True

    def give(self, size: int) -> None:
        with self._lock:
            self.held -= size


#: An engine pool client's budget: four answers at the cap (a chat answer is a few KiB; logprobs make it MiBs).
POOL_ANSWER_BUDGET = 4 * MAX_ANSWER


class _Capped(httpx2.AsyncByteStream):
    def __init__(self, inner: httpx2.AsyncByteStream, limit: int, host: str, budget: AnswerBudget | None) -> None:
        self.inner, self.limit, self.host, self.budget = inner, limit, host, budget

    async def __aiter__(self) -> AsyncIterator[bytes]:
        seen = held = 0
        try:
            async for chunk in self.inner:
                seen += len(chunk)
                if seen > self.limit:
                    raise httpx2.ReadError(f"an answer from {self.host} over {self.limit >> 20} MiB: not read further")
                if self.budget is not None:
                    if not self.budget.take(len(chunk)):
                        raise httpx2.ReadError(
                            f"answers in flight from {self.host} over {self.budget.limit >> 20} MiB together: "
                            "this one not read further"
                        )
                    held += len(chunk)
                yield chunk
        finally:
            if self.budget is not None:
                self.budget.give(held)

    async def aclose(self) -> None:
        await self.inner.aclose()


class CappedTransport(httpx2.AsyncBaseTransport):
    """`inner`, with every answer but a results file read up to `limit` bytes, and (with `budget`) all answers
    being read at once up to the budget's limit."""

    def __init__(
        self, inner: httpx2.AsyncBaseTransport, limit: int = MAX_ANSWER, budget: AnswerBudget | None = None
    ) -> None:
        self.inner, self.limit, self.budget = inner, limit, budget

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        response = await self.inner.handle_async_request(request)
        if request.url.path.endswith(STREAMED):
            return response
        stream = _Capped(response.stream, self.limit, request.url.host, self.budget)  # type: ignore[arg-type]
        return httpx2.Response(
            response.status_code, headers=response.headers, stream=stream, extensions=response.extensions
        )

    async def aclose(self) -> None:
        await self.inner.aclose()


def pool_http_client(sdk: ModuleType, connections: int = 1000) -> Any:
    """The SDK's aiohttp client for an engine pool's vLLM, which a tenant can stand in for (a pod with the Service's
    labels, or an ExternalName Service of the same name): every answer capped at MAX_ANSWER, no redirect followed,
    no proxy from the environment (a proxy would carry the tenant's prompts out of the cluster), and never a
    metadata or link-local address (`AddressCheck()`; the pool's ClusterIP is private, so private stays allowed), and
    the answers in flight together under POOL_ANSWER_BUDGET.
    aiohttp, not httpx: at 64 calls in flight it costs half the CPU per call (bench/bench_sync.py)."""
    vendored = importlib.import_module(f"{sdk.__name__}._vendor.httpx_aiohttp.transport")
    inner = vendored.AiohttpTransport(
        trust_env=False, client=lambda: guarded_session(AddressCheck(), refuse_redirects=False, connections=connections)
    )
    capped = CappedTransport(inner, budget=AnswerBudget(POOL_ANSWER_BUDGET))
    return sdk.DefaultAioHttpClient(transport=capped, follow_redirects=False, trust_env=False)
