"""The operator's metrics from watched objects and a real (SQLite) ledger: what each series means, exactly."""

from __future__ import annotations

import sqlite3
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, cast

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from barge import sharding
from barge.batch import prices
from barge.config import OperatorConfig
from barge.ledger import Ledger
from barge.operator.jobs import Context
from barge.operator.kube import Kube
from barge.operator.metrics import BargeCollector, view_job


def job(
    name: str, ns: str, phase: str, *, uid: str = "", conditions: tuple[str, ...] = (), **extra: Any
) -> dict[str, Any]:
    spec = {"tenant": extra.pop("tenant", ""), **extra.pop("spec", {})}
    return {
        "kind": "LLMBatchJob",
        "metadata": {"name": name, "namespace": ns, "uid": uid or f"uid-{name}"},
        "spec": spec,
        "status": {
            "phase": phase,
            "conditions": [{"type": c, "status": "True"} for c in conditions] + [{"type": "Failed", "status": "False"}],
            **extra,
        },
    }


def scrape(ctx: Context) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    registry = CollectorRegistry()
    registry.register(BargeCollector(ctx))
    out = {}
    for family in text_string_to_metric_families(generate_latest(registry).decode()):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def value(samples: dict[Any, float], name: str, **labels: str) -> float | None:
    return samples.get((name, tuple(sorted(labels.items()))))


def context(tmp_path: Path) -> Context:
    config = OperatorConfig(min_batch_window=3600.0)
    return Context(config, Ledger(str(tmp_path / "l.db")), cast(Kube, None), prices.load())


def test_jobs_by_phase_conditions_of_running_jobs_and_deletion(tmp_path: Path) -> None:
    ctx = context(tmp_path)
    for event in (
        job("a", "claims", "Failed", conditions=("Failed", "DeadlineExceeded")),
        job("b", "claims", "Running", conditions=("Admitted", "BudgetExceeded")),
        job("c", "claims", "Succeeded", conditions=("DeadlineExceeded",)),
        job("d", "search", "Pending", tenant="search-team"),
    ):
        ctx.book.observe({"type": None, "object": event})
    samples = scrape(ctx)
    assert value(samples, "barge_jobs", tenant="claims", namespace="claims", phase="Failed") == 1
    assert value(samples, "barge_jobs", tenant="claims", namespace="claims", phase="Running") == 1
    assert value(samples, "barge_jobs", tenant="claims", namespace="claims", phase="Queued") == 0  # zero-filled
    # spec.tenant is never a label (a team could name another team there); until admission records the
    # namespace's tenant in the ledger, a job is counted under its namespace
    assert value(samples, "barge_jobs", tenant="search", namespace="search", phase="Pending") == 1
    assert value(samples, "barge_jobs", tenant="search-team", namespace="search", phase="Pending") is None
    # terminal jobs are reported by their phase only: DeadlineExceeded counts the running ones (none here)
    assert (
        value(samples, "barge_job_conditions", tenant="claims", namespace="claims", condition="DeadlineExceeded") == 0
    )
    assert value(samples, "barge_job_conditions", tenant="claims", namespace="claims", condition="BudgetExceeded") == 1
    ctx.book.observe({"type": "DELETED", "object": job("a", "claims", "Failed")})
    assert value(scrape(ctx), "barge_jobs", tenant="claims", namespace="claims", phase="Failed") == 0


