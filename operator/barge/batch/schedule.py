"""What an LLMBatchSchedule must do now: which run is due, its name, run date and deadline (pure: no I/O).

Why pure: the rules below decide when money is spent, and time zones make them easy to get wrong, so they are
unit-tested with a fixed clock, DST days included, and the operator only carries out `decide`'s answer.

question -> answer:
- When is a run due? At each time the cron expression matches in `timeZone`. Parsing is cronsim's, with Debian
  cron's DST rules: a daily time in the spring-forward gap runs at the first minute after the gap; one in the
  repeated autumn hour runs once, at its first occurrence.
- Which due times count? Those after the newest one already acted on (status `lastConsideredTime`, the newest
  run, or the schedule's creation), up to now.
- Several missed (operator down, suspended)? Only the latest runs; each earlier one is skipped with a
  `MissedSchedule` event (MAX_MISSED_EVENTS named, the rest counted in one event).
- The latest is later than `startingDeadlineSeconds`? Skipped too, with a `MissedSchedule` event.
- Its name? `<schedule>-<minutes since the epoch>`, as CronJob names its Jobs: creating it twice is a 409.
- A run still active (not Succeeded/Failed)? `Hold` (default): the new run is created held (phase Queued) and
  released when every earlier run is terminal; at most one run waits so: while one does, a later time is skipped
  with a `MissedSchedule` event (a first run that never ended made one run a minute, without end: review 3, H9).
  `Forbid`: skipped with a `ForbiddenConcurrent` event. `Allow`: created and started.
- Run date? The scheduled time's date in `timeZone`.
- Deadline `at: "06:00"`? The first 06:00 in `timeZone` after the scheduled time (a 06:00 that does not exist
  that day is read with the offset in force before the change).
- Deadline `after: 4h`? Four hours of elapsed time after the scheduled time, whatever the wall clock does.
- History? Terminal runs beyond `successfulJobsHistoryLimit` / `failedJobsHistoryLimit` are deleted, oldest first.

Every instant is compared in UTC: two datetimes in the same zone compare by wall clock in Python, wrong across DST.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, time, timedelta
from zoneinfo import ZoneInfo

from cronsim import CronSim, CronSimError

from barge.api.batchjob import TERMINAL_PHASES
from barge.api.schedule import LLMBatchScheduleSpec, ScheduleDeadline, parse_duration_text

MAX_NAME = 52
"""Longest schedule name: its runs add 11 characters and must fit a 63-character label value, as CronJob's do."""
MAX_MISSED_EVENTS = 10
"""Missed times named one event each; beyond this one event counts the rest (a minutely schedule down a day)."""
_SCAN_LIMIT = 100_000


class ScheduleError(ValueError):
    """The schedule cannot be evaluated (bad cron expression, unknown zone, name too long)."""


def zone(name: str) -> ZoneInfo:
    try:
        return ZoneInfo(name)
    except (ValueError, LookupError):
        raise ScheduleError(f"spec.timeZone {name!r} is not an IANA time zone") from None


def _cron(expr: str, start: datetime) -> CronSim:
    if len(expr.split()) != 5:
        raise ScheduleError("spec.schedule must have five fields: minute hour day-of-month month day-of-week")
    try:
        return CronSim(expr, start)
    except CronSimError as exc:
        raise ScheduleError(f"spec.schedule {expr!r} is not a cron expression: {exc}") from None


def _cron_reverse(expr: str, start: datetime) -> CronSim:
    return CronSim(expr, start.replace(microsecond=0), reverse=True)


def times_after(expr: str, tz: ZoneInfo, after: datetime) -> Iterable[datetime]:
    """Scheduled instants strictly after `after`, ascending, in UTC."""
    after = after.astimezone(UTC)
    last = after
    for local in _cron(expr, after.astimezone(tz).replace(microsecond=0)):
        instant = local.astimezone(UTC)
        if instant > last:  # cronsim walks wall-clock time: a repeated hour must not go back in time
            last = instant
            yield instant


