"""An engine pool at zero wakes for work Barge knows is waiting for it.

vLLM's waiting-requests metric only exists while a replica runs, so a pool scaled to zero never woke on it. The
operator exports `barge_pool_pending_requests{namespace,pool}` from the pool-backed jobs it watches, and the
pool's ScaledObject gains a Prometheus trigger on it with activation threshold 0. No KEDA or Prometheus runs
here (no kubelet either): the test checks the gauge on the operator's /metrics, the trigger in the ScaledObject
the API server accepted, and then plays KEDA's part by making the Deployment ready, as the other pool tests do.
"""

from __future__ import annotations

import re
from typing import Any

import pytest
import yaml
from tools.localcluster import Cluster

from barge.emulator.server import EmulatorThread
from tests.conftest import REPO, kubectl_json
from tests.e2e.conftest import VLLM_MODEL, Operator, wait_for
from tests.e2e.test_pools import make_ready

pytestmark = pytest.mark.cluster
SAMPLES = REPO / "manifests" / "samples"


def pending(operator: Operator, namespace: str, pool: str) -> float | None:
    pattern = rf'^barge_pool_pending_requests\{{namespace="{namespace}",pool="{pool}"\}} ([0-9.e+]+)$'
    found = re.search(pattern, operator.metrics(), flags=re.M)
    return float(found.group(1)) if found else None


def test_a_pool_at_zero_shows_pending_work_and_its_scaled_object_wakes_on_it(
    cluster: Cluster, namespace: str, operator: Operator, vllm: EmulatorThread
) -> None:
    pool = yaml.safe_load((SAMPLES / "inferencepool-engine-scale-to-zero.yaml").read_text())
    pool["spec"]["model"] = VLLM_MODEL  # what the vLLM stand-in serves
    cluster.run_kubectl("-n", namespace, "apply", "-f", "-", input=yaml.safe_dump(pool))
    wait_for(lambda: pending(operator, namespace, "qwen-nightly") == 0.0, 60, "the pool's gauge at 0")

    job = yaml.safe_load((SAMPLES / "llmbatchjob-pool.yaml").read_text())
    job["spec"]["provider"]["poolRef"]["name"] = "qwen-nightly"
    job["spec"]["input"]["inline"] = [{"id": str(n), "text": f"review number {n}"} for n in range(30)]
    job["spec"]["output"]["url"] = f"file://{operator.workdir}/wake-out/"
    cluster.run_kubectl("-n", namespace, "apply", "-f", "-", input=yaml.safe_dump(job))

    def status() -> dict[str, Any]:
        return kubectl_json(cluster, "-n", namespace, "get", "lbj", "tagging-on-pool").get("status") or {}  # type: ignore[return-value]

    wait_for(lambda: pending(operator, namespace, "qwen-nightly") == 1.0, 60, "a waiting job counted for its pool")
    admitted = next(c for c in status()["conditions"] if c["type"] == "Admitted")
    assert (admitted["status"], admitted["reason"]) == ("False", "NotFound")
    assert "not Ready" in admitted["message"]

    scaled = kubectl_json(cluster, "-n", namespace, "get", "scaledobjects.keda.sh", "qwen-nightly-vllm")
    triggers = {t.get("name", "vllm"): t["metadata"] for t in scaled["spec"]["triggers"]}  # type: ignore[index]
    assert scaled["spec"]["minReplicaCount"] == 0  # type: ignore[index]
    assert triggers["barge-pending"]["query"] == (
        f'sum(barge_pool_pending_requests{{namespace="{namespace}",pool="qwen-nightly"}})'
    )
    assert triggers["barge-pending"]["activationThreshold"] == "0"
    assert "vllm:num_requests_waiting" in triggers["vllm"]["query"]

    make_ready(cluster, namespace, "qwen-nightly-vllm", 1)  # what KEDA and the kubelet would do
    wait_for(lambda: status().get("phase") == "Succeeded", 120, "the job Succeeded on the woken pool")
    assert status()["counts"]["succeeded"] + status()["counts"]["refused"] == 30
    wait_for(lambda: pending(operator, namespace, "qwen-nightly") == 0.0, 30, "nothing waiting any more")
