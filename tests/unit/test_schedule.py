"""LLMBatchSchedule's pure core: due times, names, run dates, deadlines across DST, concurrency, history, the
run's manifest. A fixed clock everywhere; Europe/London changes on 2026-03-29 (23 h) and 2026-10-25 (25 h)."""

from __future__ import annotations

import itertools
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import ValidationError

from barge.api import LLMBatchSchedule
from barge.api.schedule import ScheduleDeadline
from barge.batch.schedule import (
    Run,
    ScheduleError,
    deadline_for,
    decide,
    next_time,
    run_date,
    run_name,
    times_after,
    zone,
)
from barge.cli.demo_data import claims
from barge.cli.schedule_plan import plan_any
from barge.k8s.schedule import HELD, SCHEDULE_LABEL, SCHEDULED_AT, build_run
from barge.operator import kstatus

LONDON = zone("Europe/London")


def utc(*args: int) -> datetime:
    return datetime(*args, tzinfo=UTC)


def schedule(**spec: Any) -> LLMBatchSchedule:
    base: dict[str, Any] = {
        "schedule": "0 22 * * *",
        "timeZone": "Europe/London",
        "jobTemplate": {
            "metadata": {"labels": {"team": "claims", "argocd.argoproj.io/instance": "x"}},
            "spec": {
                "provider": {"type": "anthropic", "model": "claude-sonnet-4-6", "secretRef": {"name": "k"}},
                "input": {"url": "s3://claims/{runDate}.jsonl"},
                "output": {"url": "s3://claims/results/{runDate}/"},
                "customId": "claim-{id}-{runDate}",
            },
        },
    }
    base.update(spec)
    return LLMBatchSchedule.model_validate(
        {"metadata": {"name": "nightly", "namespace": "claims", "uid": "u-1"}, "spec": base}
    )


def test_daily_runs_are_23_and_25_hours_apart_on_dst_days() -> None:
    spring = list(itertools.islice(times_after("0 0 * * *", LONDON, utc(2026, 3, 27, 12)), 3))
    gaps = [later - earlier for earlier, later in itertools.pairwise(spring)]
    assert spring == [utc(2026, 3, 28, 0), utc(2026, 3, 29, 0), utc(2026, 3, 29, 23)]
    assert gaps == [timedelta(hours=24), timedelta(hours=23)]
    autumn = [next_time("0 0 * * *", LONDON, utc(2026, 10, 24, 12))]
    autumn.append(next_time("0 0 * * *", LONDON, autumn[0]))
    assert autumn == [utc(2026, 10, 24, 23), utc(2026, 10, 26, 0)]
    assert autumn[1] - autumn[0] == timedelta(hours=25)


def test_a_time_in_the_spring_gap_runs_after_it_and_a_repeated_time_runs_once() -> None:
    assert next_time("30 1 * * *", LONDON, utc(2026, 3, 28, 12)) == utc(2026, 3, 29, 1)  # 02:00 BST
    runs = list(itertools.islice(times_after("30 1 * * *", LONDON, utc(2026, 10, 24, 12)), 3))
    assert runs == [utc(2026, 10, 25, 0, 30), utc(2026, 10, 26, 1, 30), utc(2026, 10, 27, 1, 30)]


@pytest.mark.parametrize(
    ("start", "expected", "hours"),
    [
        (utc(2026, 3, 28, 22), utc(2026, 3, 29, 5), 7),  # 22:00 GMT -> 06:00 BST: the 23-hour night
        (utc(2026, 10, 24, 21), utc(2026, 10, 25, 6), 9),  # 22:00 BST -> 06:00 GMT: the 25-hour night
        (utc(2026, 6, 1, 21), utc(2026, 6, 2, 5), 8),
        (utc(2026, 6, 1, 4), utc(2026, 6, 1, 5), 1),  # 05:00 BST: today's 06:00 is still ahead
        (utc(2026, 6, 1, 5), utc(2026, 6, 2, 5), 24),  # exactly 06:00: the next one
    ],
)
def test_deadline_at_a_local_time_across_dst(start: datetime, expected: datetime, hours: int) -> None:
    got = deadline_for(start, LONDON, ScheduleDeadline(at="06:00"))
    assert got == expected
    assert got - start == timedelta(hours=hours)


