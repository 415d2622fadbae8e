"""LLMBatchSchedule in the cluster: one daemon per schedule carries out `barge.batch.schedule.decide`.

Each pass lists the schedule's runs (LLMBatchJobs with its label and owner reference), asks the pure core what to
do, then creates the due run (by its deterministic name: a 409 means an earlier pass or another replica already
did), removes the hold annotation of the run whose turn it is, deletes runs beyond the history limits, posts an
event for each skipped time, and writes the status. It sleeps until the next scheduled time or the poll interval,
whichever is sooner, so a held run starts within one poll of its predecessor ending. The operator never writes
the schedule's spec, and never a run's spec either (the hold is an annotation).
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException
from pydantic import ValidationError

from barge.api.schedule import LLMBatchScheduleSpec
from barge.batch.schedule import Decision, Planned, Run, ScheduleError, decide, parse_time, rfc3339
from barge.k8s.schedule import (
    HELD,
    SCHEDULE_LABEL,
    SCHEDULED_AT,
    STAGE_LABEL,
    build_runs,
    build_status,
    owned_by,
    stage_job_name,
    stages,
)
from barge.operator import kstatus
from barge.operator import status as status_
from barge.operator.jobs import Context
from barge.operator.kube import GROUP, VERSION

log = logging.getLogger("barge.operator")
PLURAL = "llmbatchschedules"
JOBS = "llmbatchjobs"
Poster = Callable[[str, str, str], None]


def to_run(job: dict[str, Any]) -> Run:
    meta = job["metadata"]
    annotations = meta.get("annotations") or {}
    status = job.get("status") or {}
    scheduled = parse_time(annotations.get(SCHEDULED_AT)) or parse_time(meta.get("creationTimestamp"))
    return Run(
        name=meta["name"],
        scheduled=scheduled or datetime.now(UTC),
        phase=str(status.get("phase") or "Pending"),
        held=HELD in annotations,
        completed=parse_time(status.get("completedAt")),
    )


def pipeline_runs(schedule: dict[str, Any], jobs: list[dict[str, Any]]) -> list[Run]:
    """A pipeline's runs: each first-stage job, terminal once every stage of its run is (Failed if one failed)."""
    first = stages(schedule)[0]
    by_time: dict[str, list[dict[str, Any]]] = {}
    for job in jobs:
        by_time.setdefault(str((job["metadata"].get("annotations") or {}).get(SCHEDULED_AT)), []).append(job)
    runs = []
    for group in by_time.values():
        head = [j for j in group if (j["metadata"].get("labels") or {}).get(STAGE_LABEL) == first]
        if not head:
            continue  # later stages whose first stage is gone: deleted with it (carry_out)
        run = to_run(head[0])
        parts = [to_run(j) for j in group]
        open_ = [p for p in parts if not p.terminal]
        if open_:
            phase = run.phase if not run.terminal else open_[0].phase
        else:
            phase = "Failed" if any(p.phase == "Failed" for p in parts) else "Succeeded"
        done = [p.completed for p in parts if p.completed is not None]
        runs.append(Run(run.name, run.scheduled, phase, run.held, max(done) if done and not open_ else None))
    return runs


async def ensure_stages(runs_api: Runs, schedule: dict[str, Any], jobs: list[dict[str, Any]], runs: list[Run]) -> None:
    """Every stage of every active run exists: a pass that stopped between a run's creates finishes them."""
    have = {j["metadata"]["name"] for j in jobs}
    heads = {j["metadata"]["name"]: j for j in jobs}
    for run in runs:
        head = heads.get(run.name)
        if run.terminal or head is None:
            continue
        spec = head.get("spec") or {}
        deadline = parse_time(spec.get("deadline"))
        planned = Planned(run.name, run.scheduled, str(spec.get("runDate") or ""), deadline, False)
        for manifest in build_runs(schedule, planned)[1:]:
            if manifest["metadata"]["name"] not in have:
                await runs_api.create(manifest)


class RunRejected(Exception):
    """The API server refused a run built from the template (a CEL rule, a quota, RBAC): the schedule stalls."""


