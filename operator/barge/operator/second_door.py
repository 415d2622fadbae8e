"""The operator's second-door timer: every BARGE_SECOND_DOOR_SECONDS, for each provider credential Barge knows,
list the provider's recent batches and count those Barge did not create (batch/second_door.py), per tenant that
uses the credential.

Which credentials: every one a job used since the operator started (kept after the job ends: an idle key is
where a second door goes unnoticed), and every provider InferencePool's, from the watch, whether or not a job
runs on it (read again each scan: a deleted pool's credential leaves the scan, its Secret is read through the
cache). Exported as `barge_provider_foreign_batches{provider, endpoint_hash, tenant}` (0 for a clean
credential, so the alert BargeSecondDoorOpen sees the first one), and a Warning event `SecondDoorBatches` once
per newly seen foreign batch id, on the newest job of each tenant that used the credential and on every provider
pool whose credential it is. The listing runs on an engine loop with the long-lived client.

Bounded: at most MAX_CREDENTIALS job credentials (the least recently used are forgotten first, with their gauge
series), at most second_door.MAX_LISTED batches listed per credential and scan, and the ids already announced
are kept for MAX_REPORTED ids (oldest forgotten first: a forgotten id still listed is announced again, never
missed). A failing listing is logged and tried again next time.
"""

from __future__ import annotations

import asyncio
import contextvars
import inspect
import logging
import secrets
import time
from collections.abc import Awaitable, Callable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from prometheus_client.core import GaugeMetricFamily

from barge.batch import second_door
from barge.operator.cache import ClientSpec
from barge.operator.kube import Kube, call, dns_name

if TYPE_CHECKING:
    from barge.operator.engine import EngineLoop
    from barge.operator.jobs import Context

log = logging.getLogger("barge.operator")
Poster = Callable[[str, str, str], Awaitable[None] | None]
PoolPoster = Callable[[Mapping[str, Any]], Poster]
#: Foreign batch ids listed in an event at most.
SHOWN = 5
#: Job credentials kept for scanning at most; foreign batch ids remembered as announced at most.
MAX_CREDENTIALS = 256
MAX_REPORTED = 10_000


@dataclass
class Doors:
    """Credentials in use and what the last scan found: `seen` spec -> tenant -> (newest job key, its poster), in
    least-recently-used order; `pools` spec -> pool "namespace/name" -> (tenant, its poster), as the last scan
    read the watch; `reported` the foreign ids announced, oldest first."""

    seen: dict[ClientSpec, dict[str, tuple[str, Poster]]] = field(default_factory=dict)
    pools: dict[ClientSpec, dict[str, tuple[str, Poster]]] = field(default_factory=dict)
    foreign: dict[tuple[str, str, str], int] = field(default_factory=dict)
    reported: dict[str, None] = field(default_factory=dict)
    finished: dict[str, None] = field(default_factory=dict)
    """Finished jobs' keys already handed to the scan after a restart (operator/second_door_finished.py)."""

    def saw(self, spec: ClientSpec, tenant: str, key: str, post: Poster) -> None:
        if spec.kind in ("pool", "vllm") or not spec.guarded:
            return  # an engine pool's own vLLM: nobody else's batches there
        tenants = self.seen.pop(spec, {})
        # The scan is no Kopf handler: a job's poster (kopf.event) runs in the context of the step that saw it,
        # where Kopf's event queue is (without it kopf.event raises LookupError and no event was ever posted).
        context = contextvars.copy_context()

        def in_context(reason: str, message: str, kind: str) -> Awaitable[None] | None:
            return context.run(post, reason, message, kind)

        tenants[tenant] = (key, in_context)
        self.seen[spec] = tenants  # the most recently used last
        while len(self.seen) > MAX_CREDENTIALS:
            del self.seen[next(iter(self.seen))]

    def announced(self, ids: list[str]) -> None:
        for i in ids:
            self.reported.pop(i, None)
            self.reported[i] = None
        while len(self.reported) > MAX_REPORTED:
            del self.reported[next(iter(self.reported))]


def api_poster(kube: Kube) -> PoolPoster:
    """Events on a pool written through the API (core/v1 Event): the scan runs in no Kopf handler, so Kopf's
    kopf.event has no event queue there."""

    def for_pool(body: Mapping[str, Any]) -> Poster:
        meta = body.get("metadata") or {}
        namespace, name = str(meta.get("namespace") or ""), str(meta.get("name") or "")

        async def post(reason: str, message: str, kind: str) -> None:
            now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
            event = {
                "apiVersion": "v1",
                "kind": "Event",
                "metadata": {"name": f"{name}.{secrets.token_hex(8)}", "namespace": namespace},
                "involvedObject": {
                    "apiVersion": str(body.get("apiVersion") or "barge.dev/v1alpha1"),
                    "kind": str(body.get("kind") or "InferencePool"),
                    "name": name,
                    "namespace": namespace,
                    "uid": str(meta.get("uid") or ""),
                },
                "reason": reason,
                "message": message[:1000],
                "type": kind,
                "source": {"component": "barge-operator"},
                "reportingComponent": "barge-operator",
                "firstTimestamp": now,
                "lastTimestamp": now,
                "count": 1,
            }
            path = f"/api/v1/namespaces/{quote(dns_name(namespace, 'namespace'), safe='')}/events"
            try:
                await call(kube, path, "POST", body=event)
            except Exception:
                log.exception("second door: the event on InferencePool %s/%s was not written", namespace, name)

        return post

    return for_pool


