"""HA: two `barge operator` replicas with Kopf peering (`--peering`, priority `auto`) and one PostgreSQL ledger on
the real control plane. The one with the higher priority works, the other pauses; `kill -9` of the worker mid-job
hands the job to the other once the dead peer's keep-alive expires, and the job still ends with one provider batch
per shard. Its own control plane: the package's operator would otherwise act on these jobs too."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from tools.localcluster import Cluster

from barge.emulator.server import EmulatorThread
from tests.conftest import fresh_database, kubectl_json, state
from tests.e2e.conftest import Operator, own_control_plane, wait_for
from tests.e2e.test_operator import apply, assert_one_batch_per_shard, job_manifest, phase_is, secret

pytestmark = pytest.mark.cluster

PEERING = "barge"
LIFETIME = 6  # seconds a keep-alive counts: the takeover delay after a kill -9 (production default: 30)


@pytest.fixture(scope="module")
def ha_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with own_control_plane(tmp_path_factory.mktemp("ha") / "cluster") as cluster:
        # Kopf's peering CRDs are generated into crds/ (and the chart) by `make crds`: installed with Barge's.
        cluster.run_kubectl("wait", "--for=condition=Established", "crd/clusterkopfpeerings.kopf.dev")
        peering = {"apiVersion": "kopf.dev/v1", "kind": "ClusterKopfPeering", "metadata": {"name": PEERING}}
        cluster.run_kubectl("apply", "-f", "-", input=yaml.safe_dump(peering))
        yield cluster


@pytest.fixture
def start_replicas(
    ha_cluster: Cluster, tmp_path: Path, postgres_url: str
) -> Iterator[Callable[[int], dict[str, Operator]]]:
    """Two replicas (`barge-a`, `barge-b`) peered with priority `auto` and this lifetime, on a fresh PostgreSQL
    database they share."""
    started: list[Operator] = []

    def start(lifetime: int) -> dict[str, Operator]:
        ledger_url = fresh_database(postgres_url, "ha")
        ops = {
            pod: Operator(
                ha_cluster,
                tmp_path,
                "http://127.0.0.1:9/v1",
                args=("--all-namespaces", "--peering", PEERING),
                env={
                    "BARGE_LEDGER_URL": ledger_url,
                    "BARGE_PEERING_PRIORITY": "auto",
                    "BARGE_PEERING_LIFETIME": str(lifetime),
                    "POD_ID": pod,  # Kopf's peer identity
                    "POD_NAME": pod,
                },
                name=pod,
            )
            for pod in ("barge-a", "barge-b")
        }
        for op in ops.values():
            started.append(op)
            op.start()
        return ops

    yield start
    for op in started:
        op.stop()


def peers(cluster: Cluster) -> dict[str, dict[str, Any]]:
    """The live records of the peering object: identity -> {priority, lastseen, lifetime}."""
    body = kubectl_json(cluster, "get", "clusterkopfpeering", PEERING)
    return dict(body.get("status") or {})  # type: ignore[call-overload]


def working(op: Operator) -> bool:
    """Kopf starts a peered operator paused and logs each change: it works when it last resumed."""
    out = op.output()
    return out.rfind("Resuming operations") > out.rfind("Pausing operations")


def settle(cluster: Cluster, replicas: dict[str, Operator]) -> tuple[str, str, int]:
    """Both replicas recorded with distinct priorities, only the higher one working: (active, standby, and where
    the standby's log stood then)."""
    both = wait_for(lambda: len(p := peers(cluster)) == 2 and p, 30, "both replicas in the peering object")
    priorities = {pod: int(record["priority"]) for pod, record in both.items()}
    assert len(set(priorities.values())) == 2, f"`auto` gave two replicas one priority: {priorities}"
    active = max(priorities, key=lambda pod: priorities[pod])
    standby = min(priorities, key=lambda pod: priorities[pod])
    wait_for(lambda: working(replicas[active]) and not working(replicas[standby]), 30, "only the higher one works")
    return active, standby, len(replicas[standby].output())


def start_job(cluster: Cluster, ns: str, name: str, emu: EmulatorThread, workdir: Path) -> None:
    """An 800-item job (four shards of 200), started until its first batch is at the provider."""
    cluster.run_kubectl("create", "namespace", ns)
    secret(cluster, ns)
    apply(cluster, ns, job_manifest(name, emu.url, workdir, n=800))
    wait_for(lambda: state(emu)["batches"], 60, "a first batch from the active replica")


def test_standby_takes_over_after_kill_9_with_one_batch_per_shard(
    ha_cluster: Cluster,
    start_replicas: Callable[[int], dict[str, Operator]],
    start_emulator: Callable[..., EmulatorThread],
) -> None:
    cluster, replicas = ha_cluster, start_replicas(LIFETIME)
    active, standby, settled = settle(cluster, replicas)
    emu = start_emulator({"batch": {"processingSeconds": 4}})
    start_job(cluster, "ha", "failover", emu, replicas[active].workdir)
    replicas[active].kill()
    assert "Resuming operations" not in replicas[standby].output()[settled:], "the standby resumed beside the active"
    assert not phase_is(cluster, "ha", "failover", "Succeeded")(), "killed before the job finished: mid-job"

    killed = time.monotonic()
    wait_for(lambda: working(replicas[standby]), 3 * LIFETIME, "the standby to take over")
    print(f"takeover {time.monotonic() - killed:.1f}s after kill -9 (peering lifetime {LIFETIME}s)")
    assert active not in peers(cluster), "the standby removed the dead peer's expired record"
    wait_for(phase_is(cluster, "ha", "failover", "Succeeded"), 120, "Succeeded on the standby")
    assert_one_batch_per_shard(emu, items=800, shards=4)  # shards of 200 (BARGE_MAX_SHARD_REQUESTS)


def test_graceful_stop_hands_over_without_waiting_for_the_lifetime(
    ha_cluster: Cluster,
    start_replicas: Callable[[int], dict[str, Operator]],
    start_emulator: Callable[..., EmulatorThread],
) -> None:
    """A rolling update's SIGTERM: the stopping replica removes its record, so the standby resumes long before
    the record would have expired (the lifetime here is 120 s; the wait below gives up after 60 s)."""
    cluster, replicas = ha_cluster, start_replicas(120)
    active, standby, settled = settle(cluster, replicas)
    emu = start_emulator({"batch": {"processingSeconds": 4}})
    start_job(cluster, "ha-graceful", "handover", emu, replicas[active].workdir)
    assert "Resuming operations" not in replicas[standby].output()[settled:], "the standby resumed beside the active"
    stopping = time.monotonic()
    replicas[active].stop()
    wait_for(lambda: working(replicas[standby]), 60, "the standby to resume after the active said goodbye")
    print(f"graceful handover {time.monotonic() - stopping:.1f}s after SIGTERM (peering lifetime 120s)")
    assert active not in peers(cluster)
    wait_for(phase_is(cluster, "ha-graceful", "handover", "Succeeded"), 120, "Succeeded on the standby")
    assert_one_batch_per_shard(emu, items=800, shards=4)
