"""The chart as a platform team installs it, on a real node: `helm install` with the image `make image` built, the
operator Pod Ready through its own probes as UID 10001 on a read-only root filesystem, the claims sample taken to
Succeeded against an emulator Pod (Barge's image running `barge emulator`), a force-deleted operator Pod replaced
and resumed from the SQLite ledger on its PVC with one batch per shard, and `helm uninstall` leaving no Pod but
the CRDs, the jobs and the ledger's PVC.

Real parts only: real Pod status from the kubelet, real probes, a PVC bound to a hostPath PV by the PV binder.
The node's network rule applies (every Pod host-network, on loopback, tools/localnode.py).
"""

from __future__ import annotations

import json
import os
import subprocess
import time
import urllib.request
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml
from tools import localcluster

from tests.conftest import REPO
from tests.node.conftest import (
    apply,
    chart_values,
    credential,
    emulator_pod,
    emulator_state,
    file_policy,
    free_port,
    get_json,
    helm,
    operator_pods,
    pod_ready,
    tenant_namespace,
    wait_for,
)

pytestmark = pytest.mark.tools("node")

NAMESPACE = "barge-system"
TENANT_NS = "claims"
RELEASE = "barge"
CLAIMS = 600
NO_FAULTS_BUT_ONE_LOST_CREATE = "seed: 7\nbatch:\n  processingSeconds: 6\n  createFailuresAfterAccept: 1\n"
# REVIEW-3's C2 on the chart's own Pod: 100,000 results of 4 KB in one batch, then 5,000 prompts of 50 KB through
# the synchronous fallback (their batch never ends before the deadline).
BIG_RESULTS = "batch: {processingSeconds: 2, replyChars: 4080, replyRepeat: true}\nsync: {latencyMs: 1}\n"
NEVER_ENDS = "batch: {processingSeconds: 86400}\nsync: {latencyMs: 5}\n"


def _job(name: str, port: int, data: Path) -> dict[str, Any]:
    job = yaml.safe_load((REPO / "manifests" / "samples" / "claims-nightly.yaml").read_text())
    job["metadata"] = {"name": name, "namespace": TENANT_NS}
    job["spec"]["provider"]["baseURL"] = f"http://127.0.0.1:{port}"
    job["spec"]["input"]["url"] = f"file://{data}/claims.jsonl"
    job["spec"]["output"]["url"] = f"file://{data}/{name}/"
    job["spec"]["deadline"] = (datetime.now(UTC) + timedelta(hours=6)).strftime("%Y-%m-%dT%H:%M:%SZ")
    return job  # type: ignore[no-any-return]


def _phase(node: localcluster.Cluster, name: str) -> str:
    job = get_json(node, "-n", TENANT_NS, "lbj", name)
    return str(job.get("status", {}).get("phase", ""))


