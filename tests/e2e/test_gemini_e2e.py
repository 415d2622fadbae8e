"""Type gemini end to end: `barge operator` on a local control plane of this module's own, a job through the real
google-genai SDK against the emulator's Gemini API, the operator SIGKILLed by the after-create failpoint (the
Gemini API created the batch, the ledger never recorded it; the API has no idempotency key), restarted: the orphan
found by its display name, one provider batch per shard, every item once, the job Succeeded with its cost."""

from __future__ import annotations

from collections.abc import Callable
from decimal import Decimal
from pathlib import Path

import pytest
import yaml
from tools.localcluster import Cluster

from barge.emulator.server import EmulatorThread
from tests.e2e.conftest import Operator
from tests.e2e.crash import crash_then_restart, ended_status
from tests.e2e.test_operator import assert_one_batch_per_shard, job_manifest, secret
from tests.e2e.test_providers_crash import own_cluster

pytestmark = pytest.mark.cluster
__all__ = ["own_cluster"]  # the module's control plane (a fixture)


def test_gemini_kill_9_between_create_and_record_then_restart_keeps_one_batch_per_shard(
    own_cluster: Cluster, tmp_path: Path, start_emulator: Callable[..., EmulatorThread]
) -> None:
    emu = start_emulator({"batch": {"processingSeconds": 3}})
    namespace = "crash-gemini"
    own_cluster.run_kubectl("create", "namespace", namespace)
    secret(own_cluster, namespace)
    doc = yaml.safe_load(job_manifest("crashy", emu.url + "/gemini", tmp_path, n=800))
    doc["spec"]["provider"].update({"type": "gemini", "model": "gemini-2.5-flash"})
    op = Operator(own_cluster, tmp_path, "http://127.0.0.1:9/v1")
    created = crash_then_restart(own_cluster, op, emu, namespace, doc)
    assert created[0]["id"].startswith("batches/")
    assert_one_batch_per_shard(emu, items=800, shards=4)  # shards of 200 (BARGE_MAX_SHARD_REQUESTS)
    st = ended_status(own_cluster, namespace, "crashy", 800)
    assert Decimal(st["usage"]["costUSD"]) > 0, st["usage"]
    assert Decimal(st["usage"]["savedUSD"]) > 0, "billed at the batch rate: half the list price saved"