def test_deadline_after_is_elapsed_time_and_an_absent_local_time_uses_the_old_offset() -> None:
    start = utc(2026, 3, 29, 0)  # 00:00 GMT on the 23-hour day
    assert deadline_for(start, LONDON, ScheduleDeadline(after="1h30m")) == utc(2026, 3, 29, 1, 30)
    assert deadline_for(start, LONDON, ScheduleDeadline(after="24h")) == utc(2026, 3, 30, 0)  # 01:00 BST
    assert deadline_for(start, LONDON, ScheduleDeadline(at="01:30")) == utc(2026, 3, 29, 1, 30)  # 02:30 BST
    assert deadline_for(start, LONDON, None) is None


def test_run_date_is_the_local_date_and_names_are_cronjob_style() -> None:
    assert run_date(utc(2026, 7, 1, 23, 30), LONDON) == "2026-07-02"
    assert run_date(utc(2026, 7, 1, 23, 30), zone("UTC")) == "2026-07-01"
    assert run_name("nightly", utc(2026, 7, 1, 23, 30)) == f"nightly-{int(utc(2026, 7, 1, 23, 30).timestamp()) // 60}"


def run(t: datetime, phase: str = "Running", held: bool = False) -> Run:
    return Run(run_name("nightly", t), t, phase, held)


def test_first_run_waits_for_its_time_then_is_created_once() -> None:
    s = schedule()
    created = utc(2026, 6, 1, 12)
    early = decide("nightly", s.spec, created, None, [], utc(2026, 6, 1, 20))
    assert early.create is None
    assert early.next_time == utc(2026, 6, 1, 21)
    due = decide("nightly", s.spec, created, None, [], utc(2026, 6, 1, 21, 0, 5))
    assert due.create is not None
    assert (due.create.name, due.create.run_date, due.create.held) == (
        run_name("nightly", utc(2026, 6, 1, 21)),
        "2026-06-01",
        False,
    )
    again = decide("nightly", s.spec, created, None, [run(utc(2026, 6, 1, 21))], utc(2026, 6, 1, 21, 0, 9))
    assert again.create is None, "the run exists: never created twice, even with no status cursor"
    assert again.next_time == utc(2026, 6, 2, 21)


def test_missed_runs_only_the_latest_and_an_event_for_each_earlier_one() -> None:
    s = schedule(schedule="0 * * * *", timeZone="UTC")
    d = decide("nightly", s.spec, utc(2026, 6, 1), utc(2026, 6, 1, 3), [], utc(2026, 6, 1, 6, 10))
    assert d.create is not None
    assert d.create.scheduled == utc(2026, 6, 1, 6)
    assert [x.scheduled for x in d.skipped] == [utc(2026, 6, 1, h) for h in (4, 5)]
    assert {x.reason for x in d.skipped} == {"MissedSchedule"}
    assert d.considered == utc(2026, 6, 1, 6)
    long = decide("nightly", s.spec, utc(2026, 1, 1), None, [], utc(2026, 6, 1, 6, 10))
    assert long.create is not None
    assert len(long.skipped) == 11, "ten named, one counting the rest"
    assert "3629 scheduled times before 2026-06-01T06:00:00Z" in long.skipped[0].message


def test_starting_deadline_skips_a_late_run() -> None:
    s = schedule(schedule="0 * * * *", timeZone="UTC", startingDeadlineSeconds=300)
    late = decide("nightly", s.spec, utc(2026, 6, 1), None, [], utc(2026, 6, 1, 6, 10))
    assert late.create is None
    assert late.skipped[-1].scheduled == utc(2026, 6, 1, 6)
    assert "startingDeadlineSeconds" in late.skipped[-1].message
    assert late.considered == utc(2026, 6, 1, 6), "a skipped time is not tried again"
    ok = decide("nightly", s.spec, utc(2026, 6, 1), None, [], utc(2026, 6, 1, 6, 4))
    assert ok.create is not None


