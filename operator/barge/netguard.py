"""The one connect-time address check, and the answer cap, that every outbound client of the operator shares.

Why one place: a check made on a string (a base URL at admission, a storage host in a prefix) says nothing about
where a connection goes a minute later (DNS rebinding), after a redirect, or through a proxy from the environment.
So each client resolves the host itself at connect time, asks `allowed(host, address)` for every address, and
connects only to an address it checked: provider clients over httpx (`barge.providers.guard.GuardedBackend`),
engine pools, http(s) storage and s3 endpoints over aiohttp (`GuardedResolver`, `guarded_session`). None of them
follows a redirect or reads a proxy from the environment, and an answer read whole is read up to `MAX_ANSWER`.

| client                       | allowed(host, address)                                    | where                 |
| ---------------------------- | --------------------------------------------------------- | --------------------- |
| provider (operator mode)     | the admin's endpoint policy (`AddressCheck(policy)`)      | providers/guard.py    |
| storage, operator mode       | the admin's endpoint policy (`AddressCheck(policy)`)      | storage               |
| engine pool, worker storage  | never a metadata, link-local or other special address     | `AddressCheck()`      |
|                              | (`policy.always_refused`); cluster addresses are fine     |                       |
"""

from __future__ import annotations

import asyncio
import errno
import socket
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import aiohttp
from aiohttp.abc import AbstractResolver, ResolveResult

from barge.policy import Policy, address_allowed, always_refused

Allowed = Callable[[str, str], bool]

#: The largest answer read whole (a synchronous answer of 128k tokens, a batch object, an error, a small object).
MAX_ANSWER = 16 << 20


class Blocked(Exception):
    """A connection the address check refused, or a redirect refused. Not an OSError on purpose: the clients retry
    a failed connection (azure-core for minutes), and a refusal is final; aiohttp passes it through unwrapped."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.strerror = message


class AnswerTooLarge(OSError):
    """An answer over the cap: not read further."""

    def __init__(self, host: str, limit: int) -> None:
        super().__init__(errno.EFBIG, f"an answer from {host} over {limit >> 20} MiB: not read further")


@dataclass(frozen=True)
class AddressCheck:
    """`allowed(host, address)` as a value with a stable repr (fsspec keys its cached filesystems on the repr of
    their options, so one check per policy reuses one filesystem and its connection pool)."""

    policy: Policy | None = None
    """The admin's endpoint policy; None: only the addresses no client of the operator ever connects to are
    refused (`policy.always_refused`), so cluster Services and loopback stay reachable."""

    def __call__(self, host: str, address: str) -> bool:
        if self.policy is None:
            return not always_refused(address)
        return address_allowed(self.policy, host, address)


async def resolve_checked(host: str, port: int, allowed: Allowed, family: int = 0) -> list[tuple[Any, ...]]:
    """getaddrinfo's answers for host:port, every address allowed; `Blocked` if one is not (or there is none), a
    plain OSError if the name does not resolve."""
    loop = asyncio.get_running_loop()
    try:
        infos = await loop.getaddrinfo(host, port, family=family, type=socket.SOCK_STREAM)
    except OSError as exc:  # not a refusal: a name that does not resolve now may later (a transient failure)
        raise OSError(exc.errno, f"cannot resolve {host}: {exc}") from exc
    addresses = list(dict.fromkeys(str(info[4][0]) for info in infos))
    refused = [a for a in addresses if not allowed(host, a)]
    if refused or not addresses:
        raise Blocked(f"endpoint policy: {host} resolves to {', '.join(refused) or 'nothing'}")
    return list(infos)


class GuardedResolver(AbstractResolver):
    """aiohttp's resolver behind `allowed`: aiohttp connects to the addresses returned, which are the ones checked
    (TLS still verifies the host name)."""

    def __init__(self, allowed: Allowed) -> None:
        self.allowed = allowed

    def __repr__(self) -> str:
        return f"GuardedResolver({self.allowed!r})"

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        infos = await resolve_checked(host, port, self.allowed, family)
        flags = socket.AI_NUMERICHOST | socket.AI_NUMERICSERV
        return [
            ResolveResult(
                hostname=host, host=str(sockaddr[0]), port=int(sockaddr[1]), family=fam, proto=proto, flags=flags
            )
            for fam, _type, proto, _name, sockaddr in infos
        ]

    async def close(self) -> None:
        return None


class GuardedConnector(aiohttp.TCPConnector):
    """aiohttp's connector with every address it is about to connect to checked, a literal IP in the URL too (aiohttp
    asks no resolver for those) and a cached lookup too."""

    def __init__(self, allowed: Allowed, **kwargs: Any) -> None:
        super().__init__(resolver=GuardedResolver(allowed), **kwargs)
        self.allowed = allowed

    async def _resolve_host(self, host: str, port: int, traces: Any = None) -> list[ResolveResult]:
        results = await super()._resolve_host(host, port, traces)
        refused = [r["host"] for r in results if not self.allowed(host, r["host"])]
        if refused or not results:
            raise Blocked(f"endpoint policy: {host} resolves to {', '.join(refused) or 'nothing'}")
        return results


class CappedResponse(aiohttp.ClientResponse):
    """An aiohttp answer whose whole-body read stops past MAX_ANSWER (streamed reads are bounded by their reader)."""

    limit = MAX_ANSWER

    async def read(self) -> bytes:
        if self._body is None:
            host = self.url.host or "?"
            if self.content_length is not None and self.content_length > self.limit:
                self.close()
                raise AnswerTooLarge(host, self.limit)
            chunks, seen = [], 0
            try:
                async for chunk in self.content.iter_any():
                    seen += len(chunk)
                    if seen > self.limit:
                        raise AnswerTooLarge(host, self.limit)
                    chunks.append(chunk)
            except BaseException:
                self.close()
                raise
            self._body = b"".join(chunks)
        return await super().read()


async def _no_redirects(response: aiohttp.ClientResponse) -> None:
    if 300 <= response.status < 400:
        response.release()
        raise Blocked(
            f"redirect refused: {response.url.host} answered {response.status} "
            f"to {response.headers.get('Location', '?')[:200]!r}"
        )


def guarded_session(
    allowed: Allowed, *, refuse_redirects: bool = True, connections: int = 100, **kwargs: Any
) -> aiohttp.ClientSession:
    """An aiohttp session whose every connection passes `allowed`, that reads no proxy from the environment, caps
    whole-body reads at MAX_ANSWER and (`refuse_redirects`) fails on a 3xx answer rather than return it as data.
    Create it inside the event loop that uses it."""
    connector = GuardedConnector(allowed, limit=connections)
    return aiohttp.ClientSession(
        connector=connector,
        trust_env=False,
        response_class=CappedResponse,
        raise_for_status=_no_redirects if refuse_redirects else False,
        **kwargs,
    )


@dataclass(frozen=True)
class SessionFactory:
    """fsspec's `get_client` for http(s) storage: a guarded session, redirects refused (stable repr, see above)."""

    allowed: Allowed

    async def __call__(self, **kwargs: Any) -> aiohttp.ClientSession:
        kwargs.pop("loop", None)  # fsspec passes its loop; the session takes the running one
        return guarded_session(self.allowed, **kwargs)
