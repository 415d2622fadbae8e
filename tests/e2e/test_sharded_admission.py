"""Several active operators on the real control plane: three `barge operator` processes, `BARGE_SHARD=0/3`,
`1/3` and `2/3`, one PostgreSQL ledger, `barge emulator` as Azure (docs/how-to/sharding.md).

Three teams, each in a namespace that hashes to a different shard, each with an InferencePool on the same Azure
Global Batch deployment, listed as shared in the admin's policy with the emulator's `azureEnqueuedTokenLimit` as
its quota. One job per team arrives in one `kubectl apply`; each fits the quota alone, no two fit together. Each
job is stepped by its own shard only (its finalizer is that shard's), and the three shards never admit past the
quota together: the emulator would answer `token_limit_exceeded` to an overflowing batch, which this test counts.
Each shard deciding alone would create the three batches at once. Its own control plane: the package's operator
would otherwise act on these jobs too."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from tools.localcluster import Cluster

from barge.emulator.server import EmulatorThread
from tests.conftest import Factory, fresh_database, kubectl_json, namespace_of_shard, state
from tests.e2e.conftest import Operator, admin_policy, own_control_plane, wait_for
from tests.e2e.test_admission import DEPLOYMENT, LIMIT, job, pool_ready, team

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(300)]
SHARDS = 3
TENANTS = ("acme", "globex", "initech")  # tenant i's namespace is shard i's
FINALIZER = "barge.dev/finalizer"


@pytest.fixture(scope="module")
def shard_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with own_control_plane(tmp_path_factory.mktemp("shards") / "cluster") as cluster:
        yield cluster


def namespace_of(shard: int, tenant: str, count: int = SHARDS) -> str:
    """A fresh namespace name that hashes to `shard` of `count`."""
    return namespace_of_shard(shard, count, f"shard-{tenant}")


@pytest.fixture
def azure(start_emulator: Factory) -> EmulatorThread:
    return start_emulator({"batch": {"processingSeconds": 2, "azureEnqueuedTokenLimit": LIMIT}})


@pytest.fixture
def shards(
    shard_cluster: Cluster, tmp_path: Path, postgres_url: str, azure: EmulatorThread
) -> Iterator[list[Operator]]:
    ledger_url = fresh_database(postgres_url, "shards")
    shared = {"provider": "azure-openai", "baseURL": azure.url, "model": DEPLOYMENT, "enqueuedTokens": LIMIT}
    storage = admin_policy(tmp_path)["storage"]
    storage["tenants"] = {t: [f"file://{tmp_path}/{{tenant}}/"] for t in TENANTS}
    ops = []
    for i in range(SHARDS):
        op = Operator(
            shard_cluster,
            tmp_path,
            "http://127.0.0.1:9/v1",
            env={"BARGE_LEDGER_URL": ledger_url, "BARGE_SHARD": f"{i}/{SHARDS}"},
            name=f"shard-{i}",
        )
        op.policy_sections = {"storage": storage, "admission": {"sharedDeployments": [shared]}}
        op.start()
        ops.append(op)
    try:
        yield ops
    finally:
        for op in ops:
            op.stop()


def test_three_shards_step_their_own_jobs_and_never_over_admit_the_shared_deployment(
    shard_cluster: Cluster, shards: list[Operator], azure: EmulatorThread, tmp_path: Path
) -> None:
    cluster = shard_cluster
    namespaces = {}
    for i, tenant in enumerate(TENANTS):
        namespaces[tenant] = team(cluster, namespace_of(i, tenant), tenant, azure.url)
        (tmp_path / tenant).mkdir(exist_ok=True)
    for ns in namespaces.values():
        wait_for(lambda ns=ns: pool_ready(cluster, ns), 120, f"pool Ready in {ns}")
    names = {tenant: tenant[0] for tenant in TENANTS}  # one letter: 40 estimated tokens an item (test_admission)
    docs = [job(namespaces[t], names[t], 0, f"file://{tmp_path}/{t}/shards-{names[t]}/") for t in TENANTS]
    cluster.run_kubectl("apply", "-f", "-", input=yaml.safe_dump_all(docs))

    def bodies() -> dict[str, dict[str, Any]]:
        return {t: kubectl_json(cluster, "-n", namespaces[t], "get", "lbj", f"job-{names[t]}") for t in TENANTS}

    finalizers: dict[str, set[str]] = {t: set() for t in TENANTS}
    started = time.monotonic()
    while True:
        now = bodies()
        for t, body in now.items():
            finalizers[t].update(body.get("metadata", {}).get("finalizers") or [])  # type: ignore[union-attr]
        phases = {t: (body.get("status") or {}).get("phase") for t, body in now.items()}  # type: ignore[union-attr]
        if all(p == "Succeeded" for p in phases.values()):
            break
        if time.monotonic() - started > 180 or "Failed" in phases.values():
            for op in shards:
                print(op.logs[-1].read_text()[-3000:])
            pytest.fail(f"not all Succeeded: {phases}")
        time.sleep(0.25)
    elapsed = time.monotonic() - started

    # each job was stepped by the shard its namespace hashes to, and by no other
    for i, t in enumerate(TENANTS):
        assert finalizers[t] == {FINALIZER if i == 0 else f"{FINALIZER}-{i}"}, finalizers
    batches = state(azure)["batches"]
    print(f"\n{len(batches)} batches in {elapsed:.1f}s; finalizers {finalizers}")
    assert len(batches) == SHARDS  # one batch per job: nothing refused and retried
    assert not [b for b in batches if b["errors"]], "the emulator answered token_limit_exceeded"
    assert max(b["input_tokens"] for b in batches) <= LIMIT
    tenants = {b["custom_ids"][0][0] for b in batches}
    assert tenants == set(names.values())