class Runs:
    """The Kubernetes calls on a schedule's runs."""

    def __init__(self, ctx: Context, namespace: str) -> None:
        self.ctx = ctx
        self.namespace = namespace

    async def _api(self) -> client.CustomObjectsApi:
        return client.CustomObjectsApi(await self.ctx.kube.api())

    async def list(self, schedule: str, uid: str) -> list[dict[str, Any]]:
        found = await (await self._api()).list_namespaced_custom_object(
            GROUP, VERSION, self.namespace, JOBS, label_selector=f"{SCHEDULE_LABEL}={schedule}"
        )
        return [j for j in found.get("items", []) if owned_by(j, uid) and not j["metadata"].get("deletionTimestamp")]

    async def create(self, manifest: dict[str, Any]) -> bool:
        """True when created; False when it already exists (an earlier pass or another replica created it)."""
        try:
            await (await self._api()).create_namespaced_custom_object(GROUP, VERSION, self.namespace, JOBS, manifest)
        except ApiException as exc:
            if exc.status == 409:
                return False
            if exc.status in (400, 403, 422):
                raise RunRejected(f"the API server refused run {manifest['metadata']['name']}: {_reason(exc)}") from exc
            raise
        return True

    async def release(self, name: str) -> None:
        try:
            await (await self._api()).patch_namespaced_custom_object(  # type: ignore[call-arg]  # via **kwargs
                GROUP,
                VERSION,
                self.namespace,
                JOBS,
                name,
                {"metadata": {"annotations": {HELD: None}}},
                _content_type="application/merge-patch+json",
            )
        except ApiException as exc:
            if exc.status != 404:  # deleted meanwhile: nothing left to release
                raise

    async def delete(self, name: str) -> None:
        try:
            await (await self._api()).delete_namespaced_custom_object(
                GROUP, VERSION, self.namespace, JOBS, name, propagation_policy="Background"
            )
        except ApiException as exc:
            if exc.status != 404:
                raise


def _reason(exc: ApiException) -> str:
    """The API server's message for a refused create, bounded (it quotes the template back)."""
    try:
        message = str(json.loads(exc.body or "{}").get("message") or exc.reason)
    except (ValueError, AttributeError):
        message = str(exc.reason)
    return message if len(message) <= 1000 else message[:1000] + " [truncated]"


async def _write(ctx: Context, meta: dict[str, Any], old: dict[str, Any], new: dict[str, Any]) -> dict[str, Any]:
    if status_.changed(old, new):
        await ctx.kube.patch_status(PLURAL, meta["namespace"], meta["name"], new)
    return {**old, **new}


def _stalled(old: dict[str, Any], reason: str, message: str, generation: int) -> dict[str, Any]:
    conds = status_.merge_conditions(
        old.get("conditions", []),
        kstatus.schedule_conditions(reason, message, False),
        generation,
        status_.now_rfc3339(),
    )
    return {"observedGeneration": generation, "conditions": conds, "message": message, "nextScheduleTime": None}


async def carry_out(
    runs_api: Runs, body: dict[str, Any], decision: Decision, runs: list[Run], post: Poster
) -> tuple[list[Run], dict[str, str]]:
    """Apply a decision; returns the runs as they now are and each new run's date."""
    dates: dict[str, str] = {}
    for name in decision.release:
        await runs_api.release(name)
        post("RunReleased", f"{name} may start: every earlier run is terminal", "Normal")
    runs = [Run(r.name, r.scheduled, r.phase, False, r.completed) if r.name in decision.release else r for r in runs]
    scheduled = {r.name: r.scheduled for r in runs}
    for name in decision.delete:
        await runs_api.delete(name)
        for stage in stages(body)[1:]:  # a pipeline's run: its later stages go with it
            if name in scheduled:
                await runs_api.delete(stage_job_name(body, stage, scheduled[name]))
        post("RunDeleted", f"deleted {name}: beyond the history limit", "Normal")
    if decision.create is not None:  # last: a refused run (RunRejected) must not stop releases and deletions
        plan = decision.create
        made = False
        for manifest in build_runs(body, plan):  # one job, or a pipeline's stages (the first is the run)
            made = await runs_api.create(manifest) or made
        held = " (held until the previous run is terminal)" if plan.held else ""
        deadline = f", deadline {rfc3339(plan.deadline)}" if plan.deadline else ""
        if made:
            post(
                "RunCreated",
                f"created {plan.name} for {rfc3339(plan.scheduled)}: runDate {plan.run_date}{deadline}{held}",
                "Normal",
            )
        else:
            post("RunExists", f"{plan.name} already exists (created by an earlier pass or another replica)", "Normal")
        dates[plan.name] = plan.run_date
        runs = [*runs, Run(plan.name, plan.scheduled, "Pending", plan.held)]
    for skip in decision.skipped:  # after the create: a refused run is retried next pass, and so are these
        post(skip.reason, skip.message, "Warning")
    return [r for r in runs if r.name not in decision.delete], dates


