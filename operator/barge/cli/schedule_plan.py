"""`barge plan` of an LLMBatchSchedule: its next runs (times, run dates, deadlines) and the next run's job plan.

Why: a schedule's mistakes (the wrong zone, a deadline before the start, a URL without `{runDate}`) are cheap to
see before the first night and expensive after it. The runs are computed by the same pure core the operator
uses, and the next run's job is built by the same builder, then planned like any LLMBatchJob.
"""

from __future__ import annotations

from datetime import UTC, datetime
from itertools import islice
from pathlib import Path
from typing import Any

import typer
import yaml
from pydantic import ValidationError
from rich import box
from rich.console import Console
from rich.table import Table

from barge.api.batchjob import LLMBatchJob
from barge.api.schedule import LLMBatchSchedule
from barge.batch.schedule import Planned, ScheduleError, deadline_for, run_date, run_name, times_after, zone
from barge.cli import local, pipeline_plan
from barge.k8s.schedule import build_run, build_runs


def _docs(path: Path) -> list[dict[str, Any]]:
    try:
        return [d for d in yaml.safe_load_all(path.read_text()) if isinstance(d, dict)]
    except (OSError, yaml.YAMLError) as exc:
        local.err.print(f"[red]cannot read {path}: {exc}[/red]")
        raise typer.Exit(2) from exc


def plan_any(path: Path, runs: int, now: datetime | None = None, sample: Path | None = None) -> None:
    """`barge plan FILE`: an LLMBatchSchedule's next runs, a pipeline's stages, or an LLMBatchJob's plan."""
    docs = _docs(path)
    schedules = [d for d in docs if d.get("kind") == "LLMBatchSchedule"]
    jobs = [d for d in docs if d.get("kind") == "LLMBatchJob"]
    if not schedules and len(jobs) > 1:  # a pipeline: stages joined by spec.input.fromJob (cli/pipeline_plan.py)
        pipeline_plan.print_pipeline([_job(d) for d in jobs], path, sample)
        return
    if not schedules:
        local.plan_command(path)
        return
    if len(schedules) != 1:
        local.err.print(f"[red]{path} must hold one LLMBatchSchedule (found {len(schedules)})[/red]")
        raise typer.Exit(2)
    plan_schedule(schedules[0], path, runs, now or datetime.now(UTC), sample)


def _job(doc: dict[str, Any]) -> LLMBatchJob:
    try:
        return LLMBatchJob.model_validate(doc)
    except ValidationError as exc:
        local.err.print(f"[red]invalid manifest {doc.get('metadata', {}).get('name')!r}: {exc}[/red]")
        raise typer.Exit(2) from exc


def _local(instant: datetime | None, tz: Any) -> str:
    return instant.astimezone(tz).strftime("%Y-%m-%d %H:%M %Z") if instant else "-"


def plan_schedule(doc: dict[str, Any], path: Path, runs: int, now: datetime, sample: Path | None = None) -> None:
    try:
        schedule = LLMBatchSchedule.model_validate(doc)
        tz = zone(schedule.spec.time_zone)
        upcoming = list(islice(times_after(schedule.spec.schedule, tz, now), runs))
    except (ValidationError, ScheduleError) as exc:
        local.err.print(f"[red]invalid schedule: {exc}[/red]")
        raise typer.Exit(2) from exc
    spec, name = schedule.spec, str(schedule.metadata.get("name") or path.stem)
    out = Console()
    table = Table(title=f"next runs: {name} ({spec.schedule}, {spec.time_zone})", box=box.SIMPLE_HEAD)
    for col in ("scheduled", "run date", "deadline", "time to deadline"):
        table.add_column(col, no_wrap=True)
    for t in upcoming:
        deadline = deadline_for(t, tz, spec.deadline)
        left = f"{(deadline - t).total_seconds() / 3600:.1f} h" if deadline else "-"
        table.add_row(_local(t, tz), run_date(t, tz), _local(deadline, tz), left)
    out.print(table)
    if spec.suspend:
        out.print("[yellow]spec.suspend is true: the operator creates no runs until it is false[/yellow]")
    if not upcoming:
        return
    first = upcoming[0]
    planned = Planned(run_name(name, first), first, run_date(first, tz), deadline_for(first, tz, spec.deadline), False)
    out.print(f"runs are named {name}-<minutes since the epoch>; the next is {planned.name}")
    body = schedule.model_dump(by_alias=True, exclude_none=True)
    body["metadata"] = {"namespace": "default", "uid": "plan", **schedule.metadata, "name": name}
    if spec.stages:  # a pipeline: the next run's stages, planned together (cli/pipeline_plan.py)
        stage_jobs = [LLMBatchJob.model_validate(j) for j in build_runs(body, planned)]
        out.print(f"the next run's stages: {', '.join(str(j.metadata['name']) for j in stage_jobs)}")
        try:
            pipeline_plan.print_pipeline(stage_jobs, path, sample)
        except typer.Exit:
            out.print("[yellow]the next run's input cannot be planned yet (above); the runs' times stand[/yellow]")
        except Exception as exc:  # storage SDKs raise their own errors (e.g. no credentials on this machine)
            out.print(f"[yellow]cannot read the next run's input here ({type(exc).__name__}: {exc})[/yellow]")
        return
    job = LLMBatchJob.model_validate(build_run(body, planned))
    out.print(f"the next run reads {job.spec.input.url or 'its inline or ConfigMap input'}")
    try:
        local.plan_job(job, path)
    except typer.Exit:
        out.print("[yellow]the next run's input cannot be planned yet (above); the runs' times stand[/yellow]")
    except Exception as exc:  # storage SDKs raise their own errors (e.g. no credentials on this machine)
        out.print(
            f"[yellow]cannot read the next run's input here ({type(exc).__name__}: {exc}); the runs' times "
            "stand[/yellow]"
        )
