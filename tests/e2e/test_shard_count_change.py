"""A changed shard count on the real control plane (docs/how-to/sharding.md): a job started by one operator is
finished by the shard its namespace moves to.

One `barge operator` on a PostgreSQL ledger starts an 800-item job (four shards of 200) until its first batch is
at the provider, and stops (a rolling update's SIGTERM). Two shards start in its place, `BARGE_SHARD=0/2` and
`1/2`, and the job's namespace hashes to shard 1: shard 1 resumes the job from the ledger and it Succeeds with
exactly one provider batch per shard (nothing sent twice across the move), while shard 0, whose finalizer name
is the single operator's, never steps it: it only drops that finalizer (Kopf removes its finalizer from objects
none of its handlers match), and the owner's is the one left. Deleting the job then removes it. Its own control
plane: the package's operator would otherwise act on these jobs too."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from tools.localcluster import Cluster

from barge.emulator.server import EmulatorThread
from tests.conftest import fresh_database, kubectl_json
from tests.e2e.conftest import Operator, own_control_plane, wait_for
from tests.e2e.test_ha import start_job
from tests.e2e.test_operator import assert_one_batch_per_shard, phase_is
from tests.e2e.test_sharded_admission import FINALIZER, namespace_of

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(300)]


@pytest.fixture(scope="module")
def moved_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with own_control_plane(tmp_path_factory.mktemp("moved") / "cluster") as cluster:
        yield cluster


def jobs_gauge(op: Operator) -> str:
    return "\n".join(line for line in op.metrics().splitlines() if line.startswith("barge_jobs{"))


def test_a_job_moved_to_another_shard_by_a_new_shard_count_finishes_once(
    moved_cluster: Cluster, tmp_path: Path, postgres_url: str, start_emulator: Callable[..., EmulatorThread]
) -> None:
    cluster, ledger_url = moved_cluster, fresh_database(postgres_url, "moved")
    ns = namespace_of(1, "moved", count=2)
    emu = start_emulator({"batch": {"processingSeconds": 4}})
    single = Operator(cluster, tmp_path, "http://127.0.0.1:9/v1", env={"BARGE_LEDGER_URL": ledger_url}, name="one")
    shards = [
        Operator(
            cluster, tmp_path, "http://127.0.0.1:9/v1",
            env={"BARGE_LEDGER_URL": ledger_url, "BARGE_SHARD": f"{i}/2"}, name=f"shard-{i}",
        )
        for i in range(2)
    ]  # fmt: skip
    try:
        single.start()
        start_job(cluster, ns, "moved", emu, tmp_path)  # until its first batch is at the provider
        single.stop()
        assert not phase_is(cluster, ns, "moved", "Succeeded")(), "stopped before the job finished: mid-job"
        body = kubectl_json(cluster, "-n", ns, "get", "lbj", "moved")
        assert body["metadata"]["finalizers"] == [FINALIZER]  # the single operator's
        for op in shards:
            op.start()
        wait_for(phase_is(cluster, ns, "moved", "Succeeded", "Failed"), 120, "the job terminal on its new shard")
        assert phase_is(cluster, ns, "moved", "Succeeded")(), kubectl_json(cluster, "-n", ns, "get", "lbj", "moved")
        assert_one_batch_per_shard(emu, items=800, shards=4)  # nothing created twice across the move
        body = kubectl_json(cluster, "-n", ns, "get", "lbj", "moved")
        # its owner added its own finalizer; shard 0, whose finalizer name is the single operator's, dropped that
        # one (Kopf removes its finalizer from an object none of its handlers match)
        assert body["metadata"]["finalizers"] == [f"{FINALIZER}-1"]
        # each shard's barge_jobs lists only the jobs it steps
        assert f'namespace="{ns}",phase="Succeeded",tenant="{ns}"}} 1.0' in jobs_gauge(shards[1])
        assert f'namespace="{ns}"' not in jobs_gauge(shards[0])
        cluster.run_kubectl("-n", ns, "delete", "lbj", "moved", "--wait=false")
        wait_for(
            lambda: cluster.run_kubectl("-n", ns, "get", "lbj", "moved", check=False).returncode != 0,
            30,
            "the job gone: its owner ran the delete handler and released its finalizer",
        )
    finally:
        for op in (single, *shards):
            op.stop()
