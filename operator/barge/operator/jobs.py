"""LLMBatchJob in the cluster: inputs and keys from the job's namespace, the engine stepped by a daemon.

One daemon per non-terminal job: it resolves the Secret and the input, runs one engine step, writes the
status subresource when something changed, and sleeps the poll interval (with jitter). A terminal job has no
daemon (the `when` filter), so it costs nothing. Secrets, namespaces, pools and provider clients come from
operator/cache.py; the engine step runs on an engine loop (operator/engine.py), never on Kopf's, and the few
ledger calls made here go through a thread. Everything the daemon knows is re-derived from the ledger,
so an operator restarted at any moment resumes every job without duplicate batches.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import json
import logging
import random
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from pydantic import ValidationError

from barge.api.batchjob import TERMINAL_PHASES, LLMBatchJobSpec
from barge.api.common import ModelPrice
from barge.batch import faults, prices
from barge.batch.bounded import bound
from barge.batch.job import EngineSettings, Job
from barge.batch.planner import PlanLimits
from barge.batch.snapshot import Snapshot
from barge.config import OperatorConfig
from barge.k8s import schedule
from barge.ledger import Ledger, lifetime
from barge.ledger import quota as ledger_quota
from barge.operator import admission, faultstatus, fromjob, metrics, pools, reconcile_timer, second_door
from barge.operator import quota as quota_
from barge.operator import status as status_
from barge.operator.cache import ClientSpec, Watched
from barge.operator.engine import Engine, EngineLoop
from barge.operator.kube import Kube, NotFound, Objects
from barge.operator.looplag import Lag
from barge.operator.recent import RecentKeys
from barge.operator.targets import Target, target_for
from barge.policy import Policy, Refused
from barge.providers import BatchProvider, ProviderError, make_provider
from barge.storage import read_lines

log = logging.getLogger("barge.operator")
HELD_REASON = "HeldBySchedule"
PLURAL = "llmbatchjobs"
Poster = Callable[[str, str, str], None]


@dataclass
class Context:
    """What every handler shares; built once at start-up (kept in Kopf's memo)."""

    config: OperatorConfig
    ledger: Ledger
    kube: Kube
    prices: prices.PriceTable
    book: metrics.Book = field(default_factory=metrics.Book)
    """The jobs and pools as the watch shows them, for the metrics."""
    ledger_errors: int = 0
    step_errors: dict[str, int] = field(default_factory=dict)
    """fault reason -> steps that failed with it (barge_job_step_errors_total)."""
    guards: dict[str, asyncio.Lock] = field(default_factory=dict)
    """job key -> lock held around each batch create and by the delete handler (they never interleave)."""
    deleting: RecentKeys = field(default_factory=RecentKeys)
    """Jobs whose delete handler started: their daemon creates nothing more (forgotten after an hour: L5)."""
    held: lifetime.Held | None = None
    """The last measurement of text bytes the ledger holds per tenant (operator/purge.py); None before the first."""
    pools: Watched = field(default_factory=Watched)
    """InferencePools as the watch delivers them (read by job steps instead of a GET per poll)."""
    lags: dict[str, Lag] = field(default_factory=lambda: {"main": Lag()})
    """Event-loop lag per loop: Kopf's (`main`) and the engine loops (barge_event_loop_lag_seconds)."""
    queues: quota_.Queues = field(default_factory=quota_.Queues)
    doors: second_door.Doors = field(default_factory=second_door.Doors)
    reconciled: reconcile_timer.Reconciled = field(default_factory=reconcile_timer.Reconciled)
    """Provider credentials jobs use, and the batches on them Barge did not create (operator/second_door.py)."""
    """Per provider deployment, the jobs waiting for its batch quota (operator/quota.py)."""
    _engine: Engine | None = None

    def __post_init__(self) -> None:
        # several active operators: one admission queue per deployment among them
        if self.config is not None and self.config.shard.sharded:
            self.queues = quota_.Queues(shared=self.ledger)

    def guard(self, key: str) -> asyncio.Lock:
        return self.guards.setdefault(key, asyncio.Lock())

    @property
    def engine(self) -> Engine:
        """The engine loops, started on first use."""
        if self._engine is None:
            self._engine = Engine(client_builder(self.config.policy))
            self.lags.update(self._engine.lags)
        return self._engine

    def stop_engine(self) -> None:
        if self._engine is not None:
            self._engine.stop()
            self._engine = None

    @property
    def objects(self) -> Objects:
        return Objects(self.kube)

    @property
    def settings(self) -> EngineSettings:
        return EngineSettings(
            min_batch_window=self.config.min_batch_window,
            max_shard_requests=self.config.max_shard_requests,
            max_shard_bytes=self.config.max_shard_bytes,
            delete_provider_copies=self.config.delete_provider_copies,
            output_expires_after_days=self.config.output_expires_after_days,
            plan_limits=PlanLimits(
                memory_bytes=self.config.planner_memory_mb << 20, reserve_bytes=self.config.operator_reserve_mb << 20
            ),
            ledger_limits=self.config.policy.ledger,
        )


def job_key(meta: dict[str, Any]) -> str:
    return f"{meta['namespace']}/{meta['name']}/{meta['uid']}"


def _inline_lines(items: list[dict[str, Any]]) -> Callable[[], Iterator[tuple[int, bytes]]]:
    return lambda: ((n, json.dumps(item).encode()) for n, item in enumerate(items, start=1))


def _text_lines(text: str) -> Callable[[], Iterator[tuple[int, bytes]]]:
    def lines() -> Iterator[tuple[int, bytes]]:
        parts = text.encode().removeprefix(b"\xef\xbb\xbf").split(b"\n")
        if parts and parts[-1] == b"":
            parts.pop()  # a final newline ends the last line; it does not start an empty one
        for n, raw in enumerate(parts, start=1):
            yield n, raw.rstrip(b"\r")

    return lines


async def build_job(
    ctx: Context,
    meta: dict[str, Any],
    spec: LLMBatchJobSpec,
    model: str,
    admitted: admission.Admission,
    status: dict[str, Any] | None = None,
    pool_price: ModelPrice | None = None,
) -> Job:
    namespace = meta["namespace"]
    key = job_key(meta)
    lines: Callable[[], Iterator[tuple[int, bytes]]]
    if spec.input.inline is not None:
        lines = _inline_lines(spec.input.inline)
    elif spec.input.config_map_ref is not None:
        planned = (await asyncio.to_thread(ctx.ledger.job, key) or {}).get("planned")
        ref = spec.input.config_map_ref
        text = "" if planned else await ctx.kube.configmap_value(namespace, ref.name, ref.key)
        lines = _text_lines(text)
    else:
        url, policy = str(spec.input.url), admitted.input
        lines = lambda: read_lines(url, policy)  # noqa: E731
    created = str(meta.get("creationTimestamp") or datetime.now(UTC).isoformat())
    return Job(
        key=key,
        spec=spec,
        tenant=admitted.tenant,
        run_date=spec.run_date or created[:10],
        model=model,
        lines=lines,
        storage=admitted.output,
        status_batches=tuple(str(b.get("id")) for b in (status or {}).get("batches") or [] if b.get("id")),
        reported=frozenset(
            str(c.get("type")) for c in (status or {}).get("conditions") or [] if c.get("status") == "True"
        ),
        pool_price=pool_price,
        schedule=str((meta.get("labels") or {}).get(schedule.SCHEDULE_LABEL, "")),
    )


def client_builder(policy: Policy) -> Callable[[ClientSpec], BatchProvider]:
    """How the engine loops build a provider client (each is then reused: cache.Clients)."""

    imported: set[str] = set()

    def build(spec: ClientSpec) -> BatchProvider:
        provider = make_provider(
            spec.kind,
            spec.secret,
            base_url=spec.base_url,
            api_version=spec.api_version,
            guard=admission.guard(policy) if spec.guarded else None,
            engine_pool=not spec.guarded,  # an engine pool: capped, no redirects or proxies (REVIEW-3 H6)
        )
        if spec.kind not in imported:  # its SDK was imported now, for good: keep it out of the collector's scans
            imported.add(spec.kind)
            gc.freeze()
        return provider

    return build


async def reconcile_pool(ctx: Context, body: Any) -> None:
    async def secret_exists(namespace: str, name: str, key: str) -> None:
        await ctx.kube.secret_value(namespace, name, key)

    new = await pools.reconcile(
        ctx.objects,
        body,
        ctx.config.prometheus_url,
        ctx.config.pool_endpoint_template,
        secret_exists,
        ctx.config.worker_image,
        admit=lambda pool: admission.admit_pool(ctx.kube, ctx.config.policy, pool),
        host_network=ctx.config.pod_host_network,
        worker_pods=pools.worker_pods(ctx.config),
        network=ctx.config.pool_network,
    )
    old = dict(body.get("status") or {})
    if status_.changed(old, new):
        await ctx.kube.patch_status(pools.PLURAL, body["metadata"]["namespace"], body["metadata"]["name"], new)


async def _write(ctx: Context, meta: dict[str, Any], old: dict[str, Any], new: dict[str, Any]) -> dict[str, Any]:
    if status_.changed(old, new):
        await ctx.kube.patch_status(PLURAL, meta["namespace"], meta["name"], new)
        return {**old, **new}
    return old


async def run(ctx: Context, body: Any, stopped: Any, post: Poster) -> None:
    """The daemon of one job: step until terminal (or until Kopf stops it). A step that raises becomes a
    StepFailed condition, a Warning event and a counted reason, retried with backoff (faults.py)."""
    meta = {k: body["metadata"].get(k) for k in ("namespace", "name", "uid", "creationTimestamp", "labels")}
    current: dict[str, Any] = dict(body.get("status") or {})
    key = job_key(meta)
    failures = 0
    while not stopped and key not in ctx.deleting:
        generation = int(body["metadata"].get("generation") or 0)
        interval = ctx.config.poll_seconds * random.uniform(0.8, 1.2)
        held_by = (body["metadata"].get("annotations") or {}).get(schedule.HELD)
        if held_by:  # a schedule's run waiting for the previous one to end (concurrencyPolicy Hold)
            message = f"held by LLMBatchSchedule {held_by!r} until its previous run is terminal"
            if await _held_past_deadline(ctx, meta, body, message, current, generation, post):
                return  # Failed, DeadlineExceeded: released too late to run
            held = status_.admitted_false(current.get("conditions", []), HELD_REASON, message, generation)
            current = await _write(ctx, meta, current, {**held, "phase": "Queued"})
            await stopped.wait(interval)
            continue
        try:
            spec = LLMBatchJobSpec.model_validate(dict(body["spec"]))
        except ValidationError as exc:
            message = bound("; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors()))
            current = await _write(
                ctx,
                meta,
                current,
                status_.admitted_false(
                    current.get("conditions", []), "InvalidSpec", f"invalid spec: {message}", generation
                ),
            )
            await stopped.wait(interval)
            continue
        try:
            snap = await _step(ctx, meta, spec, post, current)
        except (Refused, NotFound) as exc:
            # Refused: the admin's policy says no, nothing was read or sent; NotFound: a referenced object is
            # missing and may yet appear. Either way Admitted=False, and the deadline still applies.
            if isinstance(exc, Refused):
                fault = faults.StepFault(exc.policy, bound(exc.message), transient=True, admission=True)
            else:
                fault = faults.StepFault("NotFound", bound(f"{exc}; waiting for it"), transient=True, admission=True)
            if await _deadline(ctx, meta, spec, fault, current, generation, post):
                return
            current = await _write(
                ctx,
                meta,
                current,
                status_.admitted_false(current.get("conditions", []), fault.reason, fault.message, generation),
            )
            await stopped.wait(interval)
            continue
        except Exception as exc:  # every other fault is visible on the job (faults.py), never only logged
            fault = faults.classify(exc)
            failures += 1
            ctx.ledger_errors += 1
            ctx.step_errors[fault.reason] = ctx.step_errors.get(fault.reason, 0) + 1
            log.warning("step of %s failed (%s): %s", key, fault.reason, fault.message, exc_info=not fault.transient)
            post(fault.reason, fault.message, "Warning")
            if await _deadline(ctx, meta, spec, fault, current, generation, post):
                return
            planned = bool((await _ledger_row(ctx, key) or {}).get("planned"))
            current = await _write(
                ctx, meta, current, faultstatus.fault_status(current, fault, generation, planned=planned)
            )
            await stopped.wait(fault.backoff(interval, failures))
            continue
        failures = 0
        new = faultstatus.recovered(status_.from_snapshot(snap, current, generation), generation)
        new = quota_.queued_status(new, current, snap, generation)  # held by its deployment's batch quota
        if snap.extra.get("ledger_mismatch"):  # the status is then the only record of those batches: keep it
            new = {k: new[k] for k in ("phase", "observedGeneration", "conditions", "message")}
        current = await _write(ctx, meta, current, new)
        if snap.terminal:  # its lock and quota marks are not needed any more (made again if it ever steps: L5)
            ctx.guards.pop(key, None)
            await asyncio.to_thread(ctx.queues.forget, key)  # as leave: a ledger write when sharded
            return
        await stopped.wait(interval)


async def _step(
    ctx: Context, meta: dict[str, Any], spec: LLMBatchJobSpec, post: Poster, status: dict[str, Any]
) -> Snapshot:
    """One engine step of the job: admit it and resolve its provider and input here (Kopf's loop, the caches),
    then step on the job's engine loop with a shared provider client."""
    admitted = await admission.admit(ctx.kube, ctx.config.policy, meta["namespace"], spec)
    target = await target_for(ctx, meta["namespace"], spec)
    ctx.doors.saw(target.provider, admitted.tenant, job_key(meta), post)  # scanned for the second door
    job = await build_job(ctx, meta, spec, target.model, admitted, status, target.price)
    job, runner_class = await fromjob.prepare(ctx, meta, spec, job)  # spec.input.fromJob: the cascade
    gate = _gate(ctx, meta, spec, job, target)

    async def step(engine: EngineLoop) -> Snapshot:
        planned = bool((ctx.ledger.job(job.key) or {}).get("planned"))
        # A step that plans runs a planner process: in one of the operator's planning slots, fair between
        # tenants (batch/planner_slots.py).
        async with (
            contextlib.nullcontext() if planned else engine.planning.hold(job.tenant),
            engine.clients.lease(target.provider) as provider,
        ):
            runner = runner_class(
                job,
                provider,
                ctx.ledger,
                ctx.prices,
                ctx.settings,
                on_event=post,
                sync_only=target.sync_only,
                sync_limits=(target.concurrency, target.requests_per_minute, target.tokens_per_minute),
                guard=ctx.guard(job.key),
                halted=lambda: job.key in ctx.deleting,
                admission=gate,
                budgets=ctx.config.policy.budgets,
            )
            try:
                snap = await runner.step()
            finally:
                await runner.settle()  # a create in flight is recorded before the client may close
            if gate is not None:
                gate.done(snap)
            return snap

    return await ctx.engine.call(job.key, step)


def _gate(ctx: Context, meta: dict[str, Any], spec: LLMBatchJobSpec, job: Job, target: Target) -> quota_.JobGate | None:
    """The job's place in its deployment's admission queue (batch quota, token_limit_exceeded backoff)."""
    if target.deployment is None or target.sync_only:
        return None
    created = datetime.fromisoformat(str(meta.get("creationTimestamp") or datetime.now(UTC).isoformat()))
    return ctx.queues.gate(
        ctx.ledger,
        job.key,
        tenant=job.tenant,
        priority=spec.priority,
        created=created.timestamp(),
        namespace=meta["namespace"],
        at=target.deployment,
        gather=ctx.config.admission_gather_seconds,
        backoff=ctx.config.admission_backoff_seconds,
        ttl=quota_.queue_ttl(ctx.config.poll_seconds),
        halted=lambda: job.key in ctx.deleting,
        policy=ctx.config.policy.admission,
    )


async def _ledger_row(ctx: Context, key: str) -> dict[str, Any] | None:
    try:
        return await asyncio.to_thread(ctx.ledger.job, key)
    except Exception:  # the ledger may be what is failing
        return None


async def _held_past_deadline(
    ctx: Context, meta: dict[str, Any], body: Any, message: str, current: dict[str, Any], generation: int, post: Poster
) -> bool:
    """A schedule's held run whose spec.deadline passes before its previous run ends fails like any job that
    could not make progress (phase Failed, DeadlineExceeded; nothing was sent). True: the daemon ends."""
    try:
        spec = LLMBatchJobSpec.model_validate(dict(body["spec"]))
    except ValidationError:
        return False  # reported as InvalidSpec once released
    fault = faults.StepFault(HELD_REASON, message, transient=False, admission=True)
    return await _deadline(ctx, meta, spec, fault, current, generation, post)


async def _deadline(
    ctx: Context,
    meta: dict[str, Any],
    spec: LLMBatchJobSpec,
    fault: faults.StepFault,
    current: dict[str, Any],
    generation: int,
    post: Poster,
) -> bool:
    """The deadline applies to a job whose steps fail: past it the job is Failed (True: the daemon ends). Only
    once the ledger took it: a CR that says Failed over a ledger that says Running is never reconciled."""
    grace = faults.deadline_grace(ctx.config.poll_seconds)
    try:
        tenant = await admission.tenant_or_namespace(ctx.kube, meta["namespace"])
        done = await asyncio.to_thread(
            lambda: faults.fail_at_deadline(ctx.ledger, job_key(meta), spec, tenant, time.time(), fault, grace=grace)
        )
    except Exception:  # StepFailed, retried: the next step may reach the ledger
        log.exception("cannot record the deadline failure of %s in the ledger", job_key(meta))
        done = False
    if not done:
        return False
    status = faultstatus.failed_at_deadline(current, fault, generation)
    post("Failed", status["message"], "Warning")
    await _write(ctx, meta, current, status)
    return True


async def delete_job(ctx: Context, body: Any, post: Poster) -> None:
    """Finalizer: cancel what is in flight, then drop the job's prompts and outputs from the ledger (its audit
    rows stay: ids, states, usage, batches; see ledger/lifetime.py)."""
    await cancel_on_delete(ctx, body, post)
    key = job_key({k: body["metadata"].get(k) for k in ("namespace", "name", "uid")})
    await asyncio.to_thread(lifetime.forget_job, ctx.ledger, key)
    await asyncio.to_thread(ledger_quota.release, ctx.ledger, key)  # its batches no longer hold quota (H5)


async def cancel_on_delete(ctx: Context, body: Any, post: Poster) -> None:
    """Finalizer: cancel the job's in-flight provider batches; the ledger rows stay (they are the audit trail).

    It waits for a batch create in flight to be recorded (the per-job guard), and the daemon creates nothing
    after it started. Deletion never blocks on the provider: a job whose Secret, provider or spec is gone is
    deleted anyway, and the batches it could not cancel are named in a Warning event and kept in the ledger."""
    meta = {k: body["metadata"].get(k) for k in ("namespace", "name", "uid")}
    key = job_key(meta)
    ctx.deleting.add(key)
    await asyncio.to_thread(ctx.queues.leave, key)  # sharded, it deletes the job's row in the shared waiting list
    kopf_loop = asyncio.get_running_loop()

    async def resolve() -> Target:  # on Kopf's loop (the API client's), read fresh: no Secret from a cache
        return await target_for(ctx, meta["namespace"], LLMBatchJobSpec.model_validate(dict(body["spec"])), fresh=True)

    async def cancel(engine: EngineLoop) -> tuple[list[str], str]:
        async with ctx.guard(key):
            live = [b["batch_id"] for b in ctx.ledger.batches_of(key, live_only=True)]
            if not live:
                return [], ""
            try:
                target = await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(resolve(), kopf_loop))
            except Exception as exc:  # no Secret, no pool, a bad spec or key: nothing can be cancelled
                return live, f"{type(exc).__name__}: {exc}"
            failed: list[str] = []
            why = ""
            async with engine.clients.lease(target.provider) as provider:
                for batch_id in live:
                    try:
                        await provider.cancel(batch_id)
                        ctx.ledger.set_batch(key, batch_id, canceled=True)
                    except ProviderError as exc:
                        failed.append(batch_id)
                        why = f"{exc.error_type}: {exc.message}"
            return failed, why

    failed, why = await ctx.engine.call(key, cancel)
    ctx.guards.pop(key, None)
    if failed:
        message = bound(
            f"deleted with {len(failed)} batches that could not be cancelled (kept in the ledger, still billed "
            f"if they run): {', '.join(failed[:20])}; {why}"
        )
        log.warning("%s: %s", key, message)
        post("CancelFailed", message, "Warning")


async def observe_generation(ctx: Context, body: Any) -> None:
    """A terminal job whose spec was edited (e.g. Git restored a deadline): record the generation as observed."""
    generation = int(body["metadata"].get("generation") or 0)
    new = status_.observed(dict(body.get("status") or {}), generation)
    await ctx.kube.patch_status(PLURAL, body["metadata"]["namespace"], body["metadata"]["name"], new)


def unobserved_terminal(body: Any, status: dict[str, Any] | None) -> bool:
    """Terminal (no daemon runs) and its observedGeneration is behind metadata.generation."""
    generation = int(body["metadata"].get("generation") or 0)
    return not is_running(status) and int((status or {}).get("observedGeneration") or 0) != generation


def is_running(status: dict[str, Any] | None) -> bool:
    return (status or {}).get("phase") not in TERMINAL_PHASES
