"""A provider pool's redis-streams worker on the real node, scaled by a real KEDA: a backlog on a real redis-server
makes KEDA (operator + metrics adapter as loopback processes, tools/localkeda.py) and the node's HPA controller scale
the worker Deployment Barge generated from 0 to more than one running replica, never above the quota cap Barge
computed; the quota lowered mid-run lowers the cap and the replicas follow; the backlog drains with no 429 from the
provider (an emulator Pod enforcing the pool's quota counts them), and the worker goes back to 0 after its cooldown.

Real parts only: the chart's operator Pod generates the ConfigMap, Deployment and ScaledObject; the worker Pods are
the kubelet's, on the host's network (operator.podHostNetwork), writing results to a volume the admin gave them
(operator.workerVolumes); every replica count is the Deployment's own, watched.
"""

from __future__ import annotations

import json
import os
import subprocess
import threading
import time
from collections.abc import Iterator
from typing import Any, cast

import pytest
import redis
import yaml
from tools import localcluster, localkeda

from tests.conftest import REPO
from tests.node.conftest import (
    OPERATOR_NAMESPACE,
    apply,
    chart_values,
    credential,
    emulator_pod,
    emulator_state,
    file_policy,
    free_port,
    get_json,
    helm,
    pod_ready,
    tenant_namespace,
    wait_for,
)

pytestmark = pytest.mark.tools("keda", "node")

NS = "ingest"
POOL = "mini"
WORKER = "docs"
DEPLOYMENT = f"{POOL}-{WORKER}-worker"
STREAM = "docs-in"
RPM = 300  # the provider's quota, and the pool's: 300 / 60 per replica = a cap of 5
LOWER_RPM = 180  # mid-run: a cap of 3
BACKLOG = 240
QUIET_EVENTS = {"Scheduled", "Pulled", "Created", "Started", "Killing", "MissingClusterDNS"}
"""Every worker Pod has these here; the rest (Evicted, BackOff, OOMKilling, FailedKillPod ...) is printed."""


def _pool(emulator_port: int, redis_address: str, data: str, rpm: int) -> dict[str, Any]:
    return {
        "apiVersion": "barge.dev/v1alpha1",
        "kind": "InferencePool",
        "metadata": {"name": POOL, "namespace": NS},
        "spec": {
            "model": "gpt-4o-mini",
            "provider": {
                "type": "openai",
                "model": "gpt-4o-mini",
                "secretRef": {"name": "openai", "key": "api-key"},
                "baseURL": f"http://127.0.0.1:{emulator_port}/v1",
            },
            "quota": {"requestsPerMinute": rpm},
            "workers": [
                {
                    "name": WORKER,
                    "queue": {"type": "redis-streams", "address": redis_address, "stream": STREAM},
                    "request": {"system": "Summarise.", "maxTokens": 16},
                    "requestsPerMinutePerReplica": 60,
                    "targetBacklogPerReplica": 5,
                    "maxReplicas": 10,
                    "pollingIntervalSeconds": 2,
                    "cooldownSeconds": 20,
                    "output": {"url": f"file://{data}/results/"},
                }
            ],
        },
    }


class Replicas:
    """Every value the worker Deployment's spec.replicas takes, from a watch (not sampled)."""

    def __init__(self, node: localcluster.Cluster) -> None:
        self.seen: list[int] = []
        self._watch = subprocess.Popen(
            [str(node.kubectl), "-n", NS, "get", "deployment", DEPLOYMENT, "--watch", "-o",
             "jsonpath={.spec.replicas}{'\\n'}"],
            env=node.env(), stdout=subprocess.PIPE, text=True,
        )  # fmt: skip
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self._watch.stdout is not None
        for line in self._watch.stdout:
            if line.strip():
                self.seen.append(int(line))

    @property
    def now(self) -> int:
        return self.seen[-1] if self.seen else -1

    def stop(self) -> None:
        self._watch.terminate()
        self._watch.wait(10)


class WorkerLogs:
    """The log of every worker Pod that ever ran (KEDA deletes them when it scales down), followed as they start."""

    def __init__(self, node: localcluster.Cluster) -> None:
        self.node = node
        self.followed: dict[str, subprocess.Popen[str]] = {}
        self.stopping = threading.Event()
        threading.Thread(target=self._loop, daemon=True).start()

    def _loop(self) -> None:
        while not self.stopping.wait(1):
            for pod in _running_workers(self.node):
                name = pod["metadata"]["name"]
                if name not in self.followed:
                    self.followed[name] = subprocess.Popen(
                        [str(self.node.kubectl), "-n", NS, "logs", "-f", name],
                        env=self.node.env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                    )  # fmt: skip

    def stop(self) -> dict[str, str]:
        self.stopping.set()
        out = {}
        for name, proc in self.followed.items():
            proc.terminate()
            out[name] = proc.communicate(timeout=10)[0]
        return out


