"""Drive LLMBatchJobs and InferencePools through every phase the Argo CD health checks distinguish, on the real
API server with the operator as a process, and capture each object as Argo CD would read it.

Every run checks that each phase is really reached (the kstatus condition Barge wrote) and that Argo CD's
verdict on the fresh object (`argocd` from make tools) has the STATUS health_test.yaml gives for that phase.
With BARGE_CAPTURE_ARGOCD_TESTDATA=1 it also writes the objects to
integrations/argocd/resource_customizations/barge.dev/<Kind>/testdata/<phase>.yaml (managedFields dropped):
that is how the committed testdata were made. The STATUS and MESSAGE of each health_test.yaml entry were then
checked by hand against that file's counts, batches and conditions before being committed."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from tools.localcluster import Cluster

from barge.emulator.server import EmulatorThread
from tests.conftest import REPO, kubectl_json
from tests.e2e.conftest import Operator, wait_for
from tests.e2e.test_operator import job_manifest, secret
from tests.e2e.test_pools import make_ready
from tests.integration.test_argocd_health import evaluate

pytestmark = [pytest.mark.cluster, pytest.mark.tools("argocd")]
CUSTOMIZATIONS = REPO / "integrations" / "argocd" / "resource_customizations" / "barge.dev"
WRITE = os.environ.get("BARGE_CAPTURE_ARGOCD_TESTDATA") == "1"


def expected_statuses(kind: str) -> dict[str, str]:
    tests = yaml.safe_load((CUSTOMIZATIONS / kind / "health_test.yaml").read_text())["tests"]
    return {Path(t["inputPath"]).stem: t["healthStatus"]["status"] for t in tests}


class Capture:
    def __init__(self, cluster: Cluster, namespace: str, tmp: Path) -> None:
        self.cluster, self.namespace, self.tmp = cluster, namespace, tmp
        self.seen: dict[tuple[str, str], dict[str, Any]] = {}

    def get(self, resource: str, name: str) -> dict[str, Any]:
        return kubectl_json(self.cluster, "-n", self.namespace, "get", resource, name)

    def take(self, kind: str, phase: str, body: dict[str, Any]) -> None:
        body = json.loads(json.dumps(body))
        body["metadata"].pop("managedFields", None)
        self.seen[(kind, phase)] = body
        text = yaml.safe_dump(body, sort_keys=False)
        (self.tmp / f"{kind}-{phase}.yaml").write_text(text)
        if WRITE:
            (CUSTOMIZATIONS / kind / "testdata").mkdir(exist_ok=True)
            (CUSTOMIZATIONS / kind / "testdata" / f"{phase}.yaml").write_text(text)

    def apply_created(self, manifest: str) -> dict[str, Any]:
        """Create and keep the API server's answer: the object before the operator has observed it."""
        out = self.cluster.run_kubectl("-n", self.namespace, "create", "-f", "-", "-o", "json", input=manifest)
        return json.loads(out.stdout)  # type: ignore[no-any-return]


def true_condition(body: dict[str, Any]) -> tuple[str, str]:
    conds = {c["type"]: c for c in (body.get("status") or {}).get("conditions") or []}
    for type_ in ("Stalled", "Reconciling", "Ready"):
        if conds.get(type_, {}).get("status") == "True":
            return type_, conds[type_]["reason"]
    return "", ""


def observed(body: dict[str, Any]) -> bool:
    return bool(body.get("status")) and body["status"].get("observedGeneration") == body["metadata"]["generation"]


def reach(
    capture: Capture,
    resource: str,
    name: str,
    cond: tuple[str, str],
    extra: Callable[[dict[str, Any]], bool] | None = None,
) -> dict[str, Any]:
    def check() -> dict[str, Any] | None:
        body = capture.get(resource, name)
        ok = observed(body) and true_condition(body) == cond and (extra is None or extra(body))
        return body if ok else None

    return wait_for(check, 120, f"{resource}/{name} with {cond}")  # type: ignore[no-any-return]


