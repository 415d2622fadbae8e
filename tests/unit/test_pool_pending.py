"""barge_pool_pending_requests: the work waiting for each engine pool, from the watched jobs (what wakes a pool
at zero through its ScaledObject's `barge-pending` trigger)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.unit.test_metrics import context, scrape, value


def pool_job(name: str, phase: str, pool: str = "gpu", **status: Any) -> dict[str, Any]:
    return {
        "kind": "LLMBatchJob",
        "metadata": {"name": name, "namespace": "ns", "uid": f"uid-{name}"},
        "spec": {"provider": {"type": "pool", "poolRef": {"name": pool}}},
        "status": {"phase": phase, **status},
    }


WAITING = [{"type": "Admitted", "status": "False", "reason": "NotFound", "message": "InferencePool 'gpu' is not Ready"}]


def test_pending_requests_per_pool(tmp_path: Path) -> None:
    ctx = context(tmp_path)
    pool = {"kind": "InferencePool", "metadata": {"name": "idle", "namespace": "ns", "uid": "p-idle"}, "status": {}}
    bodies = [
        pool,
        pool_job("waiting", "Pending", conditions=WAITING),  # not read yet: counts 1
        pool_job("running", "FallingBack", counts={"total": 50, "pending": 30, "retrying": 2, "submitted": 8}),
        pool_job("held", "Queued", conditions=WAITING),  # held by its schedule: not waiting for the pool
        pool_job("paused", "Suspended", counts={"total": 10, "pending": 10}),
        pool_job("done", "Succeeded", counts={"total": 10, "succeeded": 10}),
        pool_job("broken", "Pending", conditions=[{"type": "Admitted", "status": "False", "reason": "InvalidSpec"}]),
        pool_job("other", "Running", pool="cpu", counts={"total": 4, "pending": 4}),
        {**pool_job("api", "Running", counts={"total": 5, "pending": 5}), "spec": {"provider": {"type": "openai"}}},
    ]
    for body in bodies:
        ctx.book.observe({"type": "MODIFIED", "object": body})
    samples = scrape(ctx)
    assert value(samples, "barge_pool_pending_requests", namespace="ns", pool="gpu") == 1 + 30 + 2 + 8
    assert value(samples, "barge_pool_pending_requests", namespace="ns", pool="cpu") == 4
    assert value(samples, "barge_pool_pending_requests", namespace="ns", pool="idle") == 0
    assert [k for k in samples if k[0] == "barge_pool_pending_requests"] == [
        ("barge_pool_pending_requests", (("namespace", "ns"), ("pool", p))) for p in ("cpu", "gpu", "idle")
    ]
