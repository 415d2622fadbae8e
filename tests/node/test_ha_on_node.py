"""HA on the real node: two operator Pods on one PostgreSQL ledger (a host process, tools/pgserver.py) with Kopf
peering; the active Pod is force-deleted mid-job, the standby takes over, and the job Succeeds with one batch per
shard.

On a host-network node both replicas of one Deployment would want the same port of the node (metrics.port, which
the probes use), so the scheduler fits one per node: HA on one such node is two releases of the chart, each its own
Deployment and metrics.port, peered on one ledger (`peering.enabled`; the second with `peering.create: false` and
`crds.install: false`). On a cluster with a Pod network, or several host-network nodes, `replicas: 2` does the same.
"""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml
from tools import localcluster, pgserver

from tests.conftest import REPO
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

NS = "claims-ha"
RELEASES = ("barge", "barge-b")
ITEMS, SHARDS = 800, 4  # shards of 200 (BARGE_MAX_SHARD_REQUESTS)
LIFETIME = 6  # seconds a peer's keep-alive counts (production default 30)


def _working(node: localcluster.Cluster, pod: str) -> bool:
    """Kopf starts a peered operator paused and logs each change: it works when it last resumed."""
    done = node.run_kubectl("-n", OPERATOR_NAMESPACE, "logs", pod, check=False)
    return done.stdout.rfind("Resuming operations") > done.stdout.rfind("Pausing operations")


def _job(port: int, data: Path) -> dict[str, Any]:
    job = yaml.safe_load((REPO / "manifests" / "samples" / "claims-nightly.yaml").read_text())
    job["metadata"] = {"name": "failover", "namespace": NS}
    job["spec"]["provider"]["baseURL"] = f"http://127.0.0.1:{port}"
    job["spec"]["input"]["url"] = f"file://{data}/claims.jsonl"
    job["spec"]["output"]["url"] = f"file://{data}/failover/"
    job["spec"]["deadline"] = (datetime.now(UTC) + timedelta(hours=6)).strftime("%Y-%m-%dT%H:%M:%SZ")
    return job  # type: ignore[no-any-return]


@pytest.fixture(scope="module")
def replicas(node: localcluster.Cluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    data = tmp_path_factory.mktemp("ha-data")
    os.chown(data, 10001, 10001)
    subprocess.run(
        [str(REPO / ".venv" / "bin" / "barge"), "demo-data", "claims", "--count", str(ITEMS),
         "--out", str(data / "claims.jsonl")],
        check=True, capture_output=True,
    )  # fmt: skip
    port = free_port()
    apply(
        node,
        tenant_namespace(NS, "claims-team"),
        credential(NS, "anthropic"),
        *emulator_pod("emulator", NS, port, "batch: {processingSeconds: 4}\n"),
    )
    with pgserver.postgres(fsync=False) as ledger_url:
        ledger_secret(node, "barge-ledger", ledger_url)
        policy, crds_there = file_policy(data), crds_installed(node)
        for release in RELEASES:
            first = release == RELEASES[0]
            values = chart_values(
                node,
                free_port(),  # each release its own port of the node
                {"BARGE_PEERING_LIFETIME": str(LIFETIME), "BARGE_MAX_SHARD_REQUESTS": str(ITEMS // SHARDS)},
                extraVolumes=[{"name": "claims", "hostPath": {"path": str(data), "type": "Directory"}}],
                extraVolumeMounts=[{"name": "claims", "mountPath": str(data)}],
                ledger={"postgresql": {"enabled": True, "existingSecret": "barge-ledger", "secretKey": "url"}},
                operator={"pollSeconds": 2, "policy": yaml.safe_dump(policy)},
                peering={"name": "barge", "enabled": True, "create": first},
                crds={"install": first and not crds_there, "keep": True},
            )
            values_file = data.parent / f"{release}-values.yaml"
            values_file.write_text(yaml.safe_dump(values))
            helm(node, "upgrade", "--install", release, str(REPO / "charts" / "barge"), "-n", OPERATOR_NAMESPACE,
                 "--create-namespace", "-f", str(values_file), "--wait", "--timeout", "5m")  # fmt: skip
        wait_for("the emulator Ready", lambda: pod_ready(get_json(node, "-n", NS, "pod", "emulator")))
        yield {"data": data, "port": port}
        # the jobs first, while an operator can still remove their finalizers
        node.run_kubectl("delete", "namespace", NS, "--wait=true", "--timeout=120s", check=False)
        for release in reversed(RELEASES):
            helm(node, "uninstall", release, "-n", OPERATOR_NAMESPACE, "--wait", "--timeout", "3m")
        node.run_kubectl("-n", OPERATOR_NAMESPACE, "delete", "secret", "barge-ledger", check=False)


def test_the_standby_pod_takes_over_when_the_active_one_is_killed(
    node: localcluster.Cluster, replicas: dict[str, Any]
) -> None:
    pods = {r: p["metadata"]["name"] for r in RELEASES for p in operator_pods(node, r) if pod_ready(p)}
    assert set(pods) == set(RELEASES), pods
    active = wait_for(
        "exactly one operator Pod working",
        lambda: len(w := [r for r, pod in pods.items() if _working(node, pod)]) == 1 and w[0],
        60,
    )
    (standby,) = set(RELEASES) - {active}
    peers = get_json(node, "clusterkopfpeering", "barge").get("status") or {}
    assert len(peers) == 2, peers  # both Pods announced themselves, with distinct priorities
    assert len({int(p["priority"]) for p in peers.values()}) == 2, peers

    port = replicas["port"]
    apply(node, _job(port, replicas["data"]))
    wait_for("a first batch from the active Pod", lambda: emulator_state(port)["batches"], 180, 0.5)
    assert get_json(node, "-n", NS, "lbj", "failover").get("status", {}).get("phase") != "Succeeded"
    killed = time.monotonic()
    node.run_kubectl("-n", OPERATOR_NAMESPACE, "delete", "pod", pods[active], "--grace-period=0", "--force")
    wait_for("the standby Pod working", lambda: _working(node, pods[standby]), 6 * LIFETIME, 0.5)
    print(f"standby ({standby}) working {time.monotonic() - killed:.1f}s after the active Pod was force-deleted")
    wait_for(
        "failover terminal",
        lambda: get_json(node, "-n", NS, "lbj", "failover").get("status", {}).get("phase") in {"Succeeded", "Failed"},
        300,
        2,
    )
    job = get_json(node, "-n", NS, "lbj", "failover")
    assert job["status"]["phase"] == "Succeeded", job["status"]
    state = emulator_state(port)
    ids = [custom_id for batch in state["batches"] for custom_id in batch["custom_ids"]]
    assert len(state["batches"]) == SHARDS  # one batch per shard, whichever Pod sent it
    assert len(ids) == len(set(ids)) == ITEMS  # nothing sent (paid) twice
    lines = (replicas["data"] / "failover" / "results.jsonl").read_text().splitlines()
    assert len(lines) == ITEMS
