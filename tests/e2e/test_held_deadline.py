"""A schedule's held run that passes its deadline before it is released (#31.5): `barge operator` against the real
local control plane. The run carries the annotation LLMBatchSchedule sets on a held run (concurrencyPolicy Hold);
its spec.deadline is already past, so it must end Failed with DeadlineExceeded instead of waiting Queued for ever,
and nothing may reach the provider."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import yaml
from tools.localcluster import Cluster

from barge.emulator.server import EmulatorThread
from barge.k8s.schedule import HELD, SCHEDULE_LABEL
from tests.conftest import Factory, kubectl_json, state
from tests.e2e.conftest import SECRET, Operator, credential_secret, wait_for

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(240)]


def held_run(name: str, url: str, deadline: datetime) -> str:
    doc: dict[str, Any] = {
        "apiVersion": "barge.dev/v1alpha1",
        "kind": "LLMBatchJob",
        "metadata": {"name": name, "labels": {SCHEDULE_LABEL: "nightly"}, "annotations": {HELD: "nightly"}},
        "spec": {
            "provider": {
                "type": "anthropic",
                "model": "claude-sonnet-4-6",
                "secretRef": {"name": "anthropic", "key": "api-key"},
                "baseURL": url,
            },
            "input": {"inline": [{"id": "c1", "text": "water in the basement"}]},
            "request": {"template": "{{ text }}", "maxTokens": 20},
            "output": {"url": "file:///nonexistent/never-written/"},
            "deadline": deadline.strftime("%Y-%m-%dT%H:%M:%SZ"),
        },
    }
    return yaml.safe_dump(doc)


def status(cluster: Cluster, namespace: str, name: str) -> dict[str, Any]:
    return dict(kubectl_json(cluster, "-n", namespace, "get", "lbj", name).get("status") or {})  # type: ignore[arg-type]


def test_a_held_run_past_its_deadline_reports_deadline_exceeded(
    cluster: Cluster, namespace: str, operator: Operator, start_emulator: Factory
) -> None:
    emu: EmulatorThread = start_emulator()
    credential_secret(cluster, namespace, "anthropic", {"api-key": SECRET})
    now = datetime.now(UTC)
    # one held run whose deadline is far: it stays Queued, Admitted=False HeldBySchedule (the check can fail)
    cluster.run_kubectl("-n", namespace, "apply", "-f", "-", input=held_run("later", emu.url, now + timedelta(hours=2)))
    cluster.run_kubectl(
        "-n", namespace, "apply", "-f", "-", input=held_run("late", emu.url, now - timedelta(minutes=1))
    )

    failed = wait_for(lambda: (s := status(cluster, namespace, "late")).get("phase") == "Failed" and s, 90, "Failed")
    conditions = {c["type"]: c for c in failed["conditions"]}
    assert conditions["DeadlineExceeded"]["status"] == "True"
    assert "HeldBySchedule" in failed["message"]
    assert "held by LLMBatchSchedule 'nightly'" in failed["message"]
    assert conditions["Ready"]["status"] == "False"

    waiting = wait_for(lambda: (s := status(cluster, namespace, "later")).get("phase") == "Queued" and s, 60, "Queued")
    admitted = {c["type"]: c for c in waiting["conditions"]}["Admitted"]
    assert (admitted["status"], admitted["reason"]) == ("False", "HeldBySchedule")
    assert status(cluster, namespace, "later").get("phase") == "Queued"
    assert state(emu)["batches"] == []  # nothing of either run reached the provider
    seen = kubectl_json(cluster, "-n", namespace, "get", "events", "--field-selector", "involvedObject.name=late")
    assert any(e["reason"] == "Failed" for e in seen["items"])  # type: ignore[union-attr]
