"""kstatus on the real API server: what `kubectl wait`, Flux and `helm --wait` read from Barge's objects.

`kubectl wait --for=condition=X` also waits for the condition's observedGeneration to reach the object's
generation, so these tests fail if the operator writes the conditions without it or never catches up."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from tools import localcluster
from tools.localcluster import Cluster

from barge.emulator.server import EmulatorThread
from tests.conftest import kubectl_json, state
from tests.e2e.conftest import Operator, wait_for
from tests.e2e.test_operator import apply, job_manifest, phase_is, secret

pytestmark = pytest.mark.cluster


def kubectl_wait(cluster: Cluster, namespace: str, target: str, condition: str, timeout: int = 120) -> str:
    out = cluster.run_kubectl(
        "-n", namespace, "wait", f"--for={condition}", target, f"--timeout={timeout}s", check=False
    )
    assert out.returncode == 0, f"kubectl wait --for={condition} {target}: {out.stderr}"
    return out.stdout


def job(cluster: Cluster, namespace: str, name: str) -> dict[str, Any]:
    return kubectl_json(cluster, "-n", namespace, "get", "lbj", name)


def conditions(body: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["type"]: c for c in (body.get("status") or {}).get("conditions") or []}


def assert_observed(body: dict[str, Any]) -> None:
    generation = body["metadata"]["generation"]
    st = body["status"]
    assert st["observedGeneration"] == generation
    for type_ in ("Ready", "Reconciling", "Stalled"):
        assert conditions(body)[type_]["observedGeneration"] == generation


def test_kubectl_wait_ready_returns_for_a_job_that_succeeds(
    cluster: Cluster, namespace: str, operator: Operator, emulator: EmulatorThread
) -> None:
    secret(cluster, namespace)
    apply(cluster, namespace, job_manifest("waited", emulator.url, operator.workdir, n=300))
    out = kubectl_wait(cluster, namespace, "lbj/waited", "condition=Ready")
    assert "condition met" in out
    body = job(cluster, namespace, "waited")
    assert body["status"]["phase"] == "Succeeded"
    conds = conditions(body)
    assert (conds["Ready"]["status"], conds["Ready"]["reason"]) == ("True", "Succeeded")
    assert conds["Reconciling"]["status"] == "False"
    assert conds["Stalled"]["status"] == "False"
    assert conds["Complete"]["status"] == "True", "the domain conditions stay beside kstatus's"
    assert_observed(body)


def test_kubectl_wait_stalled_returns_for_a_job_that_fails(
    cluster: Cluster, namespace: str, operator: Operator, start_emulator: Callable[..., EmulatorThread]
) -> None:
    broke = start_emulator({"billingError": True})
    secret(cluster, namespace)
    apply(cluster, namespace, job_manifest("unpaid", broke.url, operator.workdir, n=50))
    kubectl_wait(cluster, namespace, "lbj/unpaid", "condition=Stalled")
    body = job(cluster, namespace, "unpaid")
    assert body["status"]["phase"] == "Failed"
    conds = conditions(body)
    assert conds["Stalled"]["reason"] == "Failed"
    assert conds["Stalled"]["message"] == body["status"]["message"]
    assert conds["Reconciling"]["status"] == "False", "a terminal failure clears Reconciling"
    assert (conds["Ready"]["status"], conds["Ready"]["reason"]) == ("False", "Failed")
    assert_observed(body)
    # kstatus reads Failed, not InProgress: waiting for Ready would hang, so say so quickly.
    out = cluster.run_kubectl(
        "-n", namespace, "wait", "--for=condition=Ready", "lbj/unpaid", "--timeout=2s", check=False
    )
    assert out.returncode != 0


def test_deadline_edit_makes_observed_generation_catch_up_running_and_after_the_end(
    cluster: Cluster, namespace: str, operator: Operator, start_emulator: Callable[..., EmulatorThread]
) -> None:
    slow = start_emulator({"batch": {"processingSeconds": 4}})
    secret(cluster, namespace)
    apply(cluster, namespace, job_manifest("moving", slow.url, operator.workdir, n=60))
    wait_for(phase_is(cluster, namespace, "moving", "Running"), 60, "Running")
    running = job(cluster, namespace, "moving")
    assert conditions(running)["Reconciling"]["status"] == "True"
    assert conditions(running)["Reconciling"]["reason"] == "Running"

    def set_deadline(value: str) -> int:
        patch = json.dumps({"spec": {"deadline": value}})
        cluster.run_kubectl("-n", namespace, "patch", "lbj", "moving", "--type=merge", "-p", patch)
        return int(job(cluster, namespace, "moving")["metadata"]["generation"])

    generation = set_deadline("2099-01-01T00:00:00Z")
    assert generation == running["metadata"]["generation"] + 1
    kubectl_wait(cluster, namespace, "lbj/moving", f"jsonpath={{.status.observedGeneration}}={generation}", 60)
    kubectl_wait(cluster, namespace, "lbj/moving", "condition=Ready")
    assert_observed(job(cluster, namespace, "moving"))

    # After the end no daemon runs; an edit (say, Git restoring a deadline) must still be observed.
    generation = set_deadline("2099-06-01T00:00:00Z")
    kubectl_wait(cluster, namespace, "lbj/moving", f"jsonpath={{.status.observedGeneration}}={generation}", 60)
    kubectl_wait(cluster, namespace, "lbj/moving", "condition=Ready", 30)
    body = job(cluster, namespace, "moving")
    assert_observed(body)
    assert body["status"]["phase"] == "Succeeded"
    assert len(state(slow)["batches"]) >= 1


def test_suspended_job_is_ready_so_waiters_return(
    cluster: Cluster, namespace: str, operator: Operator, start_emulator: Callable[..., EmulatorThread]
) -> None:
    slow = start_emulator({"batch": {"processingSeconds": 60, "cancelSeconds": 0.2}})
    secret(cluster, namespace)
    apply(cluster, namespace, job_manifest("held", slow.url, operator.workdir, n=40, suspend=True))
    kubectl_wait(cluster, namespace, "lbj/held", "condition=Ready", 60)
    body = job(cluster, namespace, "held")
    assert body["status"]["phase"] == "Suspended"
    assert conditions(body)["Ready"]["reason"] == "Suspended"
    assert_observed(body)
    assert state(slow)["batches"] == [], "a suspended job submits nothing"


def test_pool_kstatus_on_the_api_server(cluster: Cluster, namespace: str, operator: Operator) -> None:
    pool = {
        "apiVersion": "barge.dev/v1alpha1",
        "kind": "InferencePool",
        "metadata": {"name": "hosted"},
        "spec": {
            "model": "claude-sonnet-4-6",
            "provider": {"type": "anthropic", "model": "claude-sonnet-4-6", "secretRef": {"name": "anthropic"}},
        },
    }
    apply(cluster, namespace, json.dumps(pool))
    # Long timeouts: right after CRDs are installed the API server may answer 429 ("storage is (re)initializing")
    # to the pool handler's list calls, and Kopf retries a failed handler after 60 s.
    kubectl_wait(cluster, namespace, "inferencepool/hosted", "condition=Stalled", 180)
    stalled = conditions(kubectl_json(cluster, "-n", namespace, "get", "inferencepool", "hosted"))["Stalled"]
    assert stalled["reason"] == "SecretNotFound"
    secret(cluster, namespace)
    kubectl_wait(cluster, namespace, "inferencepool/hosted", "condition=Ready", 180)
    body = kubectl_json(cluster, "-n", namespace, "get", "inferencepool", "hosted")
    assert conditions(body)["Stalled"]["status"] == "False"
    assert body["status"]["observedGeneration"] == body["metadata"]["generation"]
    ready = [c for c in body["status"]["conditions"] if c["type"] == "Ready"]
    assert len(ready) == 1, "one Ready condition: kstatus's, computed from the domain readiness"


def helm_install_wait(cluster: Cluster, namespace: str, workdir: Path, release: str, manifest: str) -> str:
    """`helm install --wait` (Helm 4: kstatus watcher) of a one-file chart holding `manifest`."""
    chart = workdir / f"chart-{release}"
    (chart / "templates").mkdir(parents=True)
    (chart / "files").mkdir()
    (chart / "Chart.yaml").write_text(f"apiVersion: v2\nname: {release}\nversion: 0.1.0\n")
    (chart / "files" / "job.yaml").write_text(manifest)  # raw: the job's own {{ }} template is not Helm's
    (chart / "templates" / "job.yaml").write_text('{{ .Files.Get "files/job.yaml" }}\n')
    helm = localcluster.binaries()["helm"]
    out = subprocess.run(
        [str(helm), "install", release, str(chart), "-n", namespace, "--wait", "--timeout", "5m"],
        env=cluster.env(),
        capture_output=True,
        text=True,
        check=False,
    )
    return f"rc={out.returncode}\n{out.stdout}{out.stderr}"


def test_helm_wait_returns_for_a_suspended_job_and_fails_fast_for_a_failed_one(
    cluster: Cluster, namespace: str, operator: Operator, start_emulator: Callable[..., EmulatorThread]
) -> None:
    slow = start_emulator({"batch": {"processingSeconds": 600}})
    broke = start_emulator({"billingError": True})
    secret(cluster, namespace)
    held = helm_install_wait(
        cluster,
        namespace,
        operator.workdir,
        "held",
        job_manifest("helm-held", slow.url, operator.workdir, n=20, suspend=True),
    )
    assert held.startswith("rc=0"), held
    assert job(cluster, namespace, "helm-held")["status"]["phase"] == "Suspended"
    failed = helm_install_wait(
        cluster, namespace, operator.workdir, "unpaid", job_manifest("helm-unpaid", broke.url, operator.workdir, n=20)
    )
    # Not the 5-minute timeout: kstatus reads Stalled as Failed, and Helm stops waiting for it.
    assert not failed.startswith("rc=0"), failed
    assert "status: Failed" in failed, failed
    assert "context deadline exceeded" not in failed, failed