@pytest.mark.parametrize(
    ("policy", "creates", "held", "reason"),
    [("Hold", True, True, None), ("Forbid", False, False, "ForbiddenConcurrent"), ("Allow", True, False, None)],
)
def test_concurrency_policy_with_a_run_active(policy: str, creates: bool, held: bool, reason: str | None) -> None:
    s = schedule(schedule="0 * * * *", timeZone="UTC", concurrencyPolicy=policy)
    d = decide("nightly", s.spec, utc(2026, 6, 1), None, [run(utc(2026, 6, 1, 5))], utc(2026, 6, 1, 6, 0, 1))
    assert (d.create is not None) == creates
    if d.create:
        assert d.create.held == held
    assert [x.reason for x in d.skipped] == ([reason] if reason else [])
    assert d.release == []


def test_hold_releases_the_oldest_held_run_when_every_earlier_one_is_terminal() -> None:
    s = schedule(schedule="0 * * * *", timeZone="UTC")
    runs = [run(utc(2026, 6, 1, 4), "Running"), run(utc(2026, 6, 1, 5), "Queued", True)]
    now = utc(2026, 6, 1, 5, 30)
    assert decide("nightly", s.spec, utc(2026, 6, 1), None, runs, now).release == []
    runs[0] = run(utc(2026, 6, 1, 4), "Failed")
    runs.append(run(utc(2026, 6, 1, 6), "Queued", True))
    assert decide("nightly", s.spec, utc(2026, 6, 1), None, runs, now).release == [runs[1].name]


def test_suspend_creates_nothing_and_keeps_the_cursor() -> None:
    s = schedule(schedule="0 * * * *", timeZone="UTC", suspend=True)
    d = decide("nightly", s.spec, utc(2026, 6, 1), utc(2026, 6, 1, 3), [], utc(2026, 6, 1, 6, 10))
    assert d.create is None
    assert d.skipped == []
    assert d.considered == utc(2026, 6, 1, 3)


def test_history_limits_delete_the_oldest_terminal_runs() -> None:
    s = schedule(schedule="0 * * * *", timeZone="UTC", successfulJobsHistoryLimit=1, failedJobsHistoryLimit=0)
    runs = [run(utc(2026, 6, 1, h), p) for h, p in ((1, "Succeeded"), (2, "Failed"), (3, "Succeeded"), (4, "Running"))]
    d = decide("nightly", s.spec, utc(2026, 6, 1), utc(2026, 6, 1, 4), runs, utc(2026, 6, 1, 4, 30))
    assert sorted(d.delete) == sorted([runs[0].name, runs[1].name])


def test_bad_schedules_are_refused() -> None:
    with pytest.raises(ValidationError, match="five fields"):
        schedule(schedule="*/5 * * * * *")
    with pytest.raises(ValidationError, match="not a cron expression"):
        schedule(schedule="61 * * * *")
    with pytest.raises(ValidationError, match="IANA"):
        schedule(timeZone="Europe/Atlantis")
    with pytest.raises(ValidationError, match="exactly one"):
        schedule(deadline={"at": "06:00", "after": "4h"})
    with pytest.raises(ValidationError, match="runDate comes from"):
        schedule(
            jobTemplate={
                "spec": {**schedule().model_dump(by_alias=True)["spec"]["jobTemplate"]["spec"], "runDate": "2026-01-01"}
            }
        )
    with pytest.raises(ScheduleError, match="52"):
        decide("n" * 53, schedule().spec, utc(2026, 6, 1), None, [], utc(2026, 6, 2))


