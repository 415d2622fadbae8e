"""The new provider types end to end: `barge operator` on a local control plane of this module's own, a job through
type openai-compatible (Together's shape) and type mistral against the emulator, the operator SIGKILLed by the
after-create failpoint (the provider created the batch, the ledger never recorded it), restarted: one provider
batch per shard, every item once, the job Succeeded."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import yaml
from tools.localcluster import Cluster

from barge.emulator.server import EmulatorThread
from tests.conftest import state
from tests.e2e.conftest import Operator, own_control_plane, wait_for
from tests.e2e.test_operator import apply, assert_one_batch_per_shard, job_manifest, phase_is, secret, status

pytestmark = pytest.mark.cluster

TYPES = {"openai-compatible": ("/together/v1", "llama-3.1-8b-instant"), "mistral": ("/mistral", "mistral-small-latest")}


@pytest.fixture(scope="module")
def own_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with own_control_plane(tmp_path_factory.mktemp("providers") / "cluster") as cluster:
        yield cluster


def start(op: Operator) -> None:
    """Start the operator, giving it 120 s (not Operator.start's 30) to answer /healthz: on a loaded machine a fresh
    process's imports alone took longer."""
    with contextlib.suppress(TimeoutError):
        op.start()
    wait_for(op.healthy, 120, "operator /healthz")


@pytest.mark.parametrize("kind", sorted(TYPES))
def test_kill_9_between_create_and_record_then_restart_keeps_one_batch_per_shard(
    own_cluster: Cluster, tmp_path: Path, start_emulator: Callable[..., EmulatorThread], kind: str
) -> None:
    path, model = TYPES[kind]
    emu = start_emulator({"batch": {"processingSeconds": 3}})
    namespace = f"crash-{kind}"
    own_cluster.run_kubectl("create", "namespace", namespace)
    secret(own_cluster, namespace)
    doc = yaml.safe_load(job_manifest("crashy", emu.url + path, tmp_path, n=800))
    doc["spec"]["provider"].update({"type": kind, "model": model})
    op = Operator(own_cluster, tmp_path, "http://127.0.0.1:9/v1", env={"BARGE_FAILPOINT": "after-create"})
    start(op)
    try:
        apply(own_cluster, namespace, yaml.safe_dump(doc))
        assert op.proc is not None
        wait_for(lambda: op.proc is not None and op.proc.poll() is not None, 60, "the failpoint's kill -9")
        assert op.proc.returncode == -9, op.output()[-2000:]
        assert len(state(emu)["batches"]) == 1, "created at the provider, not recorded: the orphan"
        op.extra_env.pop("BARGE_FAILPOINT")
        start(op)
        wait_for(phase_is(own_cluster, namespace, "crashy", "Succeeded"), 180, "Succeeded after the restart")
    finally:
        op.stop()
    assert_one_batch_per_shard(emu, items=800, shards=4)  # shards of 200 (BARGE_MAX_SHARD_REQUESTS)
    st = status(own_cluster, namespace, "crashy")
    assert st["counts"]["succeeded"] + st["counts"]["refused"] + st["counts"]["invalid"] + st["counts"]["failed"] == 800
