"""LLMBatchSchedule: an LLMBatchJob created on a cron schedule, like a CronJob creates Jobs.

Why a kind of its own rather than an outside CronJob: a nightly job written once in Git (no commit per night),
runs named from the scheduled time so a restart or a second replica never creates one twice, a run date and a
local-time deadline taken from the schedule's time zone, and the next night held until the previous one is
terminal. These models are the source of `crds/llmbatchschedules.barge.dev.yaml`; the schedule arithmetic lives
in `barge.batch.schedule`.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Any, Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from cronsim import CronSim, CronSimError
from pydantic import ConfigDict, Field, field_validator, model_validator

from barge.api.batchjob import LLMBatchJobSpec, Phase
from barge.api.common import Condition, Model, cel, validations

ConcurrencyPolicy = Literal["Hold", "Forbid", "Allow"]
DURATION = r"^([0-9]+h)?([0-9]+m)?$"
TIME_OF_DAY = r"^([01][0-9]|2[0-3]):[0-5][0-9]$"
_DURATION = re.compile(DURATION)


class JobTemplateSpec(LLMBatchJobSpec):
    """An LLMBatchJob spec for every run; `{runDate}` in input.url, output.url and customId is the run's date.

    runDate and deadline are the schedule's to set (from the scheduled time), so the template leaves them out.
    The job's immutability rules do not apply here: the template may be edited; runs already created keep theirs.
    """

    model_config = ConfigDict(
        json_schema_extra=validations(
            cel("!has(self.runDate)", "runDate comes from the scheduled time; leave it out of the template"),
            cel("!has(self.deadline)", "the deadline of a run is the schedule's spec.deadline; leave it out here"),
        )
    )

    @model_validator(mode="after")
    def _schedule_owned(self) -> JobTemplateSpec:
        if self.run_date is not None:
            raise ValueError("runDate comes from the scheduled time; leave it out of the template")
        if self.deadline is not None:
            raise ValueError("the deadline of a run is the schedule's spec.deadline; leave it out here")
        return self


class TemplateMetadata(Model):
    """Labels and annotations copied to every run (the schedule's own metadata is not)."""

    labels: dict[str, str] = Field(default_factory=dict, description="Labels of every run.")
    annotations: dict[str, str] = Field(default_factory=dict, description="Annotations of every run.")


class JobTemplate(Model):
    """What each run is, shaped as a CronJob's jobTemplate."""

    metadata: TemplateMetadata = Field(default_factory=TemplateMetadata, description="Labels and annotations.")
    spec: JobTemplateSpec = Field(description="The LLMBatchJob spec of every run.")


STAGE_NAME = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"


class Stage(Model):
    """One stage of a pipeline: an LLMBatchJob of every run, named <schedule>-<stage>-<minute>. A later stage's
    `input.fromJob.name` naming an earlier stage is that stage's job of the same run (the same night)."""

    name: str = Field(min_length=1, max_length=20, pattern=STAGE_NAME, description="The stage's name (classify).")
    job_template: JobTemplate = Field(description="The LLMBatchJob of this stage in every run.")


class ScheduleDeadline(Model):
    """Each run's deadline: a local time of day (the first one after the scheduled time) or a duration after it."""

    model_config = ConfigDict(
        json_schema_extra=validations(
            cel("has(self.at) != has(self.after)", "set exactly one of spec.deadline.at and spec.deadline.after")
        )
    )

    at: str | None = Field(
        None,
        pattern=TIME_OF_DAY,
        description='Local time "HH:MM" in timeZone; the first such time after the scheduled time.',
    )
    after: str | None = Field(
        None,
        pattern=DURATION,
        min_length=2,
        max_length=16,
        description='Elapsed time after the scheduled time, e.g. "4h", "90m", "1h30m".',
    )

    @model_validator(mode="after")
    def _one(self) -> ScheduleDeadline:
        if (self.at is None) == (self.after is None):
            raise ValueError("set exactly one of spec.deadline.at and spec.deadline.after")
        return self


class LLMBatchScheduleSpec(Model):
    """Desired state of an LLMBatchSchedule. The operator never writes it."""

    model_config = ConfigDict(
        json_schema_extra=validations(
            cel(
                "has(self.jobTemplate) != (has(self.stages) && size(self.stages) > 0)",
                "set exactly one of spec.jobTemplate and spec.stages",
            )
        )
    )

    schedule: str = Field(
        min_length=9,
        max_length=256,
        description='Cron expression with five fields (minute hour day-of-month month day-of-week), e.g. "0 22 * * *".',
    )
    time_zone: str = Field(
        "UTC", min_length=1, max_length=64, description="IANA time zone of the schedule, the run date and deadline."
    )
    job_template: JobTemplate | None = Field(None, description="The LLMBatchJob each run is (or spec.stages).")
    stages: list[Stage] = Field(
        default_factory=list,
        max_length=8,
        description="A pipeline instead of one jobTemplate: every run creates one LLMBatchJob per stage, each "
        "named <schedule>-<stage>-<minute>; a stage's input.fromJob.name naming an earlier stage takes that "
        "stage's results of the same run, as they land. The first stage is the one held; a run is terminal once "
        "every stage is.",
    )
    deadline: ScheduleDeadline | None = Field(None, description="Each run's deadline; none when left out.")
    concurrency_policy: ConcurrencyPolicy = Field(
        "Hold",
        description="Hold: create the next run but hold it (phase Queued) until the previous one is terminal; "
        "Forbid: skip the next run while one is active; Allow: run both.",
    )
    starting_deadline_seconds: int | None = Field(
        None, ge=0, description="A run more than this late (e.g. after an outage) is skipped, with an event."
    )
    suspend: bool = Field(False, description="True creates no new runs; runs already created go on.")
    successful_jobs_history_limit: int = Field(3, ge=0, le=100, description="Succeeded runs kept.")
    failed_jobs_history_limit: int = Field(1, ge=0, le=100, description="Failed runs kept.")

    @model_validator(mode="after")
    def _one_template(self) -> LLMBatchScheduleSpec:
        if (self.job_template is None) == (not self.stages):
            raise ValueError("set exactly one of spec.jobTemplate and spec.stages")
        seen: list[str] = []
        for stage in self.stages:
            if stage.name in seen:
                raise ValueError(f"spec.stages: the name {stage.name!r} is used twice")
            source = stage.job_template.spec.input.from_job
            later = [s.name for s in self.stages[len(seen) :]]
            if source is not None and source.name in later:
                raise ValueError(
                    f"spec.stages[{stage.name}]: fromJob {source.name!r} must name an earlier stage (or another job)"
                )
            seen.append(stage.name)
        return self

    @field_validator("schedule")
    @classmethod
    def _five_fields(cls, value: str) -> str:
        if len(value.split()) != 5:
            raise ValueError("spec.schedule must have five fields: minute hour day-of-month month day-of-week")
        try:
            CronSim(value, datetime(2000, 1, 1, tzinfo=UTC))
        except CronSimError as exc:
            raise ValueError(f"spec.schedule {value!r} is not a cron expression: {exc}") from None
        return value

    @field_validator("time_zone")
    @classmethod
    def _zone(cls, value: str) -> str:
        try:
            ZoneInfo(value)
        except (ZoneInfoNotFoundError, ValueError):
            raise ValueError(f"spec.timeZone {value!r} is not an IANA time zone") from None
        return value


class LastRun(Model):
    """The newest run the schedule created."""

    name: str = Field(description="Name of the LLMBatchJob.")
    phase: Phase = Field("Pending", description="Its phase as last seen.")
    run_date: str = Field("", description="Its run date.")


class LLMBatchScheduleStatus(Model):
    """Observed state, written only by the operator through the status subresource."""

    model_config = ConfigDict(extra="ignore")

    observed_generation: int = Field(0, ge=0, description="The .metadata.generation last acted on.")
    conditions: list[Condition] = Field(
        default_factory=list,
        description="Ready, Reconciling, Stalled (kstatus).",
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["type"]},
    )
    active: int = Field(0, ge=0, description="Runs not yet terminal (held ones included).")
    active_jobs: list[str] = Field(default_factory=list, description="Names of the runs not yet terminal.")
    held: int = Field(0, ge=0, description="Runs held (phase Queued) until the previous one is terminal.")
    last_schedule_time: str | None = Field(None, description="Scheduled time of the newest run created (RFC 3339).")
    last_successful_time: str | None = Field(None, description="When a run last succeeded (RFC 3339).")
    next_schedule_time: str | None = Field(None, description="The next scheduled time (RFC 3339, UTC).")
    last_considered_time: str | None = Field(
        None, description="The newest scheduled time acted on: a run created or skipped (RFC 3339)."
    )
    last_run: LastRun | None = Field(None, description="The newest run and its phase.")
    message: str = Field("", description="A human-readable summary.")


class LLMBatchSchedule(Model):
    """LLMBatchJobs on a cron schedule in a time zone, with run dates and local-time deadlines."""

    model_config = ConfigDict(extra="ignore")

    api_version: Literal["barge.dev/v1alpha1"] = Field("barge.dev/v1alpha1")
    kind: Literal["LLMBatchSchedule"] = Field("LLMBatchSchedule")
    metadata: dict[str, Any] = Field(default_factory=dict)
    spec: LLMBatchScheduleSpec
    status: LLMBatchScheduleStatus | None = None


def parse_duration_text(text: str) -> tuple[int, int]:
    """(hours, minutes) of "4h", "90m", "1h30m"."""
    match = _DURATION.match(text)
    if not match or not text:
        raise ValueError(f"{text!r} is not a duration like 4h, 90m or 1h30m")
    hours, minutes = match.group(1), match.group(2)
    return int(hours[:-1]) if hours else 0, int(minutes[:-1]) if minutes else 0