def _running_workers(node: localcluster.Cluster) -> list[dict[str, Any]]:
    pods = get_json(node, "-n", NS, "pods", "-l", f"barge.dev/pool={POOL},barge.dev/worker={WORKER}")["items"]
    return [p for p in pods if p["status"].get("phase") == "Running" and pod_ready(p)]


@pytest.fixture(scope="module")
def keda(node: localcluster.Cluster) -> Iterator[dict[str, object]]:
    started = time.monotonic()
    state = localkeda.start(node.dir)
    print(f"KEDA's APIService Available {time.monotonic() - started:.1f}s after start")
    yield state
    localkeda.stop(node.dir)


@pytest.fixture(scope="module")
def operator(
    node: localcluster.Cluster, keda: dict[str, object], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, Any]]:
    data = tmp_path_factory.mktemp("worker-data")
    os.chown(data, 10001, 10001)
    emulator_port = free_port()
    profile = {"sync": {"latencyMs": 100, "quota": {"requestsPerMinute": RPM}}}
    apply(
        node,
        tenant_namespace(NS, "ingest-team"),
        credential(NS, "openai"),
        *emulator_pod("provider", NS, emulator_port, yaml.safe_dump(profile)),
    )
    policy = file_policy(data)
    volume = {"name": "results", "hostPath": {"path": str(data), "type": "Directory"}}
    values = chart_values(
        node,
        free_port(),
        ledger={"sqlite": {"ephemeral": True}},
        operator={
            "pollSeconds": 2,
            "policy": yaml.safe_dump(policy),
            "podHostNetwork": True,
            "workerVolumes": [volume],
            "workerVolumeMounts": [{"name": "results", "mountPath": str(data)}],
        },
    )
    values_file = data.parent / "worker-values.yaml"
    values_file.write_text(yaml.safe_dump(values))
    helm(node, "upgrade", "--install", "barge", str(REPO / "charts" / "barge"), "-n", OPERATOR_NAMESPACE,
         "--create-namespace", "-f", str(values_file), "--wait", "--timeout", "5m")  # fmt: skip
    wait_for("the provider emulator Ready", lambda: pod_ready(get_json(node, "-n", NS, "pod", "provider")))
    yield {"data": data, "emulator_port": emulator_port}
    # the pool first, while the operator can still remove its finalizer
    node.run_kubectl("delete", "namespace", NS, "--wait=true", "--timeout=120s", check=False)
    helm(node, "uninstall", "barge", "-n", OPERATOR_NAMESPACE, "--wait", "--timeout", "3m")


