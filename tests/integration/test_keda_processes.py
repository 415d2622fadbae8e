"""KEDA v2.21.0 (built from its Go module) run by tools/localkeda.py as loopback processes, with the real HPA
controller and a real redis-server: a Redis Streams backlog scales a Deployment from 0 to KEDA's maxReplicaCount
and never above it, and back to 0 once drained. No node: the Pods stay Pending; what is asserted is the
Deployment's spec.replicas, which KEDA (0 <-> 1) and the HPA controller (1 <-> N) set."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, cast

import pytest
import redis
from tools import localcluster, localkeda

from barge.api.pool import InferencePool
from barge.k8s import workers

pytestmark = [pytest.mark.cluster, pytest.mark.tools("keda")]  # KEDA is built before the timeout starts


def _start_hpa_controller(cluster: localcluster.Cluster) -> subprocess.Popen[bytes]:
    """A second kube-controller-manager running only the HPA controller (flags as localcluster's otherwise)."""
    pki = cluster.dir / "pki"
    port = localcluster._free_port()
    log = (cluster.dir / "kube-controller-manager-hpa.log").open("ab")
    proc = subprocess.Popen(
        [
            str(localcluster.binaries()["kube-controller-manager"]),
            f"--kubeconfig={cluster.kubeconfig}",
            "--controllers=horizontal-pod-autoscaler-controller",
            "--horizontal-pod-autoscaler-sync-period=5s",
            "--leader-elect=false",
            f"--service-account-private-key-file={pki / 'sa.key'}",
            f"--root-ca-file={pki / 'apiserver.crt'}",
            "--bind-address=127.0.0.1",
            f"--secure-port={port}",
            f"--cert-dir={pki / 'controller-manager-hpa'}",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    deadline = time.monotonic() + 60
    while not localcluster._healthy(f"https://127.0.0.1:{port}", "", "/healthz"):
        if proc.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"HPA controller did not start; see {log.name}")
        time.sleep(0.25)
    return proc


@pytest.fixture(scope="module")
def keda() -> Iterator[tuple[localcluster.Cluster, dict[str, Any]]]:
    with tempfile.TemporaryDirectory(prefix="barge-keda-") as tmp:
        flags = localkeda.front_proxy_flags(Path(tmp) / "front-proxy")
        cluster = localcluster.up(Path(tmp) / "cluster", controllers=True, apiserver_args=flags)
        hpa: subprocess.Popen[bytes] | None = None
        try:
            hpa = _start_hpa_controller(cluster)
            state = localkeda.start(cluster.dir)
            yield cluster, state
        finally:
            localkeda.stop(cluster.dir)
            if hpa is not None:
                with contextlib.suppress(OSError):
                    os.killpg(hpa.pid, signal.SIGTERM)
                hpa.wait(10)
            localcluster.down(cluster.dir)


def _until(predicate: Callable[[], Any], timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while not (value := predicate()):
        if time.monotonic() > deadline:
            raise TimeoutError(what)
        time.sleep(1)
    return value


def _rss_mib(pid: int) -> float:
    status = Path(f"/proc/{pid}/status").read_text()
    return int(re.search(r"VmRSS:\s+(\d+) kB", status).group(1)) / 1024  # type: ignore[union-attr]


def _scale_cycle(
    cluster: localcluster.Cluster,
    ns: str,
    objects: list[dict[str, Any]],
    r: redis.Redis,
    stream: str,
    group: str,
    max_replicas: int,
    backlog: int,
    lowered: tuple[dict[str, Any], int] | None = None,
) -> list[int]:
    """Apply the Deployment and its ScaledObject, queue `backlog` messages, see spec.replicas reach max_replicas
    and stay there, drain the stream, see it go back to 0; every value spec.replicas took (from a watch)."""
    name = objects[0]["metadata"]["name"]
    so = objects[1]["metadata"]["name"]
    cluster.run_kubectl("apply", "-f", "-", input=json.dumps({"kind": "List", "apiVersion": "v1", "items": objects}))

    conds: list[dict[str, Any]] = []

    def so_ready() -> bool:
        out = cluster.run_kubectl("-n", ns, "get", "scaledobject", so, "-o", "json")
        conds[:] = json.loads(out.stdout).get("status", {}).get("conditions", [])
        return any(c["type"] == "Ready" and c["status"] == "True" for c in conds)

    try:
        _until(so_ready, 60, "ScaledObject never Ready")
    except TimeoutError:
        raise TimeoutError(f"ScaledObject never Ready: {conds}") from None
    # Every value spec.replicas takes, from a watch (not sampled): it may never exceed maxReplicaCount.
    seen: list[int] = []
    watch = subprocess.Popen(
        [str(cluster.kubectl), "-n", ns, "get", "deployment", name, "--watch", "-o",
         "jsonpath={.spec.replicas}{'\\n'}"],
        env=cluster.env(), stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert watch.stdout is not None
    lines = watch.stdout

    def read() -> None:
        for value in lines:
            if value.strip():
                seen.append(int(value))

    threading.Thread(target=read, daemon=True).start()
    try:
        _until(lambda: seen and seen[-1] == 0, 60, f"no backlog, yet not at 0 replicas: {seen}")
        for i in range(backlog):
            r.xadd(stream, {"n": str(i)})
        _until(lambda: max(seen) >= max_replicas, 120, f"never scaled to {max_replicas}: {seen}")
        time.sleep(15)  # three more HPA syncs at the capped demand: still no replica above the cap
        assert max(seen) == max_replicas, seen
        hpa = json.loads(cluster.run_kubectl("-n", ns, "get", "hpa", f"keda-hpa-{so}", "-o", "json").stdout)
        assert hpa["spec"]["maxReplicas"] == max_replicas
        assert hpa["status"]["desiredReplicas"] == max_replicas
        if lowered is not None:  # a lower cap mid-run (the ScaledObject re-applied): the HPA and replicas follow
            scaled_object, max_replicas = lowered
            cluster.run_kubectl("apply", "-f", "-", input=json.dumps(scaled_object))
            _until(lambda: seen[-1] == max_replicas, 60, f"never followed the cap down to {max_replicas}: {seen}")
            mark = len(seen)
            time.sleep(15)
            assert max(seen[mark - 1 :]) == max_replicas, seen
            hpa = json.loads(cluster.run_kubectl("-n", ns, "get", "hpa", f"keda-hpa-{so}", "-o", "json").stdout)
            assert hpa["spec"]["maxReplicas"] == max_replicas

        # Drain: read and acknowledge everything; the group's lag drops to 0, KEDA scales to 0 after the cooldown.
        while batch := cast(Any, r.xreadgroup(group, "c1", {stream: ">"}, count=100)):
            r.xack(stream, group, *[mid for _, entries in batch for mid, _ in entries])
        assert cast(Any, r.xinfo_groups(stream))[0]["lag"] == 0
        _until(lambda: seen[-1] == 0, 180, f"never scaled back to 0: {seen}")
        print(f"\nspec.replicas seen: {seen}")
        return seen
    finally:
        watch.terminate()
        watch.wait(10)


def test_every_keda_port_listens_on_loopback_only(keda: tuple[localcluster.Cluster, dict[str, Any]]) -> None:
    _, state = keda
    pids = {int(p) for p in state["pids"]}
    listening = subprocess.run(["ss", "-ltnpH"], capture_output=True, text=True, check=True).stdout.splitlines()
    ours = [line for line in listening if any(f"pid={pid}," in line for pid in pids)]
    addresses = {line.split()[3] for line in ours}
    assert addresses, listening
    assert all(a.startswith("127.0.0.1:") for a in addresses), ours
    # every port KEDA was given is one of them (the adapter's /metrics too, which upstream binds as ":<port>")
    assert {f"127.0.0.1:{p}" for p in state["ports"].values()} <= addresses, ours
    rss = ", ".join(f"{name} {_rss_mib(pid):.0f} MiB" for name, pid in state["processes"].items())
    print(f"\nKEDA resident memory: {rss}")


def test_redis_streams_backlog_scales_0_to_max_and_back_to_0(
    keda: tuple[localcluster.Cluster, dict[str, Any]], redis_url: str
) -> None:
    cluster, _ = keda
    ns = f"keda-{os.urandom(3).hex()}"
    cluster.run_kubectl("create", "namespace", ns)
    stream, group, max_replicas = f"s-{ns}", "workers", 3
    r = redis.Redis.from_url(redis_url)
    r.xgroup_create(stream, group, id="$", mkstream=True)
    labels = {"app": "worker"}
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "worker", "namespace": ns},
        "spec": {
            "replicas": 0,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {"containers": [{"name": "w", "image": "registry.invalid/none:0"}]},
            },
        },
    }
    address = redis_url.removeprefix("redis://").split("/")[0]
    scaled_object = {
        "apiVersion": "keda.sh/v1alpha1",
        "kind": "ScaledObject",
        "metadata": {"name": "worker", "namespace": ns},
        "spec": {
            "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "worker"},
            "minReplicaCount": 0,
            "maxReplicaCount": max_replicas,
            "pollingInterval": 1,
            "cooldownPeriod": 5,
            "triggers": [
                {
                    "type": "redis-streams",
                    "metadata": {"address": address, "stream": stream, "consumerGroup": group, "lagCount": "5"},
                }
            ],
        },
    }
    try:  # lag 40 / 5 per replica = 8 replicas wanted; maxReplicaCount caps the HPA at 3
        seen = _scale_cycle(cluster, ns, [deployment, scaled_object], r, stream, group, max_replicas, 40)
    finally:
        cluster.run_kubectl("delete", "namespace", ns, "--wait=false", check=False)
    assert 1 < max(seen) <= max_replicas


def test_barges_own_worker_scaled_object_scales_to_its_quota_cap(
    keda: tuple[localcluster.Cluster, dict[str, Any]], redis_url: str
) -> None:
    """The Deployment and ScaledObject Barge generates for a provider pool's redis-streams worker (build_*), with
    a quota that caps it at 3 of its 10 maxReplicas. Changed for the test only: no ownerReferences (no pool object
    here, the garbage collector would delete orphans) and a 1 s polling interval / 5 s cooldown instead of 15/120."""
    cluster, _ = keda
    ns = f"keda-{os.urandom(3).hex()}"
    cluster.run_kubectl("create", "namespace", ns)
    address = redis_url.removeprefix("redis://").split("/")[0]
    pool = InferencePool.model_validate(
        {
            "metadata": {"name": "p", "namespace": ns, "uid": "u"},
            "spec": {
                "model": "m",
                "provider": {"type": "openai", "model": "gpt-4o-mini", "secretRef": {"name": "k"}},
                "quota": {"tokensPerMinute": 0, "requestsPerMinute": 180},
                "workers": [
                    {
                        "name": "w",
                        "queue": {"type": "redis-streams", "address": address, "stream": f"s-{ns}"},
                        "output": {"url": "s3://b/o/"},
                        "requestsPerMinutePerReplica": 60,
                        "targetBacklogPerReplica": 5,
                        "maxReplicas": 10,
                    }
                ],
            },
        }
    )
    worker = pool.spec.workers[0]
    cap = workers.quota_caps(pool)["w"]
    assert cap.effective_max == 3  # 180 RPM / 60 per replica
    deployment = workers.build_worker_deployment(pool, worker, "registry.invalid/barge:0")
    scaled_object = workers.build_worker_scaled_object(pool, worker, cap)
    for obj in (deployment, scaled_object):
        obj["metadata"].pop("ownerReferences", None)
    scaled_object["spec"].update(pollingInterval=1, cooldownPeriod=5)
    # KEDA resolves the env of the target's containers (for triggers' fromEnv): without the provider's Secret that
    # BARGE_API_KEY references, the ScaledObject is never Ready ("error resolving secret name").
    ref = pool.spec.provider.secret_ref  # type: ignore[union-attr]
    cluster.run_kubectl("-n", ns, "create", "secret", "generic", ref.name, f"--from-literal={ref.key}=unused")
    r = redis.Redis.from_url(redis_url)
    r.xgroup_create(f"s-{ns}", worker.queue.consumer_group, id="$", mkstream=True)
    # The quota lowered to 120 RPM: Barge's new cap is 2, and so is the ScaledObject it generates.
    lower = pool.model_copy(update={"spec": pool.spec.model_copy(update={"quota": pool.spec.quota.model_copy(
        update={"requests_per_minute": 120})})})  # fmt: skip
    lower_cap = workers.quota_caps(lower)["w"]
    assert lower_cap.effective_max == 2
    lowered = workers.build_worker_scaled_object(lower, worker, lower_cap)
    lowered["metadata"].pop("ownerReferences", None)
    lowered["spec"].update(pollingInterval=1, cooldownPeriod=5)
    group = worker.queue.consumer_group
    try:  # lag 60 / 5 = 12 wanted, of 10 maxReplicas; the quota caps it at 3, then at 2
        seen = _scale_cycle(
            cluster, ns, [deployment, scaled_object], r, f"s-{ns}", group, 3, 60, (lowered, lower_cap.effective_max)
        )
    finally:
        cluster.run_kubectl("delete", "namespace", ns, "--wait=false", check=False)
    assert 1 < max(seen) <= cap.effective_max
