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
from tests.conftest import state
from tests.e2e.conftest import Operator, wait_for
from tests.e2e.test_operator import apply, assert_one_batch_per_shard, job_manifest, phase_is, secret, status
from tests.e2e.test_providers_crash import own_cluster, start

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
    op = Operator(own_cluster, tmp_path, "http://127.0.0.1:9/v1", env={"BARGE_FAILPOINT": "after-create"})
    start(op)
    try:
        apply(own_cluster, namespace, yaml.safe_dump(doc))
        assert op.proc is not None
        wait_for(lambda: op.proc is not None and op.proc.poll() is not None, 60, "the failpoint's kill -9")
        assert op.proc.returncode == -9, op.output()[-2000:]
        created = state(emu)["batches"]
        assert len(created) == 1, "created at the provider, not recorded: the orphan"
        assert created[0]["id"].startswith("batches/")
        op.extra_env.pop("BARGE_FAILPOINT")
        start(op)
        wait_for(phase_is(own_cluster, namespace, "crashy", "Succeeded"), 180, "Succeeded after the restart")
    finally:
        op.stop()
    assert_one_batch_per_shard(emu, items=800, shards=4)  # shards of 200 (BARGE_MAX_SHARD_REQUESTS)
    st = status(own_cluster, namespace, "crashy")
    assert st["counts"]["succeeded"] + st["counts"]["refused"] + st["counts"]["invalid"] + st["counts"]["failed"] == 800
    assert Decimal(st["usage"]["costUSD"]) > 0, st["usage"]
    assert Decimal(st["usage"]["savedUSD"]) > 0, "billed at the batch rate: half the list price saved"
