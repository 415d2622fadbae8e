"""LLMBatchSchedule end to end: `barge operator` against the real local control plane and `barge emulator`.

Cron has minute granularity and the design keeps it (no seconds field, no test clock), so these tests wait for
real minute boundaries: about three minutes of wall time in all. Two schedules run side by side to share that
wait: `held` (default policy Hold) and `forbid`. Every batch takes the emulator ~62 s, so a run is still active
when the next minute's run is due.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from datetime import time as dtime
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import pytest
import yaml
from tools.localcluster import Cluster

from barge.batch.schedule import run_name
from barge.cli.demo_data import claims
from barge.emulator.server import EmulatorThread
from tests.conftest import REPO, Factory, kubectl_json
from tests.e2e.conftest import SECRET, Operator, credential_secret, wait_for

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(480)]
PROCESSING = 62.0


def schedule_manifest(name: str, url: str, workdir: Path, **spec: Any) -> str:
    job = yaml.safe_load((REPO / "manifests" / "samples" / "claims-nightly.yaml").read_text())["spec"]
    today = datetime.now(UTC).date()
    for day in (today, today + timedelta(days=1)):  # the run date is the scheduled time's date (UTC here)
        (workdir / f"{name}-{day.isoformat()}.jsonl").write_bytes(b"".join(line + b"\n" for line in claims(20)))
    job["provider"]["baseURL"] = url
    job.pop("tenant", None)  # the sample's tenant is its namespace's (claims-team); runs here meter to their own
    job["input"]["url"] = f"file://{workdir}/{name}-{{runDate}}.jsonl"
    job["output"]["url"] = f"file://{workdir}/{name}-out-{{runDate}}/"
    doc = {
        "apiVersion": "barge.dev/v1alpha1",
        "kind": "LLMBatchSchedule",
        "metadata": {"name": name},
        "spec": {
            "schedule": "* * * * *",
            "timeZone": "UTC",
            "deadline": {"after": "2h"},
            "jobTemplate": {"metadata": {"labels": {"team": "claims"}}, "spec": job},
            **spec,
        },
    }
    return yaml.safe_dump(doc)


def runs(cluster: Cluster, namespace: str, schedule: str) -> dict[str, dict[str, Any]]:
    items = kubectl_json(cluster, "-n", namespace, "get", "lbj", "-l", f"barge.dev/schedule={schedule}")["items"]
    return {j["metadata"]["name"]: j for j in items}  # type: ignore[union-attr]


def phase(job: dict[str, Any] | None) -> str:
    return str(((job or {}).get("status") or {}).get("phase") or "")


def events(cluster: Cluster, namespace: str, name: str) -> list[dict[str, Any]]:
    items = kubectl_json(cluster, "-n", namespace, "get", "events", "--field-selector", f"involvedObject.name={name}")
    return list(items["items"])  # type: ignore[arg-type]


def scheduled(job: dict[str, Any]) -> datetime:
    return datetime.fromisoformat(job["metadata"]["annotations"]["barge.dev/scheduled-at"].replace("Z", "+00:00"))


def sleep_until(instant: datetime) -> None:
    time.sleep(max(0.0, (instant - datetime.now(UTC)).total_seconds()))


@pytest.fixture
def slow(start_emulator: Factory) -> EmulatorThread:
    return start_emulator({"batch": {"processingSeconds": PROCESSING}})


def test_hold_forbid_history_and_a_restart_across_a_scheduled_time(
    cluster: Cluster, namespace: str, operator: Operator, slow: EmulatorThread
) -> None:
    credential_secret(cluster, namespace, "anthropic", {"api-key": SECRET})
    # Start just after a minute boundary so the first run is at least ~55 s away from the restart below.
    now = datetime.now(UTC)
    if now.second > 45:
        sleep_until(now.replace(second=0, microsecond=0) + timedelta(minutes=1, seconds=1))
    # The nightly sample as shipped: its nextScheduleTime is the next 22:00 in London, in UTC.
    cluster.run_kubectl(
        "-n", namespace, "apply", "-f", str(REPO / "manifests/samples/llmbatchschedule-claims-nightly.yaml")
    )
    london = ZoneInfo("Europe/London")
    local_now = datetime.now(london)
    expected = datetime.combine(local_now.date(), dtime(22, 0), tzinfo=london)
    if expected <= local_now:
        expected = datetime.combine(local_now.date() + timedelta(days=1), dtime(22, 0), tzinfo=london)

    def nightly_next() -> str:
        return str(
            (kubectl_json(cluster, "-n", namespace, "get", "lbs", "claims-nightly").get("status") or {}).get(
                "nextScheduleTime"
            )
            or ""
        )

    assert wait_for(nightly_next, 30, "nextScheduleTime") == expected.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    cluster.run_kubectl(
        "-n", namespace, "patch", "lbs", "claims-nightly", "--type=merge", "-p", '{"spec":{"suspend":true}}'
    )
    for name, extra in (("held", {"successfulJobsHistoryLimit": 1}), ("forbid", {"concurrencyPolicy": "Forbid"})):
        cluster.run_kubectl(
            "-n", namespace, "apply", "-f", "-", input=schedule_manifest(name, slow.url, operator.workdir, **extra)
        )
    # A template the schedule's schema accepts but the API server refuses for the run (a label value with spaces).
    bad = yaml.safe_load(schedule_manifest("rejected", slow.url, operator.workdir))
    bad["spec"]["jobTemplate"]["metadata"]["labels"]["team"] = "not a label value"
    cluster.run_kubectl("-n", namespace, "apply", "-f", "-", input=yaml.safe_dump(bad))

    # The first run of each, at the next minute, named from its scheduled time, owned by the schedule.
    first = wait_for(lambda: list(runs(cluster, namespace, "held").values()), 75, "the first run")[0]
    t1 = scheduled(first)
    assert first["metadata"]["name"] == run_name("held", t1)
    assert first["metadata"]["ownerReferences"][0]["kind"] == "LLMBatchSchedule"
    assert first["metadata"]["labels"]["team"] == "claims"
    assert first["spec"]["runDate"] == t1.date().isoformat()
    assert first["spec"]["input"]["url"].endswith(f"/held-{t1.date().isoformat()}.jsonl")
    assert first["spec"]["deadline"] == (t1 + timedelta(hours=2)).strftime("%Y-%m-%dT%H:%M:%SZ")
    wait_for(lambda: phase(runs(cluster, namespace, "held").get(first["metadata"]["name"])) == "Running", 30, "Running")

    # The operator is down across the next scheduled time; after the restart that run exists exactly once.
    operator.kill()
    t2 = t1 + timedelta(minutes=1)
    sleep_until(t2 + timedelta(seconds=3))
    operator.start()
    second_name = run_name("held", t2)
    second = wait_for(lambda: runs(cluster, namespace, "held").get(second_name), 30, "the second run")
    assert "barge.dev/held-by-schedule" in second["metadata"]["annotations"], "held: the first run is still active"
    wait_for(lambda: phase(runs(cluster, namespace, "held").get(second_name)) == "Queued", 30, "second run Queued")
    held_status = runs(cluster, namespace, "held")[second_name]["status"]
    admitted = next(c for c in held_status["conditions"] if c["type"] == "Admitted")
    assert (admitted["status"], admitted["reason"]) == ("False", "HeldBySchedule")
    # forbid's first run may still be starting after the restart (a loaded machine): wait for its batch, then count
    wait_for(lambda: len(slow.store.batches) >= 2, 30, "the first runs' batches")
    assert len(slow.store.batches) == 2, "one batch per schedule's first run; nothing submitted for the held run"
    at_t2 = [n for n, j in runs(cluster, namespace, "held").items() if scheduled(j) == t2]
    assert at_t2 == [second_name]

    # Forbid: the forbid schedule's run for t2 was skipped with an event, not created.
    assert run_name("forbid", t2) not in runs(cluster, namespace, "forbid")
    assert any(e["reason"] == "ForbiddenConcurrent" for e in events(cluster, namespace, "forbid"))

    # The refused run: the schedule is Stalled with the API server's reason, and nothing was created.
    rejected = kubectl_json(cluster, "-n", namespace, "get", "lbs", "rejected")["status"]
    stalled = {c["type"]: c for c in rejected["conditions"]}["Stalled"]  # type: ignore[index]
    assert (stalled["status"], stalled["reason"]) == ("True", "RunRejected")
    assert "metadata.labels" in stalled["message"]
    assert runs(cluster, namespace, "rejected") == {}
    assert any(e["reason"] == "RunRejected" for e in events(cluster, namespace, "rejected"))

    # The first run ends, then the held one starts and succeeds; history keeps one successful run.
    wait_for(lambda: phase(runs(cluster, namespace, "held").get(first["metadata"]["name"])) == "Succeeded", 120, "1st")
    wait_for(lambda: phase(runs(cluster, namespace, "held").get(second_name)) == "Running", 30, "second run started")
    assert "barge.dev/held-by-schedule" not in runs(cluster, namespace, "held")[second_name]["metadata"]["annotations"]
    wait_for(lambda: phase(runs(cluster, namespace, "held").get(second_name)) == "Succeeded", 120, "second run done")
    wait_for(lambda: first["metadata"]["name"] not in runs(cluster, namespace, "held"), 30, "the first run deleted")
    for name in ("held", "forbid", "rejected"):
        cluster.run_kubectl("-n", namespace, "patch", "lbs", name, "--type=merge", "-p", '{"spec":{"suspend":true}}')

    st = kubectl_json(cluster, "-n", namespace, "get", "lbs", "held")["status"]
    assert st["lastSuccessfulTime"]  # type: ignore[index]
    assert {c["type"]: c["status"] for c in st["conditions"]}["Ready"] == "True"  # type: ignore[index]
    reasons = [e["reason"] for e in events(cluster, namespace, "held")]
    assert {"RunCreated", "RunReleased", "RunDeleted"} <= set(reasons)
    header = cluster.run_kubectl("-n", namespace, "get", "lbs").stdout.splitlines()[0].split()
    assert header == ["NAME", "SCHEDULE", "TIMEZONE", "SUSPEND", "ACTIVE", "LAST", "NEXT", "AGE"]
    assert SECRET not in operator.output()
