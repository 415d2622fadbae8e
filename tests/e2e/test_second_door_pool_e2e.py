"""Second-door detection on an InferencePool, end to end (#31.3): `barge operator` on a control plane of this
module's own, scanning every second (BARGE_SECOND_DOOR_SECONDS=1). A provider pool's credential is scanned with
no job at all; a batch created with the pool's key outside Barge (another team's script) shows as a Warning event
SecondDoorBatches on the InferencePool and as barge_provider_foreign_batches under the pool's tenant on /metrics,
and is never touched. A job running on the same key is warned too (its event is posted from the scan, which is no
Kopf handler: in the context of the job's step)."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from tools.localcluster import Cluster

from tests.conftest import Factory, kubectl_json, state
from tests.e2e.conftest import SECRET, Operator, credential_secret, own_control_plane, wait_for
from tests.integration.test_engine import provider_for
from tests.integration.test_second_door import outside_lines

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(300)]


@pytest.fixture(scope="module")
def own_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """Its operator must never meet the package's `operator`, which watches every namespace of the session's
    cluster (and scans only every 15 minutes)."""
    with own_control_plane(tmp_path_factory.mktemp("doors") / "cluster") as cluster:
        yield cluster


@pytest.fixture
def door_operator(own_cluster: Cluster, tmp_path: Path) -> Iterator[Operator]:
    op = Operator(
        own_cluster, tmp_path, "http://127.0.0.1:1/v1", env={"BARGE_SECOND_DOOR_SECONDS": "1"}, name="door-operator"
    )
    yield op
    op.stop()


def pool(url: str) -> str:
    return f"""
apiVersion: barge.dev/v1alpha1
kind: InferencePool
metadata: {{name: mini-pool}}
spec:
  model: gpt-4o-mini
  provider:
    type: openai
    model: gpt-4o-mini
    secretRef: {{name: openai, key: api-key}}
    baseURL: {url}/v1
  quota: {{tokensPerMinute: 200000, requestsPerMinute: 1000}}