@pytest.fixture(scope="module")
def installed(node: localcluster.Cluster, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    data = tmp_path_factory.mktemp("claims-data")
    os.chown(data, 10001, 10001)
    subprocess.run(
        [str(REPO / ".venv" / "bin" / "barge"), "demo-data", "claims", "--count", str(CLAIMS),
         "--out", str(data / "claims.jsonl")],
        check=True, capture_output=True,
    )  # fmt: skip
    faults = (REPO / "examples" / "claims" / "emulator-faults.yaml").read_text()
    ports = {"faults": free_port(), "clean": free_port(), "big": free_port(), "slow": free_port()}
    apply(
        node,
        tenant_namespace(TENANT_NS, "claims-team"),
        credential(TENANT_NS, "anthropic"),
        *emulator_pod("emulator", TENANT_NS, ports["faults"], faults),
        *emulator_pod("emulator-clean", TENANT_NS, ports["clean"], NO_FAULTS_BUT_ONE_LOST_CREATE),
        *emulator_pod("emulator-big", TENANT_NS, ports["big"], BIG_RESULTS),
        *emulator_pod("emulator-slow", TENANT_NS, ports["slow"], NEVER_ENDS),
    )
    metrics_port = free_port()
    policy = file_policy(data)
    values = chart_values(
        node,
        metrics_port,
        {"BARGE_MIN_BATCH_WINDOW": "60"},
        extraVolumes=[{"name": "claims", "hostPath": {"path": str(data), "type": "Directory"}}],
        extraVolumeMounts=[{"name": "claims", "mountPath": str(data)}],
        operator={"pollSeconds": 2, "policy": yaml.safe_dump(policy)},
    )
    values_file = data.parent / "values.yaml"
    values_file.write_text(yaml.safe_dump(values))
    started = time.monotonic()
    helm(node, "upgrade", "--install", RELEASE, str(REPO / "charts" / "barge"), "-n", NAMESPACE, "--create-namespace",
          "-f", str(values_file), "--wait", "--timeout", "5m")  # fmt: skip
    ready_after = time.monotonic() - started
    for name in ("emulator", "emulator-clean", "emulator-big", "emulator-slow"):
        wait_for(f"{name} Ready", lambda n=name: pod_ready(get_json(node, "-n", TENANT_NS, "pod", n)))
    return {"data": data, "ports": ports, "metrics_port": metrics_port, "ready_after": ready_after}


def test_the_operator_pod_is_ready_as_uid_10001_read_only(
    node: localcluster.Cluster, installed: dict[str, Any]
) -> None:
    (pod,) = wait_for("one Ready operator Pod", lambda: [p for p in operator_pods(node) if pod_ready(p)])
    print(f"helm install --wait: operator Pod Ready in {installed['ready_after']:.1f}s")
    name = pod["metadata"]["name"]
    assert pod["spec"]["hostNetwork"] is True
    assert node.run_kubectl("-n", NAMESPACE, "exec", name, "--", "id", "-u").stdout.strip() == "10001"
    touched = node.run_kubectl("-n", NAMESPACE, "exec", name, "--", "touch", "/opt/barge/x", check=False)
    assert touched.returncode != 0
    assert "Read-only file system" in touched.stderr
    with urllib.request.urlopen(f"http://127.0.0.1:{installed['metrics_port']}/healthz", timeout=10) as answer:
        assert answer.status == 200
    assert pod["status"]["containerStatuses"][0]["restartCount"] == 0


def test_the_claims_sample_succeeds_against_an_emulator_pod(
    node: localcluster.Cluster, installed: dict[str, Any]
) -> None:
    apply(node, _job("claims-nightly", installed["ports"]["faults"], installed["data"]))
    wait_for("claims-nightly terminal", lambda: _phase(node, "claims-nightly") in {"Succeeded", "Failed"}, 600, 2)
    job = get_json(node, "-n", TENANT_NS, "lbj", "claims-nightly")
    assert job["status"]["phase"] == "Succeeded", job["status"]
    results = installed["data"] / "claims-nightly" / "results.jsonl"
    assert len(results.read_text().splitlines()) >= int(CLAIMS * 0.99)
    (pod,) = operator_pods(node)
    assert pod["status"]["containerStatuses"][0]["restartCount"] == 0


def test_a_force_deleted_operator_pod_is_replaced_and_resumes_from_the_ledger(
    node: localcluster.Cluster, installed: dict[str, Any]
) -> None:
    port = installed["ports"]["clean"]
    apply(node, _job("claims-resumed", port, installed["data"]))
    wait_for("a batch created", lambda: emulator_state(port)["batches"], 180, 0.5)
    (old,) = operator_pods(node)
    node.run_kubectl("-n", NAMESPACE, "delete", "pod", old["metadata"]["name"], "--grace-period=0", "--force")
    new = wait_for(
        "a new Ready operator Pod",
        lambda: [p for p in operator_pods(node) if pod_ready(p) and p["metadata"]["uid"] != old["metadata"]["uid"]],
    )[0]
    assert new["metadata"]["name"] != old["metadata"]["name"]
    wait_for("claims-resumed terminal", lambda: _phase(node, "claims-resumed") in {"Succeeded", "Failed"}, 600, 2)
    job = get_json(node, "-n", TENANT_NS, "lbj", "claims-resumed")
    assert job["status"]["phase"] == "Succeeded", job["status"]
    state = emulator_state(port)
    ids = [custom_id for batch in state["batches"] for custom_id in batch["custom_ids"]]
    assert len(ids) == len(set(ids)) == CLAIMS  # every claim sent once: one batch per shard, nothing paid twice
    assert state["sync_requests"] == 0
    lines = (installed["data"] / "claims-resumed" / "results.jsonl").read_text().splitlines()
    assert len(lines) == CLAIMS


def _peaks(node: localcluster.Cluster, pod: dict[str, Any]) -> tuple[float, float]:
    """The operator process's peak RSS (VmHWM of PID 1 in its container) and its Pod cgroup's peak usage (page
    cache included), in MiB."""
    status = node.run_kubectl("-n", NAMESPACE, "exec", pod["metadata"]["name"], "--", "cat", "/proc/1/status").stdout
    hwm = next(int(line.split()[1]) for line in status.splitlines() if line.startswith("VmHWM:")) / 1024
    qos = pod["status"]["qosClass"].lower()
    cgroup = (
        Path("/sys/fs/cgroup/memory/kubepods") / ("" if qos == "guaranteed" else qos) / f"pod{pod['metadata']['uid']}"
    )
    usage = cgroup / "memory.max_usage_in_bytes"
    return hwm, (int(usage.read_text()) / 2**20 if usage.exists() else float("nan"))


def test_a_100k_result_batch_and_a_large_fallback_fit_the_default_memory_limit(
    node: localcluster.Cluster, installed: dict[str, Any]
) -> None:
    """C2 of REVIEW-3 on the chart's own Pod with the chart's default resources: no restart, no OOM kill."""
    data: Path = installed["data"]
    subprocess.run(
        [str(REPO / ".venv" / "bin" / "barge"), "demo-data", "claims", "--count", "100000",
         "--out", str(data / "claims-100k.jsonl")],
        check=True, capture_output=True,
    )  # fmt: skip
    with (data / "prompts-50k.jsonl").open("w") as out:
        for index in range(5_000):
            out.write(json.dumps({"id": f"p{index}", "policy": "P-1", "text": f"{index} " + "x" * 50_000}) + "\n")
    big = _job("claims-100k", installed["ports"]["big"], data)
    big["spec"]["input"]["url"] = f"file://{data}/claims-100k.jsonl"
    big["spec"]["budget"] = {"maxCostUSD": "500"}
    slow = _job("prompts-fallback", installed["ports"]["slow"], data)
    slow["spec"]["input"]["url"] = f"file://{data}/prompts-50k.jsonl"
    slow["spec"]["budget"] = {"maxCostUSD": "500"}
    slow["spec"]["deadline"] = (datetime.now(UTC) + timedelta(seconds=150)).strftime("%Y-%m-%dT%H:%M:%SZ")
    (before,) = operator_pods(node)
    apply(node, big)
    wait_for("claims-100k terminal", lambda: _phase(node, "claims-100k") in {"Succeeded", "Failed"}, 1500, 5)
    apply(node, slow)
    wait_for("prompts-fallback terminal", lambda: _phase(node, "prompts-fallback") in {"Succeeded", "Failed"}, 900, 5)
    (pod,) = operator_pods(node)
    assert pod["metadata"]["uid"] == before["metadata"]["uid"]
    status = pod["status"]["containerStatuses"][0]
    assert status["restartCount"] == 0, status.get("lastState")
    for name, n in (("claims-100k", 100_000), ("prompts-fallback", 5_000)):
        job = get_json(node, "-n", TENANT_NS, "lbj", name)
        assert job["status"]["phase"] == "Succeeded", (name, job["status"])
        assert len((data / name / "results.jsonl").read_text().splitlines()) == n
    limit = pod["spec"]["containers"][0]["resources"]["limits"]["memory"]
    hwm, cgroup_peak = _peaks(node, pod)
    sync = emulator_state(installed["ports"]["slow"])["sync_requests"]
    print(
        f"operator Pod (limit {limit}): operator process peak RSS {hwm:.0f} MiB, Pod cgroup peak {cgroup_peak:.0f} MiB"
        f" (page cache included); {sync} synchronous calls for the 5,000 prompts"
    )
    # the cancelled batch may still finish a few (the emulator ends some items on cancel); the rest went sync
    assert sync >= 4_900


def test_helm_uninstall_keeps_crds_jobs_and_the_ledger(node: localcluster.Cluster, installed: dict[str, Any]) -> None:
    claims = [p["metadata"]["name"] for p in get_json(node, "-n", NAMESPACE, "pvc")["items"]]
    assert claims, "the SQLite ledger's PVC"
    helm(node, "uninstall", RELEASE, "-n", NAMESPACE, "--wait", "--timeout", "3m")
    wait_for("no operator Pod", lambda: not get_json(node, "-n", NAMESPACE, "pods")["items"])
    assert get_json(node, "crd", "llmbatchjobs.barge.dev")["metadata"]["name"] == "llmbatchjobs.barge.dev"
    jobs = {j["metadata"]["name"] for j in get_json(node, "-n", TENANT_NS, "lbj")["items"]}
    assert {"claims-nightly", "claims-resumed"} <= jobs
    kept = [p["metadata"]["name"] for p in get_json(node, "-n", NAMESPACE, "pvc")["items"]]
    assert kept == claims
    # the PVC is still bound to its hostPath volume, and the ledger file is on it
    (pvc,) = get_json(node, "-n", NAMESPACE, "pvc")["items"]
    assert pvc["status"]["phase"] == "Bound"
    volume = get_json(node, "pv", pvc["spec"]["volumeName"])
    assert any(Path(volume["spec"]["hostPath"]["path"]).iterdir())
