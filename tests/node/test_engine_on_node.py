"""An engine InferencePool on the real node, its engine being Barge's own image running `barge emulator` with the
vLLM command line Barge generates (spec.engine.command: [barge, emulator], allowed by the admin's pools.commands):
its Pods pass the startup and readiness probes Barge generates, the pool becomes Ready from the Deployment's real
status, a `type: pool` job runs through it to Succeeded, and the pool scales to zero and back.

Real parts only: the operator is the chart's Pod (operator.podHostNetwork, the pool at 127.0.0.1:{port}), the
engine Pods are the kubelet's, no status is ever patched.
"""

from __future__ import annotations

import os
import time
import urllib.request
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml
from tools import localcluster

from tests.conftest import REPO
from tests.node.conftest import (
    IMAGE,
    OPERATOR_NAMESPACE,
    apply,
    chart_values,
    free_port,
    get_json,
    helm,
    operator_pods,
    pod_ready,
    tenant_namespace,
    wait_for,
)

pytestmark = pytest.mark.tools("node")

NS = "engines"
POOL = "emu"
MODEL = "emu-llama"
ITEMS = 40


def _pool(port: int, replicas: int) -> dict[str, Any]:
    return {
        "apiVersion": "barge.dev/v1alpha1",
        "kind": "InferencePool",
        "metadata": {"name": POOL, "namespace": NS},
        "spec": {
            "model": MODEL,
            "engine": {
                "image": IMAGE,
                "command": ["barge", "emulator"],
                "gpus": 0,
                "replicas": replicas,
                "port": port,
                "startupSeconds": 60,
                "args": {"maxNumSeqs": 8},
                "resources": {"requests": {"cpu": "50m", "memory": "128Mi"}, "limits": {"memory": "512Mi"}},
            },
        },
    }


