"""Shards on the real node: the chart's `sharding.shards: 2` runs two operator Deployments on one PostgreSQL ledger (a
host process, tools/pgserver.py), each active for the namespaces that hash to it; a job in each shard's namespace
Succeeds, stepped by its own shard only (its finalizer, its pod's /metrics), with real Pod status throughout.

On the node's network the two shards' pods share the node: the chart gives shard i metrics.port + i.
"""

from __future__ import annotations

import os
import subprocess
import urllib.request
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml
from tools import localcluster, pgserver

from tests.conftest import REPO, namespace_of_shard
from tests.node.conftest import (
    OPERATOR_NAMESPACE,
    apply,
    chart_values,
    crds_installed,
    credential,
    emulator_pod,
    emulator_state,
    file_policy,
    free_port,
    get_json,
    helm,
    ledger_secret,
    operator_pods,
    pod_ready,
    tenant_namespace,
    wait_for,
)

pytestmark = pytest.mark.tools("node")

SHARDS = 2
ITEMS = 200
RELEASE = "barge-shards"
FINALIZER = "barge.dev/finalizer"


def namespace_of(shard: int) -> str:
    return namespace_of_shard(shard, SHARDS, "team")


def _job(namespace: str, port: int, data: Path) -> dict[str, Any]:
    job = yaml.safe_load((REPO / "manifests" / "samples" / "claims-nightly.yaml").read_text())
    job["metadata"] = {"name": "nightly", "namespace": namespace}
    job["spec"].pop("tenant", None)  # the namespace's label names the tenant
    job["spec"]["provider"]["baseURL"] = f"http://127.0.0.1:{port}"
    job["spec"]["input"]["url"] = f"file://{data}/claims.jsonl"
    job["spec"]["output"]["url"] = f"file://{data}/{namespace}/"
    job["spec"]["deadline"] = (datetime.now(UTC) + timedelta(hours=6)).strftime("%Y-%m-%dT%H:%M:%SZ")
    return job  # type: ignore[no-any-return]


@pytest.fixture(scope="module")
def shards(node: localcluster.Cluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    data = tmp_path_factory.mktemp("shards-data")
    os.chown(data, 10001, 10001)
    subprocess.run(
        [str(REPO / ".venv" / "bin" / "barge"), "demo-data", "claims", "--count", str(ITEMS),
         "--out", str(data / "claims.jsonl")],
        check=True, capture_output=True,
    )  # fmt: skip
    port, metrics = free_port(), free_port()
    namespaces = [namespace_of(i) for i in range(SHARDS)]
    for i, ns in enumerate(namespaces):
        apply(node, tenant_namespace(ns, f"team-{i}"), credential(ns, "anthropic"))
    apply(node, *emulator_pod("emulator", namespaces[0], port, "batch: {processingSeconds: 2}\n"))
    with pgserver.postgres(fsync=False) as ledger_url:
        ledger_secret(node, "barge-shards-ledger", ledger_url)
        policy, crds_there = file_policy(data), crds_installed(node)
        values = chart_values(
            node,
            metrics,
            extraVolumes=[{"name": "claims", "hostPath": {"path": str(data), "type": "Directory"}}],
            extraVolumeMounts=[{"name": "claims", "mountPath": str(data)}],
            ledger={"postgresql": {"enabled": True, "existingSecret": "barge-shards-ledger", "secretKey": "url"}},
            operator={"pollSeconds": 2, "policy": yaml.safe_dump(policy)},
            sharding={"shards": SHARDS},
            crds={"install": not crds_there, "keep": True},
        )
        values_file = data.parent / "shards-values.yaml"
        values_file.write_text(yaml.safe_dump(values))
        helm(node, "upgrade", "--install", RELEASE, str(REPO / "charts" / "barge"), "-n", OPERATOR_NAMESPACE,
             "--create-namespace", "-f", str(values_file), "--wait", "--timeout", "5m")  # fmt: skip
        wait_for("the emulator Ready", lambda: pod_ready(get_json(node, "-n", namespaces[0], "pod", "emulator")))
        yield {"data": data, "port": port, "metrics": metrics, "namespaces": namespaces}
        # the jobs first, while their shards can still remove their finalizers
        for ns in namespaces:
            node.run_kubectl("delete", "namespace", ns, "--wait=true", "--timeout=120s", check=False)
        helm(node, "uninstall", RELEASE, "-n", OPERATOR_NAMESPACE, "--wait", "--timeout", "3m")
        node.run_kubectl("-n", OPERATOR_NAMESPACE, "delete", "secret", "barge-shards-ledger", check=False)


def _metrics(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as answer:
        return str(answer.read().decode())


def test_each_shard_deployment_steps_only_its_own_namespaces_jobs(
    node: localcluster.Cluster, shards: dict[str, Any]
) -> None:
    pods = [p for p in operator_pods(node, RELEASE) if pod_ready(p)]
    assert sorted(p["metadata"]["labels"]["barge.dev/shard"] for p in pods) == [str(i) for i in range(SHARDS)]
    for pod in pods:
        env = {e["name"]: e.get("value") for e in pod["spec"]["containers"][0]["env"]}
        assert env["BARGE_SHARD"] == f"{pod['metadata']['labels']['barge.dev/shard']}/{SHARDS}"

    namespaces = shards["namespaces"]
    for ns in namespaces:
        apply(node, _job(ns, shards["port"], shards["data"]))

    def phases() -> list[str]:
        return [get_json(node, "-n", ns, "lbj", "nightly").get("status", {}).get("phase", "") for ns in namespaces]

    wait_for("both jobs terminal", lambda: all(p in {"Succeeded", "Failed"} for p in phases()), 300, 2)
    assert phases() == ["Succeeded"] * SHARDS
    for i, ns in enumerate(namespaces):
        job = get_json(node, "-n", ns, "lbj", "nightly")
        # stepped by the shard its namespace hashes to, and by no other
        assert job["metadata"]["finalizers"] == [FINALIZER if i == 0 else f"{FINALIZER}-{i}"]
        lines = (shards["data"] / ns / "results.jsonl").read_text().splitlines()
        assert len(lines) == ITEMS
    # one batch per job (both read the same input, so their custom ids are the same): nothing sent (paid) twice
    batches = emulator_state(shards["port"])["batches"]
    assert [len(set(b["custom_ids"])) for b in batches] == [ITEMS] * SHARDS
    # each shard's pod, on its own port of the node (metrics.port + i), reports its own namespace's job only
    for i, ns in enumerate(namespaces):
        # barge_jobs only: shard 0 also reports the ledger-wide families, every namespace's
        text = "\n".join(x for x in _metrics(shards["metrics"] + i).splitlines() if x.startswith("barge_jobs{"))
        # labelled by the namespace's tenant (its label), as the ledger meters it, on shard 0 and shard 1 alike
        assert f'barge_jobs{{namespace="{ns}",phase="Succeeded",tenant="team-{i}"}} 1.0' in text, text
        assert f'namespace="{namespaces[1 - i]}"' not in text