def test_deadline_and_ratio_describe_the_running_job_closest_to_trouble(tmp_path: Path) -> None:
    ctx = context(tmp_path)
    now = datetime.now(UTC)  # not at import: the suite may run this minutes after collecting it
    started = (now - timedelta(hours=1)).isoformat()
    # A: 5 h left, 900 of 1,000 remaining at 100 results an hour -> needs 9 h: at risk, ratio 100/100
    a = job(
        "a",
        "claims",
        "Running",
        spec={"deadline": (now + timedelta(hours=5)).isoformat(), "successRatio": "0.99"},
        counts={
            "total": 1000,
            "pending": 0,
            "submitted": 900,
            "succeeded": 100,
            "refused": 0,
            "invalid": 0,
            "failed": 0,
        },
        startedAt=started,
    )
    # B: 1 h left, nothing remains; ratio 90/100 below 0.95
    b = job(
        "b",
        "claims",
        "Running",
        spec={"deadline": (now + timedelta(hours=1)).isoformat(), "successRatio": "0.95"},
        counts={"total": 100, "pending": 0, "submitted": 0, "succeeded": 90, "refused": 0, "invalid": 4, "failed": 6},
        startedAt=started,
    )
    for body in (a, b):
        ctx.book.observe({"type": "ADDED", "object": body})
    samples = scrape(ctx)
    slack = value(samples, "barge_deadline_slack_seconds", tenant="claims", namespace="claims")
    need = value(samples, "barge_remaining_work_seconds", tenant="claims", namespace="claims")
    assert slack is not None
    assert 4.9 * 3600 < slack <= 5 * 3600
    assert need is not None
    assert 8.9 * 3600 < need < 9.1 * 3600
    assert value(samples, "barge_job_success_ratio", tenant="claims", namespace="claims") == 0.9
    assert value(samples, "barge_job_success_ratio_target", tenant="claims", namespace="claims") == 0.95


def test_remaining_work_before_any_result_is_the_batch_window() -> None:
    now = datetime.now(UTC)
    view = view_job(job("x", "ns", "Running", counts={"pending": 10, "submitted": 5}, startedAt=now.isoformat()))
    assert view.needed_seconds(now.timestamp() + 60, 3600.0) == 3600.0
    assert view_job(job("y", "ns", "Running", counts={"succeeded": 3})).needed_seconds(0, 3600.0) == 0


def test_pool_gauges_from_the_pool_status(tmp_path: Path) -> None:
    ctx = context(tmp_path)
    body = {
        "kind": "InferencePool",
        "metadata": {"name": "ingest", "namespace": "docs", "uid": "p1"},
        "status": {
            "readyReplicas": 2,
            "conditions": [{"type": "Degraded", "status": "True"}, {"type": "Ready", "status": "True"}],
            "quota": {"tokensPerMinute": 200000, "requestsPerMinute": 1000},
            "workers": [{"name": "doc-ingest", "quotaCap": 1, "effectiveMaxReplicas": 1}],
        },
    }
    ctx.book.observe({"type": "MODIFIED", "object": body})
    samples = scrape(ctx)
    pool = {"namespace": "docs", "pool": "ingest"}
    assert value(samples, "barge_pool_condition", condition="Degraded", **pool) == 1
    assert value(samples, "barge_pool_condition", condition="ScalingConflict", **pool) == 0
    assert value(samples, "barge_pool_ready_replicas", **pool) == 2
    assert value(samples, "barge_pool_quota_tokens_per_minute", **pool) == 200000
    assert value(samples, "barge_pool_worker_quota_cap", worker="doc-ingest", **pool) == 1
    ctx.book.observe({"type": "DELETED", "object": body})
    assert value(scrape(ctx), "barge_pool_ready_replicas", **pool) is None


def test_an_older_ledger_gains_the_expired_column(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    Ledger(str(path)).close()
    with sqlite3.connect(path) as conn:  # as written before the column existed
        conn.execute("ALTER TABLE batches DROP COLUMN expired")
    ledger = Ledger(str(path))
    assert ledger.metric_rows()["expired"] == []
    with sqlite3.connect(path) as conn:
        assert "expired" in {row[1] for row in conn.execute("PRAGMA table_info(batches)")}


def test_a_shard_other_than_0_labels_its_jobs_by_the_ledgers_tenant(tmp_path: Path) -> None:
    """Shard i > 0 reports only its own jobs (shard 0 the ledger-wide families), and labels them by the tenant the
    ledger meters them by, as shard 0 does: not by the namespace's name."""
    ctx = context(tmp_path)
    ctx.config = OperatorConfig(min_batch_window=3600.0, shard=sharding.Shard(1, 2))
    ctx.ledger.ensure_job("claims/a/uid-a", "h", "claims-team", "m")
    ctx.book.observe({"type": None, "object": job("a", "claims", "Running")})
    samples = scrape(ctx)
    assert value(samples, "barge_jobs", tenant="claims-team", namespace="claims", phase="Running") == 1
    assert value(samples, "barge_jobs", tenant="claims", namespace="claims", phase="Running") is None
    assert not [name for name, _ in samples if name.startswith("barge_items")]  # shard 0's families only
