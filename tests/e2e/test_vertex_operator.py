"""type vertex end to end: `barge operator` on a local control plane of this module's own, jobs through Vertex AI
batch prediction with the real google-genai and anthropic SDKs against `barge emulator`'s /vertex endpoints, the
input and output objects in a real GCS JSON API server (gcp-storage-emulator, tests/contract/vertex_case.py), the
service account's tokens from the emulator's token endpoint. For a Claude model and for a Gemini model: the
operator SIGKILLed by the after-create failpoint (Vertex created the batch prediction job, the ledger never recorded
it; Vertex has no idempotency key), restarted: the orphan adopted by its display name, one job per shard, every item
once, the job Succeeded with its cost. The Secret holds the JSON a vertex job's Secret holds."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from decimal import Decimal
from pathlib import Path

import pytest
import yaml
from tools.localcluster import Cluster

from barge.emulator import vertex_api
from barge.emulator.server import EmulatorThread
from tests.contract.vertex_case import BUCKET, gcs_endpoint
from tests.contract.vertex_case import secret as vertex_secret
from tests.e2e.conftest import Operator, credential_secret, own_control_plane
from tests.e2e.crash import crash_then_restart, ended_status
from tests.e2e.test_operator import assert_one_batch_per_shard, job_manifest

pytestmark = pytest.mark.cluster


@pytest.fixture(scope="module")
def own_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with own_control_plane(tmp_path_factory.mktemp("vertex") / "cluster") as cluster:
        yield cluster


@pytest.mark.parametrize("model", ["claude-haiku-4-5", "gemini-2.5-flash"])
def test_kill_9_between_create_and_record_then_restart_keeps_one_job_per_shard(
    own_cluster: Cluster,
    tmp_path: Path,
    start_emulator: Callable[..., EmulatorThread],
    monkeypatch: pytest.MonkeyPatch,
    model: str,
) -> None:
    monkeypatch.setenv(vertex_api.GCS_ENV, gcs_endpoint())  # the emulator (this process) reads and writes GCS
    emu = start_emulator({"batch": {"processingSeconds": 3}})
    namespace = f"crash-vertex-{model.split('-')[0]}"
    own_cluster.run_kubectl("create", "namespace", namespace)
    credential_secret(
        own_cluster, namespace, "vertex", {"vertex.json": vertex_secret(f"{emu.url}/vertex/token", prefix=namespace)}
    )
    doc = yaml.safe_load(job_manifest("crashy", emu.url + "/vertex/", tmp_path, n=600))
    doc["spec"]["provider"].update(
        {"type": "vertex", "model": model, "secretRef": {"name": "vertex", "key": "vertex.json"}}
    )
    op = Operator(own_cluster, tmp_path, "http://127.0.0.1:9/v1")
    # the Secret's gcsPrefix is storage: admitted only under the tenant's storage prefixes
    op.policy_sections = {"storage": {"prefixes": [f"file://{op.workdir}/", f"gs://{BUCKET}/{namespace}/"]}}
    created = crash_then_restart(own_cluster, op, emu, namespace, doc)
    assert created[0]["provider"] == "vertex"
    assert_one_batch_per_shard(emu, items=600, shards=3)  # shards of 200 (BARGE_MAX_SHARD_REQUESTS)
    st = ended_status(own_cluster, namespace, "crashy", 600)
    assert st["counts"]["invalid"] == 0
    assert st["counts"]["succeeded"] > 0
    assert Decimal(st["usage"]["costUSD"]) > 0, st["usage"]
    assert Decimal(st["usage"]["savedUSD"]) > 0, "billed at the batch rate: half the list price saved"
