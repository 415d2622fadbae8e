"""Every Kopf registration of Barge in one table; each delegates at once.

Kopf keeps its own bookkeeping under `barge.dev/` (finalizer, progress and last-handled annotations), never
under the default kopf.zalando.org prefix.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

import kopf

from barge.batch import prices, zygote
from barge.config import OperatorConfig
from barge.ledger import Ledger
from barge.operator import (
    diffbase,
    focus_timer,
    jobs,
    metrics,
    pools,
    ports,
    purge,
    reconcile_timer,
    schedules,
    second_door,
    second_door_finished,
)
from barge.operator import login as inclusterlogin
from barge.operator.cache import CachedKube
from barge.sharding import Shard

GROUP, VERSION = "barge.dev", "v1alpha1"
FINALIZER = "barge.dev/finalizer"
POOL_RETRY_SECONDS = 10.0


def _poster(body: kopf.Body) -> jobs.Poster:
    def post(reason: str, message: str, kind: str) -> None:
        kopf.event(body, type=kind, reason=reason, message=message[:1000])

    return post


def finalizer(shard: Shard) -> str:
    """The finalizer this shard puts on its objects. Kopf removes its finalizer from any object no handler of its
    matches, so shards sharing one name would strip each other's; shard 0 keeps the name of a single operator, so
    an upgrade to several shards needs nothing (the shard that owns a job adds its own)."""
    return FINALIZER if shard.first else f"{FINALIZER}-{shard.index}"


def _other_finalizers(shard: Shard, present: list[str]) -> list[str]:
    """Barge's finalizers on an object other than this shard's: left by a shard that owned its namespace before
    the shard count changed. The shard that runs the delete handler releases the object from them."""
    own = finalizer(shard)
    return [f for f in present if f != own and (f == FINALIZER or f.startswith(FINALIZER + "-"))]


def _drop_finalizers(raw: Any, names: list[str]) -> None:
    present = raw.get("metadata", {}).get("finalizers", [])
    present[:] = [f for f in present if f not in names]


def register(registry: kopf.OperatorRegistry, config: OperatorConfig) -> None:
    on = kopf  # registrations below go to `registry`
    shard = config.shard

    def mine(namespace: str | None = None, **_: Any) -> bool:
        """The object's namespace is this shard's (barge/sharding.py; always, with one shard)."""
        return shard.owns(namespace)

    @on.on.startup(registry=registry)
    async def startup(settings: kopf.OperatorSettings, memo: kopf.Memo, **_: Any) -> None:
        settings.persistence.finalizer = finalizer(shard)
        settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix="barge.dev")
        settings.persistence.diffbase_storage = diffbase.DiffBaseStorage(  # a job's spec is never copied in
            prefix="barge.dev", key="last-handled-configuration"
        )
        settings.posting.level = logging.WARNING  # Barge posts its own events; Kopf's only when something is wrong
        try:  # first: a taken port stops the operator (a Pod that cannot serve its probes must crash visibly)
            sock = ports.listen(config.metrics_port) if config.metrics_port else None
        except ports.PortUnavailable as exc:
            raise kopf.PermanentError(str(exc)) from exc
        try:
            ctx = jobs.Context(config, Ledger(config.ledger_url), CachedKube(), prices.load(config.prices_file))
        except BaseException:  # Kopf retries the startup: the port must be free for the next attempt
            if sock is not None:
                sock.close()
            raise
        memo["ctx"] = ctx
        await asyncio.to_thread(zygote.SERVER.warm)  # planners fork from it: its imports are done before jobs come
        memo["lag"] = asyncio.create_task(ctx.lags["main"].watch())
        if sock is not None:
            memo["server"] = await metrics.start_server(ctx, config.metrics_port, sock)
        # the cluster-wide chores: on shard 0 only, with several shards (barge/sharding.py)
        if config.ledger_purge_seconds > 0 and shard.first:
            memo["purge"] = asyncio.create_task(purge.run(ctx))
        if config.focus_export_url and shard.first:
            memo["focus"] = asyncio.create_task(focus_timer.run(ctx))
        if config.second_door_seconds > 0 and shard.first:
            memo["doors"] = asyncio.create_task(second_door.run(ctx))
        if config.policy.reconcile.providers and shard.first:  # off unless the policy names an admin key
            memo["reconcile"] = asyncio.create_task(reconcile_timer.run(ctx))

    @on.on.cleanup(registry=registry)
    async def cleanup(memo: kopf.Memo, **_: Any) -> None:
        for task in ("purge", "lag", "focus", "doors", "reconcile"):
            if task in memo:
                memo[task].cancel()
        if "server" in memo:
            await memo["server"].cleanup()
        await memo["ctx"].kube.close()
        memo["ctx"].stop_engine()
        memo["ctx"].ledger.close()

    @on.on.login(registry=registry)
    def login(**kwargs: Any) -> kopf.ConnectionInfo | None:
        return inclusterlogin.login(**kwargs)  # KUBERNETES_SERVICE_HOST/PORT and a re-read token, as client-go

    @on.daemon(
        GROUP,
        VERSION,
        jobs.PLURAL,
        registry=registry,
        initial_delay=0,
        cancellation_timeout=30,
        when=lambda status, namespace, **_: mine(namespace) and jobs.is_running(status),
    )
    async def llmbatchjob(body: kopf.Body, stopped: kopf.DaemonStopped, memo: kopf.Memo, **_: Any) -> None:
        await jobs.run(memo["ctx"], body, stopped, _poster(body))

    @on.daemon(GROUP, VERSION, schedules.PLURAL, registry=registry, initial_delay=0, cancellation_timeout=10, when=mine)
    async def llmbatchschedule(body: kopf.Body, stopped: kopf.DaemonStopped, memo: kopf.Memo, **_: Any) -> None:
        await schedules.run(memo["ctx"], body, stopped, _poster(body))

    # Reconciling a pool is idempotent (server-side apply), so a failed attempt (e.g. a 429 while the API server's
    # storage initialises) is retried after POOL_RETRY_SECONDS rather than Kopf's default minute.
    @on.on.create(GROUP, VERSION, pools.PLURAL, registry=registry, backoff=POOL_RETRY_SECONDS, when=mine)
    @on.on.update(GROUP, VERSION, pools.PLURAL, registry=registry, backoff=POOL_RETRY_SECONDS, when=mine)
    @on.on.resume(GROUP, VERSION, pools.PLURAL, registry=registry, backoff=POOL_RETRY_SECONDS, when=mine)
    @on.timer(
        GROUP,
        VERSION,
        pools.PLURAL,
        registry=registry,
        interval=max(config.poll_seconds, 2.0),
        initial_delay=1.0,
        backoff=POOL_RETRY_SECONDS,
        when=mine,
    )
    async def inferencepool(body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
        await jobs.reconcile_pool(memo["ctx"], body)

    # async: a sync handler would cost a hop through Kopf's thread pool for every watch event
    @on.on.event(GROUP, VERSION, jobs.PLURAL, registry=registry, when=mine)
    async def seen(event: kopf.RawEvent, memo: kopf.Memo, **_: Any) -> None:
        memo["ctx"].book.observe(event)

    @on.on.event(GROUP, VERSION, pools.PLURAL, registry=registry, when=mine)
    async def seen_pool(event: kopf.RawEvent, memo: kopf.Memo, **_: Any) -> None:
        memo["ctx"].book.observe(event)
        memo["ctx"].pools.observe(event)

    if config.second_door_seconds > 0:  # a restarted operator steps no finished job: its key is scanned still

        def finished(status: kopf.Status, namespace: str | None = None, **_: Any) -> bool:
            return mine(namespace) and not jobs.is_running(dict(status))

        @on.on.event(GROUP, VERSION, jobs.PLURAL, registry=registry, when=finished)
        async def finished_job_credential(body: kopf.Body, meta: kopf.Meta, memo: kopf.Memo, **_: Any) -> None:
            key = jobs.job_key({"namespace": meta["namespace"], "name": meta["name"], "uid": meta["uid"]})
            await second_door_finished.remember(memo["ctx"], body, key, _poster(body), time.time())

    @on.on.event(
        GROUP,
        VERSION,
        jobs.PLURAL,
        registry=registry,
        when=lambda body, status, namespace, **_: mine(namespace) and jobs.unobserved_terminal(body, status),
    )
    async def llmbatchjob_edited_after_end(body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
        await jobs.observe_generation(memo["ctx"], body)

    @on.on.delete(GROUP, VERSION, jobs.PLURAL, registry=registry, optional=False, when=mine)
    async def llmbatchjob_deleted(body: kopf.Body, memo: kopf.Memo, patch: kopf.Patch, **_: Any) -> None:
        def post(reason: str, message: str, kind: str) -> None:
            kopf.event(body, type=kind, reason=reason, message=message[:1000])

        await jobs.delete_job(memo["ctx"], body, post)
        others = _other_finalizers(shard, list(body.metadata.get("finalizers") or []))
        if others:  # a JSON patch against the freshest body, as Kopf removes its own finalizer after this handler
            patch.fns.append(lambda raw: _drop_finalizers(raw, others))