"""


def job(url: str, workdir: Path) -> str:
    doc: dict[str, Any] = {
        "apiVersion": "barge.dev/v1alpha1",
        "kind": "LLMBatchJob",
        "metadata": {"name": "claims"},
        "spec": {
            "provider": {
                "type": "openai",
                "model": "gpt-4o-mini",
                "secretRef": {"name": "openai", "key": "api-key"},
                "baseURL": f"{url}/v1",
            },
            "input": {"inline": [{"id": f"c{n}", "text": f"claim {n}"} for n in range(5)]},
            "request": {"template": "{{ text }}", "maxTokens": 20},
            "output": {"url": f"file://{workdir}/acme/claims/"},
        },
    }
    return yaml.safe_dump(doc)


def test_a_batch_outside_barge_on_a_pools_key_warns_the_pool(
    own_cluster: Cluster, door_operator: Operator, start_emulator: Factory
) -> None:
    cluster, namespace = own_cluster, "door-team"
    cluster.run_kubectl("create", "namespace", namespace)
    cluster.run_kubectl("label", "namespace", namespace, "barge.dev/tenant=acme")
    emu = start_emulator({"batch": {"processingSeconds": 3600}})
    credential_secret(cluster, namespace, "openai", {"api-key": SECRET})
    door_operator.start()
    cluster.run_kubectl("-n", namespace, "apply", "-f", "-", input=pool(emu.url))
    series = re.compile(r'^barge_provider_foreign_batches\{[^}]*tenant="acme"[^}]*\} (\S+)$', re.M)

    def gauge() -> float | None:
        found = series.search(door_operator.metrics())
        return float(found.group(1)) if found else None

    assert wait_for(lambda: gauge() is not None, 60, "the pool's credential scanned")
    assert gauge() == 0.0
    cluster.run_kubectl("-n", namespace, "apply", "-f", "-", input=job(emu.url, door_operator.workdir))
    wait_for(lambda: state(emu)["batches"], 60, "the job's own batch")

    async def outside() -> str:
        provider = provider_for("openai", emu.url, SECRET)
        return str((await provider.create_batch(outside_lines(provider, "openai", 2), {})).id)

    batch_id = asyncio.run(outside())

    def warned(kind: str) -> list[dict[str, Any]]:
        events = kubectl_json(cluster, "-n", namespace, "get", "events", "--field-selector", "reason=SecondDoorBatches")
        return [e for e in events["items"] if e["involvedObject"]["kind"] == kind]  # type: ignore[index]

    (event,) = wait_for(lambda: warned("InferencePool"), 60, "a SecondDoorBatches event on the pool")
    (on_job,) = wait_for(lambda: warned("LLMBatchJob"), 30, "a SecondDoorBatches event on the job")
    assert event["type"] == on_job["type"] == "Warning"
    assert event["involvedObject"]["name"] == "mini-pool"
    assert on_job["involvedObject"]["name"] == "claims"
    for message in (event["message"], on_job["message"]):
        assert batch_id in message
        assert SECRET not in message
    assert wait_for(lambda: gauge() == 1.0, 30, "the gauge at 1")
    listed = {b["id"]: b for b in state(emu)["batches"]}
    assert listed[batch_id]["status"] not in ("cancelling", "cancelled")  # never touched
    output = door_operator.output()  # (a fresh control plane may answer the pool's first reconcile 429: not ours)
    assert "second-door scan failed" not in output
    assert "second door: the event" not in output


def test_a_finished_jobs_key_is_scanned_again_after_a_restart(
    own_cluster: Cluster, door_operator: Operator, start_emulator: Factory
) -> None:
    """An idle key is where a second door goes unnoticed: a job runs to Succeeded, the operator stops, a batch is
    created on the job's key outside Barge, and the restarted operator (which steps no finished job) still scans
    the key and warns the job."""
    cluster, namespace = own_cluster, "door-idle"
    cluster.run_kubectl("create", "namespace", namespace)
    cluster.run_kubectl("label", "namespace", namespace, "barge.dev/tenant=acme")
    emu = start_emulator()
    credential_secret(cluster, namespace, "openai", {"api-key": SECRET})
    door_operator.start()
    cluster.run_kubectl("-n", namespace, "apply", "-f", "-", input=job(emu.url, door_operator.workdir))

    def phase() -> str:
        return str((kubectl_json(cluster, "-n", namespace, "get", "lbj", "claims").get("status") or {}).get("phase"))

    wait_for(lambda: phase() == "Succeeded", 120, "the job Succeeded")
    door_operator.stop()

    async def outside() -> str:
        provider = provider_for("openai", emu.url, SECRET)
        return str((await provider.create_batch(outside_lines(provider, "openai", 2), {})).id)

    batch_id = asyncio.run(outside())
    door_operator.start()  # a new process: nothing of the job's step is in memory

    def warned() -> list[dict[str, Any]]:
        events = kubectl_json(cluster, "-n", namespace, "get", "events", "--field-selector", "reason=SecondDoorBatches")
        return [e for e in events["items"] if e["involvedObject"]["kind"] == "LLMBatchJob"]  # type: ignore[index]

    (event,) = wait_for(warned, 60, "a SecondDoorBatches event on the finished job")
    assert event["involvedObject"]["name"] == "claims"
    assert batch_id in event["message"]
    series = re.compile(r'^barge_provider_foreign_batches\{[^}]*tenant="acme"[^}]*\} (\S+)$', re.M)
    assert wait_for(lambda: (m := series.search(door_operator.metrics())) and float(m.group(1)) == 1.0, 30, "gauge")
    assert phase() == "Succeeded"
    listed = {b["id"]: b for b in state(emu)["batches"]}
    assert listed[batch_id]["status"] not in ("cancelling", "cancelled")  # never touched