def test_capture_llmbatchjob_phases(
    cluster: Cluster,
    namespace: str,
    operator: Operator,
    start_emulator: Callable[..., EmulatorThread],
    tmp_path: Path,
) -> None:
    cap = Capture(cluster, namespace, tmp_path)
    fast = start_emulator({"batch": {"processingSeconds": 0.5}})
    slow = start_emulator({"batch": {"processingSeconds": 600, "cancelSeconds": 0.2}})
    broke = start_emulator({"billingError": True})
    work = operator.workdir

    # No Secret yet: the first job waits for it; its creation is the unobserved object.
    created = cap.apply_created(job_manifest("nightly-2026-11-30", fast.url, work, n=2400))
    cap.take("LLMBatchJob", "progressing_unobserved", created)
    cap.take(
        "LLMBatchJob",
        "progressing_waiting_for_secret",
        reach(cap, "lbj", "nightly-2026-11-30", ("Reconciling", "NotFound")),
    )
    secret(cluster, namespace)
    cap.take("LLMBatchJob", "healthy_succeeded", reach(cap, "lbj", "nightly-2026-11-30", ("Ready", "Succeeded")))

    cap.apply_created(job_manifest("nightly-slow", slow.url, work, n=2400))
    in_flight = reach(
        cap, "lbj", "nightly-slow", ("Reconciling", "Running"), lambda b: len(b["status"].get("batches") or []) >= 12
    )
    cap.take("LLMBatchJob", "progressing_running", in_flight)
    cluster.run_kubectl(
        "-n", namespace, "patch", "lbj", "nightly-slow", "--type=merge", "-p", '{"spec":{"suspend":true}}'
    )
    settled = reach(  # the cancelled batches have ended: what a suspended job looks like for hours
        cap,
        "lbj",
        "nightly-slow",
        ("Ready", "Suspended"),
        lambda b: all(x.get("endedAt") for x in b["status"]["batches"]),
    )
    cap.take("LLMBatchJob", "healthy_suspended", settled)

    cap.apply_created(job_manifest("nightly-unpaid", broke.url, work, n=50))
    cap.take("LLMBatchJob", "degraded_failed", reach(cap, "lbj", "nightly-unpaid", ("Stalled", "Failed")))

    cap.apply_created(job_manifest("nightly-over-budget", fast.url, work, n=2400, budget={"maxCostUSD": "0.01"}))
    cap.take(
        "LLMBatchJob",
        "degraded_budget_exceeded",
        reach(cap, "lbj", "nightly-over-budget", ("Stalled", "BudgetExceeded")),
    )

    check_statuses(cap, "LLMBatchJob")


def pool(name: str, spec: dict[str, Any]) -> str:
    return json.dumps(
        {"apiVersion": "barge.dev/v1alpha1", "kind": "InferencePool", "metadata": {"name": name}, "spec": spec}
    )


def test_capture_inferencepool_phases(cluster: Cluster, namespace: str, operator: Operator, tmp_path: Path) -> None:
    cap = Capture(cluster, namespace, tmp_path)
    hosted = {
        "model": "claude-sonnet-4-6",
        "provider": {"type": "anthropic", "model": "claude-sonnet-4-6", "secretRef": {"name": "anthropic"}},
        "quota": {"tokensPerMinute": 400000, "requestsPerMinute": 2000},
    }
    cap.take("InferencePool", "progressing_unobserved", cap.apply_created(pool("hosted", hosted)))
    cap.take("InferencePool", "degraded_secret_not_found", reach(cap, "bpool", "hosted", ("Stalled", "SecretNotFound")))
    secret(cluster, namespace)
    cap.take("InferencePool", "healthy_provider", reach(cap, "bpool", "hosted", ("Ready", "Available")))

    sample = yaml.safe_load((REPO / "manifests" / "samples" / "inferencepool-engine-scale-to-zero.yaml").read_text())
    cap.apply_created(pool("qwen-nightly", sample["spec"]))
    cap.take("InferencePool", "progressing_starting", reach(cap, "bpool", "qwen-nightly", ("Reconciling", "Starting")))
    cluster.run_kubectl("-n", namespace, "scale", "deployment", "qwen-nightly-vllm", "--replicas=2")  # as KEDA would
    make_ready(cluster, namespace, "qwen-nightly-vllm", 2)
    cap.take("InferencePool", "healthy_engine", reach(cap, "bpool", "qwen-nightly", ("Ready", "Available")))
    # What KEDA does when nothing waits: the Deployment goes to zero replicas.
    cluster.run_kubectl("-n", namespace, "scale", "deployment", "qwen-nightly-vllm", "--replicas=0")
    cluster.run_kubectl(
        "-n", namespace, "patch", "deployment", "qwen-nightly-vllm", "--subresource=status", "--type=merge",
        "-p", json.dumps({"status": {"replicas": 0, "readyReplicas": 0, "availableReplicas": 0, "updatedReplicas": 0}}),
    )  # fmt: skip
    cap.take("InferencePool", "healthy_scaled_to_zero", reach(cap, "bpool", "qwen-nightly", ("Ready", "ScaledToZero")))
    hpa = {
        "apiVersion": "autoscaling/v2",
        "kind": "HorizontalPodAutoscaler",
        "metadata": {"name": "hand-made"},
        "spec": {
            "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "qwen-nightly-vllm"},
            "minReplicas": 1,
            "maxReplicas": 3,
        },
    }
    cluster.run_kubectl("-n", namespace, "apply", "-f", "-", input=json.dumps(hpa))
    cap.take(
        "InferencePool",
        "degraded_scaling_conflict",
        reach(cap, "bpool", "qwen-nightly", ("Stalled", "ScalingConflict")),
    )

    check_statuses(cap, "InferencePool")


def check_statuses(cap: Capture, kind: str) -> None:
    """Every captured phase is a health_test.yaml case, and Argo CD gives the fresh object that case's STATUS."""
    phases = {p for k, p in cap.seen if k == kind}
    assert phases == set(expected_statuses(kind)), "health_test.yaml and the captured phases must match"
    for phase, status in expected_statuses(kind).items():
        got, message = evaluate(cap.tmp / f"{kind}-{phase}.yaml")
        assert got == status, f"{kind} {phase}: Argo CD says {got} ({message})"
