"""LLMBatchSchedule bounds (review 3: H9, L1): Hold keeps at most one run waiting, the status message stays under
the conditions' schema limit, and the cron scan runs off Kopf's event loop and is not repeated while the API
server refuses the run."""

from __future__ import annotations

import json
import threading
from datetime import UTC, datetime, timedelta
from types import SimpleNamespace
from typing import Any, cast

from barge.api.common import Condition
from barge.api.schedule import LLMBatchScheduleSpec
from barge.batch import schedule as core
from barge.batch.schedule import Decision, Run, decide
from barge.k8s.schedule import build_status
from barge.operator import kstatus, schedules
from barge.operator.jobs import Context

NAME = "n" * 52
TEMPLATE = {
    "spec": {
        "provider": {"type": "pool", "poolRef": {"name": "does-not-exist"}},  # the first run waits forever
        "input": {"inline": [{"id": 1, "text": "x"}]},
        "output": {"url": "file:///data/a/"},
        "request": {"template": "{{ text }}"},
    }
}


def spec(**kw: Any) -> LLMBatchScheduleSpec:
    return LLMBatchScheduleSpec.model_validate({"schedule": "* * * * *", "jobTemplate": TEMPLATE, **kw})


def test_h9_hold_keeps_one_run_waiting_however_long_the_first_one_runs() -> None:
    s, created = spec(), datetime(2026, 6, 1, tzinfo=UTC)
    runs: list[Run] = []
    considered, now = None, created
    skipped, last = 0, ""
    for _ in range(6 * 60):  # six hours of a minutely schedule, as the probe's three days began
        now += timedelta(minutes=1)
        d = decide(NAME, s, created, considered, runs, now)
        if d.create:
            runs.append(Run(d.create.name, d.create.scheduled, "Queued" if d.create.held else "Pending", d.create.held))
        skipped += sum(x.reason == "MissedSchedule" for x in d.skipped)
        last = d.skipped[-1].message if d.skipped else last
        considered = d.considered
    assert [r.held for r in runs] == [False, True]  # the first run, and one waiting
    assert skipped == 6 * 60 - 2
    assert "already waits for the active run" in last
    # the first run ends: the waiting one is released, and the next time holds a new one behind it
    runs[0] = Run(runs[0].name, runs[0].scheduled, "Failed", False)
    d = decide(NAME, s, created, considered, runs, now + timedelta(seconds=30))
    assert d.release == [runs[1].name]


def test_h9_the_status_message_fits_the_conditions_schema_with_many_active_runs() -> None:
    start = datetime(2026, 6, 1, tzinfo=UTC)
    runs = [Run(f"{NAME}-{29000000 + i}", start + timedelta(minutes=i), "Running", i > 0) for i in range(600)]
    status = build_status(Decision(), runs, {}, {})
    assert status["held"] == 599
    assert "and 589 more" in status["message"]
    for condition in kstatus.schedule_conditions(None, status["message"], False):
        Condition.model_validate(condition if isinstance(condition, dict) else condition.model_dump())
    assert len(json.dumps(status)) < 64 * 1024


class FakeKube:
    def __init__(self) -> None:
        self.patches: list[dict[str, Any]] = []

    async def patch_status(self, plural: str, namespace: str, name: str, body: dict[str, Any]) -> None:
        self.patches.append(body)


async def test_l1_the_cron_scan_runs_off_the_loop_and_a_refused_run_is_retried_alone(monkeypatch: Any) -> None:
    seen: list[tuple[bool, datetime | None]] = []

    def spy(name: str, s: LLMBatchScheduleSpec, created: datetime, considered: datetime | None, *rest: Any) -> Any:
        seen.append((threading.current_thread() is threading.main_thread(), considered))
        return decide(name, s, created, considered, *rest)

    async def no_runs(self: Any, schedule: str, uid: str) -> list[dict[str, Any]]:
        return []

    async def refused(self: Any, manifest: dict[str, Any]) -> bool:
        raise schedules.RunRejected("the API server refused run x: quota")

    monkeypatch.setattr(schedules, "decide", spy)
    monkeypatch.setattr(schedules.Runs, "list", no_runs)
    monkeypatch.setattr(schedules.Runs, "create", refused)
    kube = FakeKube()
    ctx = cast(Context, SimpleNamespace(kube=kube))
    now = datetime(2026, 6, 1, tzinfo=UTC)
    created = now - timedelta(days=69)  # refused since: the cursor stayed at the schedule's creation
    body = {
        "metadata": {"name": "nightly", "namespace": "a", "uid": "u", "creationTimestamp": core.rfc3339(created)},
        "spec": {"schedule": "* * * * *", "timeZone": "UTC", "jobTemplate": TEMPLATE},
    }
    events: list[str] = []
    status, _ = await schedules.reconcile(ctx, body, {}, lambda r, m, k: events.append(r), now)
    assert any(c.get("reason") == "RunRejected" for c in status["conditions"])
    status, _ = await schedules.reconcile(
        ctx, body, status, lambda r, m, k: events.append(r), now + timedelta(seconds=5)
    )
    assert [on_loop for on_loop, _ in seen] == [False, False]  # never on the calling (Kopf's) loop's thread
    assert seen[1][1] == now - timedelta(seconds=1)  # the second pass retries the refused time only
    assert status["lastConsideredTime"] == core.rfc3339(now - timedelta(seconds=1))
    assert events.count("RunRejected") == 1