async def watch_pools(ctx: Context, poster: PoolPoster) -> None:
    """Read the provider InferencePools from the watch into `ctx.doors.pools` (replacing the last scan's): each
    pool's credential, the pool's tenant, and a poster of events on the pool. A pool whose Secret cannot be read
    is left out (its own status already says SecretNotFound or refused)."""
    from barge.api.pool import InferencePool
    from barge.operator import admission

    found: dict[ClientSpec, dict[str, tuple[str, Poster]]] = {}
    for (namespace, name), body in list(ctx.pools.bodies.items()):
        if not (body.get("spec") or {}).get("provider"):
            continue  # an engine pool: its own vLLM, nobody else's batches there
        try:
            pool = InferencePool.model_validate({"metadata": body["metadata"], "spec": body["spec"]})
            provider = pool.spec.provider
            assert provider is not None
            secret = await ctx.kube.secret_value(namespace, provider.secret_ref.name, provider.secret_ref.key)
        except Exception as exc:
            log.debug("second door: pool %s/%s left out: %s", namespace, name, exc)
            continue
        spec = ClientSpec(provider.type, secret, provider.base_url, provider.api_version)
        tenant = await admission.tenant_or_namespace(ctx.kube, namespace)
        found.setdefault(spec, {})[f"{namespace}/{name}"] = (tenant, poster(body))
    ctx.doors.pools = found


async def scan_once(ctx: Context, now: float, poster: PoolPoster | None = None) -> None:
    if ctx.kube is not None:
        await watch_pools(ctx, poster or api_poster(ctx.kube))
    doors = ctx.doors
    specs = list(doors.seen) + [s for s in doors.pools if s not in doors.seen]
    labels = {(s.kind, second_door.endpoint_hash(s.kind, s.base_url, s.key[1])) for s in specs}
    for stale in [k for k in doors.foreign if k[:2] not in labels]:
        del doors.foreign[stale]  # a forgotten credential or a deleted pool's leaves the gauge
    for spec in specs:
        tenants = dict(doors.seen.get(spec, {}))
        pools = doors.pools.get(spec, {})
        label = (spec.kind, second_door.endpoint_hash(spec.kind, spec.base_url, spec.key[1]))
        first_key = next(iter(tenants.values()))[0] if tenants else next(iter(pools))

        async def listing(engine: EngineLoop, spec: ClientSpec = spec) -> list[str]:
            async with engine.clients.lease(spec) as provider:
                window, young = ctx.config.second_door_window, second_door.YOUNG
                found = await second_door.foreign_batches(
                    provider, ctx.ledger, now, window=window, young=young, max_listed=second_door.MAX_LISTED
                )
                return [b.id for b in found]

        try:
            ids = await ctx.engine.call(first_key, listing)
        except Exception:
            log.exception("second-door scan of a %s credential failed; trying again later", spec.kind)
            continue
        new = [i for i in ids if i not in doors.reported]
        shown = ", ".join(new[:SHOWN]) + (f" and {len(new) - SHOWN} more" if len(new) > SHOWN else "")
        posts = [(tenant, "job", post) for tenant, (_key, post) in tenants.items()]
        posts += [(tenant, "pool", post) for tenant, post in pools.values()]
        for tenant, what, post in posts:
            doors.foreign[(*label, tenant)] = len(ids)
            if new:
                posted = post(
                    "SecondDoorBatches",
                    f"{len(ids)} batch(es) on this {what}'s {spec.kind} credential were not created by Barge "
                    f"(endpoint {label[1]}): {shown}; their cost is not attributed to any tenant",
                    "Warning",
                )
                if inspect.isawaitable(posted):
                    await posted
        doors.announced(new)


async def run(ctx: Context) -> None:
    """Until cancelled (the operator's cleanup)."""
    while True:
        await asyncio.sleep(ctx.config.second_door_seconds)
        try:
            await scan_once(ctx, time.time())
        except Exception:
            log.exception("second-door scan failed")


def collect(doors: Doors) -> Iterator[GaugeMetricFamily]:
    gauge = GaugeMetricFamily(
        "barge_provider_foreign_batches",
        "Recent provider batches on a credential Barge uses that Barge did not create (the second door)",
        labels=["provider", "endpoint_hash", "tenant"],
    )
    for labels, n in sorted(doors.foreign.items()):
        gauge.add_metric(list(labels), n)
    yield gauge
