"""An embeddings job on an engine pool, on the real local control plane: spec.request.endpoint embeddings with
provider type pool goes through the pool's vLLM OpenAI API (`barge emulator --vllm`, its /v1/embeddings), every
item synchronous; each vector in results.jsonl is the emulator's deterministic one for its rendered input, usage
is input tokens only, and a self-hosted model costs nothing; the same job with spec.output.format parquet writes
results.parquet, each vector a fixed-size float32 list. A responses job on the same pool is refused at
admission naming why (vLLM's pools serve chat and embeddings), nothing sent."""

from __future__ import annotations

import json
import math
import subprocess
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
import yaml
from tools.localcluster import Cluster

from barge.emulator.core import estimate_tokens
from barge.emulator.embeddings import vector
from barge.emulator.server import EmulatorThread
from tests.conftest import REPO, kubectl_json
from tests.e2e.conftest import VLLM_MODEL, Operator, wait_for
from tests.e2e.test_pools import make_ready

pytestmark = pytest.mark.cluster
SAMPLES = REPO / "manifests" / "samples"
COUNT = 30


def status(cluster: Cluster, ns: str, name: str) -> dict[str, Any]:
    return kubectl_json(cluster, "-n", ns, "get", "lbj", name).get("status") or {}  # type: ignore[return-value]


def admitted(cluster: Cluster, ns: str, name: str) -> dict[str, Any]:
    return next((c for c in status(cluster, ns, name).get("conditions", []) if c["type"] == "Admitted"), {})


def job(name: str, out: str, output_format: str = "jsonl", **request: Any) -> dict[str, Any]:
    return {
        "apiVersion": "barge.dev/v1alpha1",
        "kind": "LLMBatchJob",
        "metadata": {"name": name},
        "spec": {
            "provider": {"type": "pool", "poolRef": {"name": "llama-interactive"}},
            "input": {"inline": [{"id": str(n), "text": f"passage number {n}"} for n in range(COUNT)]},
            "request": {"template": "passage: {{ text }}", **request},
            "output": {"url": out, "format": output_format},
        },
    }


@pytest.mark.timeout(600)
def test_an_embeddings_job_on_an_engine_pool(
    cluster: Cluster, namespace: str, operator: Operator, vllm: EmulatorThread, tmp_path: Path
) -> None:
    pool = yaml.safe_load((SAMPLES / "inferencepool-engine-interactive.yaml").read_text())
    cluster.run_kubectl("-n", namespace, "apply", "-f", "-", input=yaml.safe_dump(pool))
    out = operator.workdir / "pool-embeddings-out"
    doc = job("embed-on-pool", f"file://{out}/", endpoint="embeddings", dimensions=16)
    cluster.run_kubectl("-n", namespace, "apply", "-f", "-", input=yaml.safe_dump(doc))
    columns = operator.workdir / "pool-embeddings-parquet"  # the same job, its results as Parquet
    doc = job("embed-parquet", f"file://{columns}/", "parquet", endpoint="embeddings", dimensions=16)
    cluster.run_kubectl("-n", namespace, "apply", "-f", "-", input=yaml.safe_dump(doc))
    try:  # the package's operator has every earlier test's objects by now: waits sized for a full run's load
        wait_for(
            lambda: "not Ready" in admitted(cluster, namespace, "embed-on-pool").get("message", ""),
            120,
            "the job waiting for its pool",
        )
        before = vllm.store.sync_requests

        def ready() -> bool:  # the operator may not have made the pool's Deployment yet: patch it once it exists
            try:
                make_ready(cluster, namespace, "llama-interactive-vllm", 1)
            except subprocess.CalledProcessError:
                return False
            return True

        wait_for(ready, 120, "the pool's Deployment to exist")
        wait_for(lambda: status(cluster, namespace, "embed-on-pool").get("phase") == "Succeeded", 240, "Succeeded")
        wait_for(lambda: status(cluster, namespace, "embed-parquet").get("phase") == "Succeeded", 120, "Succeeded")
    except TimeoutError:
        print(cluster.run_kubectl("-n", namespace, "get", "lbj,bpool,deploy", "-o", "yaml").stdout)
        print(operator.output()[-6000:])
        raise
    st = status(cluster, namespace, "embed-on-pool")
    assert st["counts"]["succeeded"] == COUNT
    assert st["counts"]["viaFallback"] == COUNT  # an engine pool is the synchronous path
    results = [json.loads(x) for x in (out / "results.jsonl").read_text().splitlines()]
    assert sorted(int(r["id"]) for r in results) == list(range(COUNT))
    tokens = 0
    for r in results:
        text = f"passage: passage number {r['id']}"
        assert r["embedding"] == vector(text, 16, VLLM_MODEL)  # exactly the vector of its rendered input
        assert r["output"] == ""
        assert r["usage"]["input_tokens"] == estimate_tokens(text)
        assert r["usage"]["output_tokens"] == 0
        tokens += estimate_tokens(text)
    assert st["usage"]["inputTokens"] == tokens
    assert st["usage"]["costUSD"] == "0"  # a self-hosted model has no list price
    assert vllm.store.sync_requests - before >= 2 * COUNT

    st = status(cluster, namespace, "embed-parquet")
    assert st["resultsURL"] == f"file://{columns}/results.parquet"
    assert sorted(p.name for p in columns.iterdir()) == ["failures.parquet", "results.parquet"]
    table = pq.read_table(columns / "results.parquet")  # pyarrow: a reader of its own (Barge writes with arro3)
    assert str(table.schema.field("embedding").type) == "fixed_size_list<item: float not null>[16]"
    rows = table.to_pylist()
    assert sorted(int(r["id"]) for r in rows) == list(range(COUNT))
    for r in rows:
        want = vector(f"passage: passage number {r['id']}", 16, VLLM_MODEL)
        assert all(math.isclose(a, b, rel_tol=1e-6, abs_tol=1e-7) for a, b in zip(r["embedding"], want, strict=True))
        assert r["output_tokens"] == 0
    assert sum(r["input_tokens"] for r in rows) == st["usage"]["inputTokens"] == tokens


def test_a_responses_job_on_an_engine_pool_is_refused(cluster: Cluster, namespace: str, operator: Operator) -> None:
    doc = job("responses-on-pool", f"file://{operator.workdir}/never/", endpoint="responses")
    cluster.run_kubectl("-n", namespace, "apply", "-f", "-", input=yaml.safe_dump(doc))
    wait_for(lambda: admitted(cluster, namespace, "responses-on-pool").get("status") == "False", 60, "refused")
    cond = admitted(cluster, namespace, "responses-on-pool")
    assert cond["reason"] == "InvalidSpec"
    assert "spec.request.endpoint responses is not offered by pool" in cond["message"]
    assert "an engine pool serves chat and embeddings" in cond["message"]
    assert not (operator.workdir / "never").exists()
