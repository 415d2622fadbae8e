"""The LLMBatchJob of one scheduled run, and the schedule's status, as dicts (pure builders).

Why here: the run's manifest is what makes creation idempotent (its name), what makes Argo CD show runs as the
schedule's children (the owner reference) and how a run learns it is held (an annotation the operator removes,
since the operator never writes a job's spec).
"""

from __future__ import annotations

import copy
from dataclasses import replace
from datetime import datetime
from typing import Any

from barge.batch.schedule import Decision, Planned, Run, rfc3339, run_name
from barge.k8s.pool import inherited_labels

SCHEDULE_LABEL = "barge.dev/schedule"
SCHEDULED_AT = "barge.dev/scheduled-at"
STAGE_LABEL = "barge.dev/stage"
"""On each job of a pipeline's run (spec.stages): its stage's name."""
HELD = "barge.dev/held-by-schedule"
"""Present on a run created while an earlier one was active (concurrencyPolicy Hold): the job stays Queued and
submits nothing until the schedule removes it. Its value names the schedule."""
URL_FIELDS = (("input", "url"), ("output", "url"))
MESSAGE_NAMES = 10
"""Runs the status message names (the rest counted): it is copied into the conditions, whose schema caps a message
at 32768 characters, and 600 names of 63 were refused by the API server (review 3, H9)."""


def _names(runs: list[Run]) -> str:
    shown = ", ".join(r.name for r in runs[:MESSAGE_NAMES])
    return shown + (f" and {len(runs) - MESSAGE_NAMES} more" if len(runs) > MESSAGE_NAMES else "")


def owner_reference(schedule: dict[str, Any]) -> dict[str, Any]:
    meta = schedule["metadata"]
    return {
        "apiVersion": "barge.dev/v1alpha1",
        "kind": "LLMBatchSchedule",
        "name": meta["name"],
        "uid": meta["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }


def stages(schedule: dict[str, Any]) -> list[str]:
    """The schedule's stage names in order; [] for a schedule of one jobTemplate."""
    return [str(s["name"]) for s in schedule["spec"].get("stages") or []]


def stage_job_name(schedule: dict[str, Any], stage: str, scheduled: datetime) -> str:
    return run_name(f"{schedule['metadata']['name']}-{stage}", scheduled)


def build_runs(schedule: dict[str, Any], planned: Planned) -> list[dict[str, Any]]:
    """Every LLMBatchJob of one run: one, or one per stage, each later stage's fromJob naming an earlier stage
    resolved to that stage's job of the same run; only the first stage is ever held."""
    names = stages(schedule)
    if not names:
        return [build_run(schedule, planned)]
    jobs = []
    for n, stage in enumerate(schedule["spec"]["stages"]):
        spec = copy.deepcopy(stage["jobTemplate"]["spec"])
        source = (spec.get("input") or {}).get("fromJob")
        if isinstance(source, dict) and source.get("name") in names:
            source["name"] = stage_job_name(schedule, str(source["name"]), planned.scheduled)
        name = stage_job_name(schedule, str(stage["name"]), planned.scheduled)
        part = replace(planned, name=name, held=planned.held and n == 0)
        job = build_run(schedule, part, {**stage["jobTemplate"], "spec": spec})
        job["metadata"]["labels"][STAGE_LABEL] = str(stage["name"])
        jobs.append(job)
    return jobs


def build_run(schedule: dict[str, Any], planned: Planned, template: dict[str, Any] | None = None) -> dict[str, Any]:
    """The LLMBatchJob of `planned`: the template with `{runDate}` filled in the URLs, runDate and deadline set."""
    meta = schedule["metadata"]
    template = template or schedule["spec"]["jobTemplate"]
    tmeta = template.get("metadata") or {}
    spec = copy.deepcopy(template["spec"])
    for section, key in URL_FIELDS:
        value = (spec.get(section) or {}).get(key)
        if isinstance(value, str):
            spec[section][key] = value.replace("{runDate}", planned.run_date)
    spec["runDate"] = planned.run_date
    if planned.deadline is not None:
        spec["deadline"] = rfc3339(planned.deadline)
    annotations = {**(tmeta.get("annotations") or {}), SCHEDULED_AT: rfc3339(planned.scheduled)}
    if planned.held:
        annotations[HELD] = meta["name"]
    return {
        "apiVersion": "barge.dev/v1alpha1",
        "kind": "LLMBatchJob",
        "metadata": {
            "name": planned.name,
            "namespace": meta["namespace"],
            "labels": {**inherited_labels(tmeta.get("labels")), SCHEDULE_LABEL: meta["name"]},
            "annotations": annotations,
            "ownerReferences": [owner_reference(schedule)],
        },
        "spec": spec,
    }


def owned_by(job: dict[str, Any], uid: str) -> bool:
    return any(ref.get("uid") == uid for ref in job["metadata"].get("ownerReferences") or [])


def build_status(
    decision: Decision,
    runs: list[Run],
    old: dict[str, Any],
    run_dates: dict[str, str],
) -> dict[str, Any]:
    """Status fields from the runs after the decision was carried out (without conditions)."""
    active = sorted((r for r in runs if not r.terminal), key=lambda r: r.scheduled)
    newest = max(runs, key=lambda r: r.scheduled, default=None)
    succeeded = [r.completed or r.scheduled for r in runs if r.phase == "Succeeded"]
    last_ok = max([t for t in (*succeeded,) if t is not None], default=None)
    old_ok = old.get("lastSuccessfulTime")
    held = [r for r in active if r.held]
    status: dict[str, Any] = {
        "active": len(active),
        "activeJobs": [r.name for r in active],
        "held": len(held),
        "lastScheduleTime": rfc3339(newest.scheduled) if newest else old.get("lastScheduleTime"),
        "lastSuccessfulTime": max(filter(None, (old_ok, rfc3339(last_ok) if last_ok else None)), default=None),
        "nextScheduleTime": rfc3339(decision.next_time) if decision.next_time else None,
        "lastConsideredTime": rfc3339(decision.considered) if decision.considered else old.get("lastConsideredTime"),
        "lastRun": (
            {"name": newest.name, "phase": newest.phase, "runDate": run_dates.get(newest.name, "")}
            if newest
            else old.get("lastRun")
        ),
    }
    running = [r for r in active if not r.held]
    parts = []
    if running:
        parts.append(f"running: {_names(running)}")
    if held:
        parts.append(f"held until the previous run ends: {_names(held)}")
    status["message"] = "; ".join(parts) or "waiting for the next scheduled time"
    return status