def test_keda_scales_barges_worker_pods_to_the_quota_cap_and_back_to_zero(
    node: localcluster.Cluster, operator: dict[str, Any], redis_url: str
) -> None:
    r = redis.Redis.from_url(redis_url)
    r.delete(STREAM)
    r.xgroup_create(STREAM, "barge", id="$", mkstream=True)  # the producer's side: the group KEDA measures
    address = redis_url.removeprefix("redis://").split("/")[0]
    data = str(operator["data"])
    apply(node, _pool(operator["emulator_port"], address, data, RPM))
    status = wait_for(
        "the pool's worker status",
        lambda: (s := get_json(node, "-n", NS, "inferencepool", POOL).get("status") or {}).get("workers") and s,
    )
    assert status["workers"][0]["effectiveMaxReplicas"] == 5
    wait_for("Barge's ScaledObject Ready", lambda: any(
        c["type"] == "Ready" and c["status"] == "True"
        for c in get_json(node, "-n", NS, "scaledobject", DEPLOYMENT).get("status", {}).get("conditions", [])
    ), 120)  # fmt: skip
    replicas = Replicas(node)
    logs = WorkerLogs(node)
    try:
        wait_for("no backlog: 0 replicas", lambda: replicas.now == 0, 120)
        queued = time.monotonic()
        for i in range(BACKLOG):
            r.xadd(STREAM, {"body": json.dumps({"correlationId": f"d{i}", "payload": {"text": f"document {i}"}})})
        wait_for("KEDA's first replica", lambda: replicas.now >= 1, 120, 0.5)
        first = time.monotonic() - queued
        running = wait_for("5 running worker Pods", lambda: len(p := _running_workers(node)) == 5 and p, 240)
        at_cap = time.monotonic() - queued
        print(f"backlog {BACKLOG}: 1st replica after {first:.1f}s, 5 running Pods after {at_cap:.1f}s")
        time.sleep(10)  # two more HPA syncs at the capped demand (lag / 5 > 10 wanted): still no replica above 5
        assert max(replicas.seen) == 5, replicas.seen
        hpa = get_json(node, "-n", NS, "hpa", f"keda-hpa-{DEPLOYMENT}")
        assert hpa["spec"]["maxReplicas"] == 5
        # each replica a consumer of its own (its pod's name, not the node's hostname), on a port of its own
        assert len({p["metadata"]["name"] for p in running}) == 5
        lag = cast(Any, r.xinfo_groups(STREAM))[0]["lag"]
        assert lag > 0, "drained before the quota was lowered: the test proves nothing about the lower cap"

        apply(node, _pool(operator["emulator_port"], address, data, LOWER_RPM))  # the quota lowered mid-run
        wait_for("the replicas down to the new cap", lambda: replicas.now == 3, 120, 0.5)
        mark = len(replicas.seen)
        status = get_json(node, "-n", NS, "inferencepool", POOL)["status"]
        assert status["workers"][0]["effectiveMaxReplicas"] == 3
        assert get_json(node, "-n", NS, "hpa", f"keda-hpa-{DEPLOYMENT}")["spec"]["maxReplicas"] == 3
        wait_for("3 running worker Pods", lambda: len(_running_workers(node)) == 3, 120)

        wait_for("the backlog drained", lambda: cast(Any, r.xinfo_groups(STREAM))[0]["lag"] == 0, 300, 2)
        wait_for("every message acknowledged", lambda: cast(Any, r.xinfo_groups(STREAM))[0]["pending"] == 0, 120, 2)
        drained = time.monotonic() - queued
        assert max(replicas.seen[mark:], default=3) <= 3, replicas.seen
        wait_for("back to 0 replicas after the cooldown", lambda: replicas.now == 0, 180, 1)
        print(f"drained {drained:.0f}s after queueing; replicas seen {replicas.seen}; back to 0 "
              f"{time.monotonic() - queued - drained:.0f}s after the drain")  # fmt: skip
    finally:
        replicas.stop()
        texts = logs.stop()
        noteworthy = [
            f"{pod}: {line}"
            for pod, text in texts.items()
            for line in text.splitlines()
            if " INFO " not in line or "Retrying" in line
        ]
        print(f"{len(texts)} worker Pods ran; their warnings and errors: {noteworthy}")
        # how each worker Pod ended (a kill past the grace period or an eviction is what loses an in-flight call)
        events = [
            f"{e['reason']} {e['involvedObject']['name']}: {e.get('message', '')}"
            for e in get_json(node, "-n", NS, "events")["items"]
            if e["involvedObject"]["kind"] == "Pod"
            and e["involvedObject"]["name"].startswith(DEPLOYMENT)
            and e["reason"] not in QUIET_EVENTS
        ]
        print(f"worker Pod events: {events}")
        print(f"dead letters: {[fields for _, fields in cast(Any, r.xrange(f'{STREAM}:dead'))]}")
    state = emulator_state(operator["emulator_port"])
    assert state["rate_limited"] == 0  # not one 429 from the provider: the cap and each replica's share held
    # Every message paid once: on four runs 1 in 240 was paid twice (241 calls), a redelivery of a paid call
    # (workers/calls.py keeps the call record that now stops it).
    print(f"provider calls {state['sync_requests']} for {BACKLOG} messages")
    assert state["sync_requests"] == BACKLOG
    results = sorted((operator["data"] / "results" / "ingest-team").glob("*.json"))
    assert len(results) == BACKLOG  # with 240 calls: no item answered twice
    assert not r.keys(f"{STREAM}:barge:call:*"), "every call record removed once its answer was saved"
    consumers = {c["name"].decode() for c in cast(Any, r.xinfo_consumers(STREAM, "barge"))}
    assert len(consumers) >= 5, consumers  # one per replica that ran
    assert not r.exists(f"{STREAM}:dead")
    assert 1 < max(replicas.seen) <= 5