def next_time(expr: str, tz: ZoneInfo, after: datetime) -> datetime:
    return next(iter(times_after(expr, tz, after)))


def due_times(expr: str, tz: ZoneInfo, after: datetime, now: datetime) -> tuple[list[datetime], int]:
    """Scheduled instants in (after, now]: the newest MAX_MISSED_EVENTS + 1 of them, and how many there were."""
    found: list[datetime] = []
    count = 0
    for instant in times_after(expr, tz, after):
        if instant > now:
            break
        if count >= _SCAN_LIMIT:  # down for ages on a frequent schedule: stop counting, find the latest backwards
            latest = next(_cron_reverse(expr, (now + timedelta(seconds=1)).astimezone(tz))).astimezone(UTC)
            return [latest], count + 1
        count += 1
        found.append(instant)
        if len(found) > MAX_MISSED_EVENTS + 1:
            found.pop(0)
    return found, count


def run_date(scheduled: datetime, tz: ZoneInfo) -> str:
    return scheduled.astimezone(tz).date().isoformat()


def _local(day: date, at: time, tz: ZoneInfo) -> datetime:
    return datetime.combine(day, at, tzinfo=tz).astimezone(UTC)  # fold=0: the offset in force before a change


def deadline_for(scheduled: datetime, tz: ZoneInfo, deadline: ScheduleDeadline | None) -> datetime | None:
    """The run's deadline as a UTC instant (table above)."""
    if deadline is None:
        return None
    start = scheduled.astimezone(UTC)
    if deadline.after is not None:
        hours, minutes = parse_duration_text(deadline.after)
        return start + timedelta(hours=hours, minutes=minutes)
    assert deadline.at is not None
    at = time.fromisoformat(deadline.at)
    day = start.astimezone(tz).date()
    candidate = _local(day, at, tz)
    while candidate <= start:
        day += timedelta(days=1)
        candidate = _local(day, at, tz)
    return candidate


def run_name(schedule: str, scheduled: datetime) -> str:
    return f"{schedule}-{int(scheduled.timestamp()) // 60}"


def rfc3339(instant: datetime) -> str:
    return instant.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_time(text: str | None) -> datetime | None:
    if not text:
        return None
    return datetime.fromisoformat(text.replace("Z", "+00:00")).astimezone(UTC)


@dataclass(frozen=True)
class Run:
    """A run that exists, as the operator sees it."""

    name: str
    scheduled: datetime
    phase: str
    held: bool = False
    completed: datetime | None = None

    @property
    def terminal(self) -> bool:
        return self.phase in TERMINAL_PHASES


@dataclass(frozen=True)
class Planned:
    """A run to create."""

    name: str
    scheduled: datetime
    run_date: str
    deadline: datetime | None
    held: bool


@dataclass(frozen=True)
class Skipped:
    scheduled: datetime
    reason: str
    message: str


@dataclass(frozen=True)
class Decision:
    """What to do now; applying it twice does nothing more (creation is by name, the rest is idempotent)."""

    create: Planned | None = None
    skipped: list[Skipped] = field(default_factory=list)
    release: list[str] = field(default_factory=list)
    delete: list[str] = field(default_factory=list)
    considered: datetime | None = None
    next_time: datetime | None = None


def _missed_message(count: int, latest: datetime) -> str:
    if count >= _SCAN_LIMIT:
        return f"at least {_SCAN_LIMIT} scheduled times before {rfc3339(latest)} were missed"
    return f"{count} scheduled times before {rfc3339(latest)} were missed (the newest are named in their own events)"