def test_build_run_fills_the_run_date_deadline_owner_and_hold() -> None:
    s = schedule(deadline={"at": "06:00"})
    body = s.model_dump(by_alias=True, exclude_none=True)
    d = decide("nightly", s.spec, utc(2026, 10, 24), None, [run(utc(2026, 10, 23, 21))], utc(2026, 10, 24, 21, 0, 3))
    assert d.create is not None
    assert d.create.held
    job = build_run(body, d.create)
    assert job["metadata"]["name"] == run_name("nightly", utc(2026, 10, 24, 21))
    assert job["spec"]["input"]["url"] == "s3://claims/2026-10-24.jsonl"
    assert job["spec"]["output"]["url"] == "s3://claims/results/2026-10-24/"
    assert job["spec"]["customId"] == "claim-{id}-{runDate}"
    assert job["spec"]["runDate"] == "2026-10-24"
    assert job["spec"]["deadline"] == "2026-10-25T06:00:00Z"
    assert job["metadata"]["labels"] == {"team": "claims", SCHEDULE_LABEL: "nightly"}
    assert job["metadata"]["annotations"] == {SCHEDULED_AT: "2026-10-24T21:00:00Z", HELD: "nightly"}
    assert job["metadata"]["ownerReferences"][0]["uid"] == "u-1"
    assert "status" not in job


def test_a_very_long_outage_on_a_frequent_schedule_still_runs_the_latest_time() -> None:
    s = schedule(schedule="* * * * *", timeZone="UTC")
    d = decide("nightly", s.spec, utc(2026, 1, 1), None, [], utc(2026, 6, 1, 6, 10, 30))
    assert d.create is not None
    assert d.create.scheduled == utc(2026, 6, 1, 6, 10)
    assert [x.message for x in d.skipped] == ["at least 100000 scheduled times before 2026-06-01T06:10:00Z were missed"]


def test_barge_plan_of_a_schedule_lists_runs_across_dst_and_fits_80_columns(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    (tmp_path / "claims-2026-03-27.jsonl").write_bytes(b"".join(line + b"\n" for line in claims(600)))
    doc = schedule(deadline={"at": "06:00"}).model_dump(by_alias=True, exclude_none=True)
    doc["metadata"] = {"name": "claims-nightly"}
    doc["spec"]["jobTemplate"]["spec"]["input"]["url"] = "claims-{runDate}.jsonl"
    doc["spec"]["jobTemplate"]["spec"]["output"]["url"] = "out/{runDate}/"
    path = tmp_path / "schedule.yaml"
    path.write_text(yaml.safe_dump(doc))
    plan_any(path, 3, now=utc(2026, 3, 27, 12))
    out = capsys.readouterr().out
    assert max(len(line) for line in out.splitlines()) <= 80
    assert "…" not in out
    rows = [line.split() for line in out.splitlines() if line.strip().startswith("2026-")]
    assert rows[:3] == [
        ["2026-03-27", "22:00", "GMT", "2026-03-27", "2026-03-28", "06:00", "GMT", "8.0", "h"],
        ["2026-03-28", "22:00", "GMT", "2026-03-28", "2026-03-29", "06:00", "BST", "7.0", "h"],
        ["2026-03-29", "22:00", "BST", "2026-03-29", "2026-03-30", "06:00", "BST", "8.0", "h"],
    ]
    assert f"the next is {run_name('claims-nightly', utc(2026, 3, 27, 22))}" in " ".join(out.split())
    costs = re.findall(r"\$[0-9,]+\.[0-9]{2}\b", out)
    assert len(costs) == 2, out
    assert " 600 " in out
    assert re.search(r"\b[0-9.]+k\b", out), "token counts are compact"


def test_schedule_kstatus_ready_unless_stalled() -> None:
    ready = {c["type"]: c for c in kstatus.schedule_conditions(None, "waiting", suspended=False)}
    assert (ready["Ready"]["status"], ready["Ready"]["reason"]) == ("True", "Scheduled")
    assert {ready["Reconciling"]["status"], ready["Stalled"]["status"]} == {"False"}
    stalled = {c["type"]: c for c in kstatus.schedule_conditions("RunRejected", "refused", suspended=True)}
    assert (stalled["Stalled"]["status"], stalled["Stalled"]["reason"]) == ("True", "RunRejected")
    assert (stalled["Ready"]["status"], stalled["Ready"]["message"]) == ("False", "refused")
    suspended = {c["type"]: c for c in kstatus.schedule_conditions(None, "", suspended=True)}
    assert suspended["Ready"]["reason"] == "Suspended"
