"""type bedrock end to end: `barge operator` on a local control plane of this module's own, a job through Amazon
Bedrock batch inference with the real boto3 against `barge emulator`'s /bedrock endpoints, the records and results
in moto's S3 server; the operator SIGKILLed by the after-create failpoint (Bedrock created the model invocation job,
the ledger never recorded it), restarted: the orphan adopted by its name, one job per shard, every item once, the
job Succeeded. The Secret holds the JSON a bedrock job's Secret holds (keys, region, roleArn, S3 prefixes)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from tools.localcluster import Cluster

from barge.emulator import bedrock_api
from barge.emulator.server import EmulatorThread
from tests.conftest import state
from tests.contract.bedrock_case import ROLE, s3_endpoint
from tests.contract.bedrock_case import secret as bedrock_secret
from tests.e2e.conftest import Operator, credential_secret, own_control_plane, wait_for
from tests.e2e.crash import crash_then_restart, ended_status, start
from tests.e2e.test_operator import apply, assert_one_batch_per_shard, job_manifest, phase_is, status

pytestmark = pytest.mark.cluster

MODEL = "anthropic.claude-haiku-4-5-20251001-v1:0"


@pytest.fixture(scope="module")
def own_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with own_control_plane(tmp_path_factory.mktemp("bedrock") / "cluster") as cluster:
        yield cluster


def test_kill_9_between_create_and_record_then_restart_keeps_one_job_per_shard(
    own_cluster: Cluster,
    tmp_path: Path,
    start_emulator: Callable[..., EmulatorThread],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(bedrock_api.S3_ENV, s3_endpoint())  # the emulator (this process) reads and writes moto's S3
    emu = start_emulator({"batch": {"processingSeconds": 3}})  # Bedrock's default minimum: 100 records per job
    namespace = "crash-bedrock"
    own_cluster.run_kubectl("create", "namespace", namespace)
    credential_secret(
        own_cluster, namespace, "bedrock", {"bedrock.json": bedrock_secret(prefix=namespace, min_records=100)}
    )
    doc = yaml.safe_load(job_manifest("crashy", emu.url + "/bedrock", tmp_path, n=800))
    doc["spec"]["provider"].update(
        {"type": "bedrock", "model": MODEL, "secretRef": {"name": "bedrock", "key": "bedrock.json"}}
    )
    op = Operator(own_cluster, tmp_path, "http://127.0.0.1:9/v1")
    # the Secret's S3 prefixes are storage: admitted only under the tenant's storage prefixes
    op.policy_sections = {"storage": {"prefixes": [f"file://{op.workdir}/", f"s3://barge-bedrock/{namespace}/"]}}
    crash_then_restart(own_cluster, op, emu, namespace, doc)
    assert_one_batch_per_shard(emu, items=800, shards=4)  # shards of 200 (BARGE_MAX_SHARD_REQUESTS)
    st = ended_status(own_cluster, namespace, "crashy", 800)
    assert st["counts"]["invalid"] == 0


def test_a_role_the_admin_does_not_list_for_the_tenant_is_refused_at_admission(
    own_cluster: Cluster,
    tmp_path: Path,
    start_emulator: Callable[..., EmulatorThread],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The admin's bedrock.roles (barge/bedrock_policy.py): a job whose Secret names a role the admin lists for
    another tenant only stays Admitted=False ProviderPolicy, naming the role, and nothing of it reaches Bedrock; the
    tenant the role is listed for runs the same job to Succeeded on the same operator."""
    monkeypatch.setenv(bedrock_api.S3_ENV, s3_endpoint())
    monkeypatch.setenv(bedrock_api.MIN_RECORDS_ENV, "1")
    emu = start_emulator({"batch": {"processingSeconds": 2}})
    op = Operator(own_cluster, tmp_path, "http://127.0.0.1:9/v1")
    ours, theirs = "roles-ours", "roles-theirs"
    op.policy_sections = {
        "storage": {"prefixes": [f"file://{op.workdir}/", "s3://barge-bedrock/{namespace}/"]},
        "bedrock": {"roles": {ours: [ROLE], "other-team": ["arn:aws:iam::123456789012:role/other-batch"]}},
    }
    for namespace in (ours, theirs):
        own_cluster.run_kubectl("create", "namespace", namespace)
        credential_secret(own_cluster, namespace, "bedrock", {"bedrock.json": bedrock_secret(prefix=namespace)})
        doc = yaml.safe_load(job_manifest(f"roled-{namespace}", emu.url + "/bedrock", tmp_path, n=5))
        doc["metadata"]["name"] = "roled"
        doc["spec"]["provider"].update(
            {"type": "bedrock", "model": MODEL, "secretRef": {"name": "bedrock", "key": "bedrock.json"}}
        )
        apply(own_cluster, namespace, yaml.safe_dump(doc))
    start(op)

    def refused() -> dict[str, Any] | None:
        found = status(own_cluster, theirs, "roled").get("conditions", [])
        return next((c for c in found if c["type"] == "Admitted" and c["status"] == "False"), None)

    try:
        wait_for(lambda: refused() is not None, 120, "Admitted=False for the tenant the role is not listed for")
        wait_for(phase_is(own_cluster, ours, "roled", "Succeeded"), 180, "the listed tenant's job Succeeded")
    finally:
        op.stop()
    condition = refused()
    assert condition is not None
    assert condition["reason"] == "ProviderPolicy", condition
    assert ROLE in condition["message"]
    assert f"allows tenant {theirs!r}" in condition["message"]
    assert len(state(emu)["batches"]) == 1  # the listed tenant's one job; none of the refused one's
    assert status(own_cluster, theirs, "roled").get("batches", []) == []
