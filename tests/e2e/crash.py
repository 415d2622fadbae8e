"""The kill -9 between a provider's create and the ledger's record, as every provider type's e2e test runs it: the
operator started with the after-create failpoint, a job applied, the operator SIGKILLed by the failpoint once the
provider has created the first batch, restarted without it, and the job run to Succeeded."""

from __future__ import annotations

import contextlib
from typing import Any

import yaml
from tools.localcluster import Cluster

from barge.emulator.server import EmulatorThread
from tests.conftest import state
from tests.e2e.conftest import Operator, wait_for
from tests.e2e.test_operator import apply, phase_is, status


def start(op: Operator) -> None:
    """Start the operator, giving it 120 s (not Operator.start's 30) to answer /healthz: on a loaded machine a fresh
    process's imports alone took longer."""
    with contextlib.suppress(TimeoutError):
        op.start()
    wait_for(op.healthy, 120, "operator /healthz")


def crash_then_restart(
    cluster: Cluster, op: Operator, emu: EmulatorThread, namespace: str, doc: dict[str, Any]
) -> list[dict[str, Any]]:
    """Run `doc` (an LLMBatchJob) through the kill -9 (`op` started with the after-create failpoint) and the
    restart without it; returns the batches the provider held at the kill (the orphan: exactly one, asserted)."""
    op.extra_env["BARGE_FAILPOINT"] = "after-create"
    start(op)
    try:
        apply(cluster, namespace, yaml.safe_dump(doc))
        assert op.proc is not None
        wait_for(lambda: op.proc is not None and op.proc.poll() is not None, 60, "the failpoint's kill -9")
        assert op.proc.returncode == -9, op.output()[-2000:]
        created: list[dict[str, Any]] = state(emu)["batches"]
        assert len(created) == 1, "created at the provider, not recorded: the orphan"
        op.extra_env.pop("BARGE_FAILPOINT")
        start(op)
        name = doc["metadata"]["name"]
        wait_for(phase_is(cluster, namespace, name, "Succeeded"), 180, "Succeeded after the restart")
    finally:
        op.stop()
    return created


def ended_status(cluster: Cluster, namespace: str, name: str, items: int) -> dict[str, Any]:
    """The job's status, every one of its `items` counted in an ended outcome (asserted)."""
    st = status(cluster, namespace, name)
    counts = st["counts"]
    assert counts["succeeded"] + counts["refused"] + counts["invalid"] + counts["failed"] == items, counts
    return st
