"""The new provider types end to end: `barge operator` on a local control plane of this module's own, a job through
type openai-compatible (Together's shape) and type mistral against the emulator, the operator SIGKILLed by the
after-create failpoint (the provider created the batch, the ledger never recorded it), restarted: one provider
batch per shard, every item once, the job Succeeded."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import yaml
from tools.localcluster import Cluster

from barge.emulator.server import EmulatorThread
from tests.e2e.conftest import Operator, own_control_plane
from tests.e2e.crash import crash_then_restart, ended_status
from tests.e2e.test_operator import assert_one_batch_per_shard, job_manifest, secret

pytestmark = pytest.mark.cluster

TYPES = {"openai-compatible": ("/together/v1", "llama-3.1-8b-instant"), "mistral": ("/mistral", "mistral-small-latest")}


@pytest.fixture(scope="module")
def own_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with own_control_plane(tmp_path_factory.mktemp("providers") / "cluster") as cluster:
        yield cluster


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
    op = Operator(own_cluster, tmp_path, "http://127.0.0.1:9/v1")
    crash_then_restart(own_cluster, op, emu, namespace, doc)
    assert_one_batch_per_shard(emu, items=800, shards=4)  # shards of 200 (BARGE_MAX_SHARD_REQUESTS)
    ended_status(own_cluster, namespace, "crashy", 800)