async def reconcile(
    ctx: Context, body: Any, old: dict[str, Any], post: Poster, now: datetime | None = None
) -> tuple[dict[str, Any], datetime | None]:
    """One pass over one schedule, from the status last written (`old`, the watch may lag behind our own patch).

    Returns the status now and the next scheduled time (None when there is nothing to wait for)."""
    meta = dict(body["metadata"])
    generation = int(meta.get("generation") or 0)
    plain = {"metadata": meta, "spec": dict(body["spec"])}
    try:
        spec = LLMBatchScheduleSpec.model_validate(plain["spec"])
    except ValidationError as exc:
        message = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
        return await _write(ctx, meta, old, _stalled(old, "InvalidSpec", f"invalid spec: {message}", generation)), None
    now = now or datetime.now(UTC)
    runs_api = Runs(ctx, meta["namespace"])
    jobs = await runs_api.list(meta["name"], meta["uid"])
    runs = pipeline_runs(plain, jobs) if stages(plain) else [to_run(j) for j in jobs]
    dates = {j["metadata"]["name"]: str((j.get("spec") or {}).get("runDate") or "") for j in jobs}
    created = parse_time(meta.get("creationTimestamp")) or now
    considered = parse_time(old.get("lastConsideredTime"))
    try:  # in a thread: after a long stop a minutely schedule scans up to 100,000 cron times (~1.6 s; review 3, L1)
        decision = await asyncio.to_thread(decide, meta["name"], spec, created, considered, runs, now)
    except ScheduleError as exc:
        return await _write(ctx, meta, old, _stalled(old, "InvalidSchedule", str(exc), generation)), None
    try:
        runs, new_dates = await carry_out(runs_api, plain, decision, runs, post)
    except RunRejected as exc:
        if (old.get("message") or "") != str(exc):
            post("RunRejected", str(exc), "Warning")
        stalled = _stalled(old, "RunRejected", str(exc), generation)
        next_time = rfc3339(decision.next_time) if decision.next_time else None
        # The refused time is retried, and only it: the cursor moves to just before it, so the times skipped in
        # this pass are not scanned again at every pass while the template stays refused.
        assert decision.create is not None  # only a create is refused
        retry = rfc3339(decision.create.scheduled - timedelta(seconds=1))
        new = {**stalled, "nextScheduleTime": next_time, "lastConsideredTime": retry}
        return await _write(ctx, meta, old, new), decision.next_time
    if stages(plain):
        await ensure_stages(runs_api, plain, jobs, runs)
    new = build_status(decision, runs, old, {**dates, **new_dates})
    new["observedGeneration"] = generation
    new["conditions"] = status_.merge_conditions(
        old.get("conditions", []),
        kstatus.schedule_conditions(None, new["message"], spec.suspend),
        generation,
        status_.now_rfc3339(),
    )
    return await _write(ctx, meta, old, new), decision.next_time


async def run(ctx: Context, body: Any, stopped: Any, post: Poster) -> None:
    """The daemon of one schedule: a pass, then sleep until the next scheduled time or the poll interval."""
    poll = ctx.config.poll_seconds
    current: dict[str, Any] = dict(body.get("status") or {})
    while not stopped:
        try:
            current, upcoming = await reconcile(ctx, body, current, post)
        except ApiException as exc:
            log.warning("schedule %s: API error %s, retrying", body["metadata"].get("name"), exc.status)
            upcoming = None
        wait = poll
        if upcoming is not None:
            wait = min(poll, max(0.2, (upcoming - datetime.now(UTC)).total_seconds() + 0.2))
        await stopped.wait(wait)