def decide(
    name: str,
    spec: LLMBatchScheduleSpec,
    created: datetime,
    considered: datetime | None,
    runs: list[Run],
    now: datetime,
) -> Decision:
    """The schedule's next actions at `now` (module docstring); raises ScheduleError for a schedule that cannot run."""
    longest = max((len(s.name) + 1 for s in spec.stages), default=0)  # a pipeline: <schedule>-<stage>-<minute>
    if len(name) + longest > MAX_NAME:
        raise ScheduleError(
            f"the schedule's name (with its longest stage name) is longer than {MAX_NAME} characters; its runs' "
            "names would not fit"
        )
    if spec.stages:  # the first stage's job is the run: created, held, counted and deleted as one
        name = f"{name}-{spec.stages[0].name}"
    tz = zone(spec.time_zone)
    by_name = {r.name: r for r in runs}
    newest_run = max((r.scheduled for r in runs), default=None)
    cursor = max(t for t in (created, considered, newest_run) if t is not None)
    skipped: list[Skipped] = []
    create: Planned | None = None
    if not spec.suspend:
        due, count = due_times(spec.schedule, tz, cursor, now)
        if due:
            latest = due[-1]
            considered = latest
            missed = due[:-1]
            for t in missed:
                skipped.append(Skipped(t, "MissedSchedule", f"run for {rfc3339(t)} skipped: a later one is due"))
            if count - 1 > len(missed):
                first = missed[0] if missed else latest
                skipped.insert(0, Skipped(first, "MissedSchedule", _missed_message(count - 1, latest)))
            create, late = _plan(name, spec, tz, latest, runs, by_name, now)
            skipped += late
    release = _release(spec, runs, create)
    return Decision(
        create=create,
        skipped=skipped,
        release=release,
        delete=history_to_delete(spec, runs),
        considered=considered,
        next_time=next_time(spec.schedule, tz, now),
    )


def _plan(
    name: str,
    spec: LLMBatchScheduleSpec,
    tz: ZoneInfo,
    latest: datetime,
    runs: list[Run],
    by_name: dict[str, Run],
    now: datetime,
) -> tuple[Planned | None, list[Skipped]]:
    sds = spec.starting_deadline_seconds
    if sds is not None and latest < now - timedelta(seconds=sds):
        late = (now - latest).total_seconds()
        return None, [
            Skipped(
                latest,
                "MissedSchedule",
                f"run for {rfc3339(latest)} skipped: {late:.0f}s late, over the startingDeadlineSeconds of {sds}",
            )
        ]
    run = run_name(name, latest)
    if run in by_name:
        return None, []
    active = [r for r in runs if not r.terminal]
    if active and spec.concurrency_policy == "Forbid":
        names = ", ".join(r.name for r in active)
        return None, [
            Skipped(
                latest,
                "ForbiddenConcurrent",
                f"run for {rfc3339(latest)} skipped: {names} still active (concurrencyPolicy Forbid)",
            )
        ]
    held = bool(active) and spec.concurrency_policy == "Hold"
    waiting = [r.name for r in active if r.held]
    if held and waiting:
        return None, [
            Skipped(
                latest,
                "MissedSchedule",
                f"run for {rfc3339(latest)} skipped: {waiting[0]} already waits for the active run to end "
                "(concurrencyPolicy Hold keeps one run waiting)",
            )
        ]
    return Planned(run, latest, run_date(latest, tz), deadline_for(latest, tz, spec.deadline), held), []


def _release(spec: LLMBatchScheduleSpec, runs: list[Run], created: Planned | None) -> list[str]:
    """Held runs to start now: the oldest held one, when every earlier run is terminal.

    Under Allow or Forbid nothing is created held, but a run held earlier (the policy changed) is released at once.
    """
    held = sorted((r for r in runs if r.held and not r.terminal), key=lambda r: r.scheduled)
    if spec.concurrency_policy != "Hold":
        return [r.name for r in held]
    if not held:
        return []
    running = [r for r in runs if not r.terminal and not r.held]
    if running:
        return []
    return [held[0].name]


def history_to_delete(spec: LLMBatchScheduleSpec, runs: list[Run]) -> list[str]:
    """Terminal runs beyond the history limits, oldest first."""
    out: list[str] = []
    for phase, limit in (
        ("Succeeded", spec.successful_jobs_history_limit),
        ("Failed", spec.failed_jobs_history_limit),
    ):
        done = sorted((r for r in runs if r.phase == phase), key=lambda r: r.scheduled)
        out += [r.name for r in done[: max(0, len(done) - limit)]]
    return out