def _job(name: str, data: Path) -> dict[str, Any]:
    deadline = (datetime.now(UTC) + timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M:%SZ")
    return {
        "apiVersion": "barge.dev/v1alpha1",
        "kind": "LLMBatchJob",
        "metadata": {"name": name, "namespace": NS},
        "spec": {
            "provider": {"type": "pool", "poolRef": {"name": POOL}},
            "input": {"inline": [{"id": f"r{i}", "text": f"review {i}: the parcel was late"} for i in range(ITEMS)]},
            "request": {"system": "Tag the review.", "maxTokens": 16},
            "output": {"url": f"file://{data}/{name}/"},
            "deadline": deadline,
        },
    }


def _pool_status(node: localcluster.Cluster) -> dict[str, Any]:
    return get_json(node, "-n", NS, "inferencepool", POOL).get("status") or {}  # type: ignore[no-any-return]


def _condition(status: dict[str, Any], kind: str) -> dict[str, Any]:
    return next((c for c in status.get("conditions", []) if c["type"] == kind), {})


def _engine_pods(node: localcluster.Cluster) -> list[dict[str, Any]]:
    pods = get_json(node, "-n", NS, "pods", "-l", f"app.kubernetes.io/name=vllm,barge.dev/pool={POOL}")["items"]
    return [p for p in pods if not p["metadata"].get("deletionTimestamp")]


def _phase(node: localcluster.Cluster, name: str) -> str:
    return str(get_json(node, "-n", NS, "lbj", name).get("status", {}).get("phase", ""))


@pytest.fixture(scope="module")
def operator(node: localcluster.Cluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    data = tmp_path_factory.mktemp("engine-data")
    os.chown(data, 10001, 10001)
    apply(node, tenant_namespace(NS, "engine-team"))
    policy = {
        "storage": {"prefixes": [f"file://{data}/"]},
        # Barge's own image as an engine, with the one command that makes it stand in for vLLM
        "pools": {"images": ["localhost/barge:*"], "commands": [["barge", "emulator"]]},
    }
    values = chart_values(
        node,
        free_port(),
        extraVolumes=[{"name": "data", "hostPath": {"path": str(data), "type": "Directory"}}],
        extraVolumeMounts=[{"name": "data", "mountPath": str(data)}],
        ledger={"sqlite": {"ephemeral": True}},
        operator={
            "pollSeconds": 2,
            "policy": yaml.safe_dump(policy),
            "podHostNetwork": True,
            "poolEndpointTemplate": "http://127.0.0.1:{port}/v1",
        },
    )
    values_file = data.parent / "engine-values.yaml"
    values_file.write_text(yaml.safe_dump(values))
    helm(node, "upgrade", "--install", "barge", str(REPO / "charts" / "barge"), "-n", OPERATOR_NAMESPACE,
         "--create-namespace", "-f", str(values_file), "--wait", "--timeout", "5m")  # fmt: skip
    yield {"data": data}
    # the jobs and the pool first, while the operator can still remove their finalizers
    node.run_kubectl("delete", "namespace", NS, "--wait=true", "--timeout=120s", check=False)
    helm(node, "uninstall", "barge", "-n", OPERATOR_NAMESPACE, "--wait", "--timeout", "3m")


def test_an_engine_pool_of_barges_image_is_ready_runs_a_pool_job_and_scales_to_zero_and_back(
    node: localcluster.Cluster, operator: dict[str, Any]
) -> None:
    port = free_port()
    created = time.monotonic()
    apply(node, _pool(port, 1))
    (pod,) = wait_for("an engine Pod Ready", lambda: [p for p in _engine_pods(node) if pod_ready(p)], 180)
    pod_ready_after = time.monotonic() - created
    status = wait_for(
        "the pool Ready", lambda: (s := _pool_status(node)) and _condition(s, "Ready").get("status") == "True" and s
    )
    pool_ready_after = time.monotonic() - created
    print(f"engine Pod Ready {pod_ready_after:.1f}s after the pool was applied, the pool Ready {pool_ready_after:.1f}s")
    # the probes Barge generated, passed by the kubelet; the container as Barge built it (vLLM's argv)
    container = pod["spec"]["containers"][0]
    assert container["command"] == ["barge", "emulator"]
    assert container["args"][:4] == ["--model", MODEL, "--served-model-name", MODEL]
    assert {container[p]["httpGet"]["path"] for p in ("startupProbe", "readinessProbe", "livenessProbe")} == {"/health"}
    (state,) = pod["status"]["containerStatuses"]
    assert state["started"] is True
    assert state["ready"] is True
    assert state["restartCount"] == 0
    assert pod["spec"]["hostNetwork"] is True
    assert pod["status"]["podIP"] == "127.0.0.1"
    deployment = get_json(node, "-n", NS, "deployment", f"{POOL}-vllm")
    assert deployment["status"]["readyReplicas"] == 1  # the Deployment controller's, from the kubelet's Pod status
    assert status["readyReplicas"] == 1
    assert status["endpoint"] == f"http://127.0.0.1:{port}/v1"
    logs = node.run_kubectl("-n", NS, "logs", pod["metadata"]["name"]).stdout
    assert f"listening on http://127.0.0.1:{port}" in logs  # bound to the pod's IP (the node's), not 0.0.0.0

    apply(node, _job("tag-reviews", operator["data"]))
    wait_for("tag-reviews terminal", lambda: _phase(node, "tag-reviews") in {"Succeeded", "Failed"}, 300, 2)
    job = get_json(node, "-n", NS, "lbj", "tag-reviews")
    assert job["status"]["phase"] == "Succeeded", job["status"]
    results = (operator["data"] / "tag-reviews" / "results.jsonl").read_text().splitlines()
    assert len(results) == ITEMS
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as answer:  # open, as vLLM's
        served = answer.read().decode()
    assert f'vllm:request_success_total{{model_name="{MODEL}"}} {float(ITEMS)}' in served

    # to zero: the Deployment's Pods go, the pool says so from the Deployment's status
    apply(node, _pool(port, 0))
    wait_for("no engine Pod", lambda: not get_json(node, "-n", NS, "pods", "-l", f"barge.dev/pool={POOL}")["items"])
    status = wait_for(
        "the pool scaled to zero",
        lambda: (s := _pool_status(node)) and _condition(s, "Ready").get("reason") == "ScaledToZero" and s,
    )
    assert status["readyReplicas"] == 0
    assert not get_json(node, "-n", NS, "deployment", f"{POOL}-vllm")["status"].get("readyReplicas")

    # and back: a new Pod passes the probes again, the pool is Ready with it, and a second job runs through it
    back = time.monotonic()
    apply(node, _pool(port, 1))
    wait_for(
        "the pool Ready again",
        lambda: (
            _pool_status(node).get("readyReplicas") == 1
            and _condition(_pool_status(node), "Ready").get("reason") == "Available"
        ),
    )
    print(f"back from zero: the pool Ready {time.monotonic() - back:.1f}s after replicas 0 -> 1")
    (again,) = [p for p in _engine_pods(node) if pod_ready(p)]
    assert again["metadata"]["uid"] != pod["metadata"]["uid"]
    apply(node, _job("tag-again", operator["data"]))
    wait_for("tag-again terminal", lambda: _phase(node, "tag-again") in {"Succeeded", "Failed"}, 300, 2)
    assert _phase(node, "tag-again") == "Succeeded", get_json(node, "-n", NS, "lbj", "tag-again")["status"]
    (op,) = operator_pods(node)
    assert op["status"]["containerStatuses"][0]["restartCount"] == 0
