"""The admin's `ledger` policy section (barge/limits.py), its defaults' arithmetic against the chart's default volume,
the keep-time maximum at admission (C1), and the metrics that a hostile tenant's free text or a purge must not
disturb: the model label (M2), the counters across a purge, the ledger's free space."""

from __future__ import annotations

import asyncio
import random
import string
from pathlib import Path
from typing import Any, cast

import pytest
import yaml
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from barge.api.batchjob import LLMBatchJobSpec
from barge.batch import prices
from barge.config import OperatorConfig
from barge.ledger import Ledger, lifetime
from barge.limits import DAY, LedgerLimits
from barge.operator import admission
from barge.operator.jobs import Context
from barge.operator.kube import Kube
from barge.operator.metrics import BargeCollector
from barge.policy import Refused, check_retention, parse
from tests.conftest import REPO

ROW_BYTES = 228  # one item row with its index entries (REVIEW-3 A.2, measured)
GIB = 1 << 30


def test_the_ledger_section_is_parsed_and_checked() -> None:
    limits = parse(
        {
            "ledger": {
                "maxItemsPerJob": 10,
                "maxItemsPerTenant": 20,
                "listedInvalidLines": 0,
                "minFreeBytes": 5,
                "maxKeepFor": "2d",
                "deletedJobsKeptFor": "0s",
            }
        }
    ).ledger
    assert limits == LedgerLimits(10, 20, 0, 5, 2 * DAY, 0)
    assert parse(None).ledger == LedgerLimits()
    for bad in ({"maxItemsPerJobs": 1}, {"maxItemsPerJob": -1}, {"maxItemsPerJob": "many"}, {"maxKeepFor": "1w"}):
        with pytest.raises(ValueError, match="ledger"):
            parse({"ledger": bad})
    with pytest.raises(ValueError, match="at least 1"):
        parse({"ledger": {"maxItemsPerTenant": 0}})


def test_the_defaults_fit_the_charts_default_ledger_volume() -> None:
    values = yaml.safe_load((REPO / "charts" / "barge" / "values.yaml").read_text())
    size = values["ledger"]["sqlite"]["persistence"]["size"]
    assert size == "1Gi"
    d = LedgerLimits()
    assert d.max_items_per_job * ROW_BYTES < GIB / 4  # one job's rows: a fifth of the volume
    # one tenant at its limit, beside the floor, leaves more than 40% of the volume to everyone else
    assert d.max_items_per_tenant * ROW_BYTES + d.min_free_bytes < 0.6 * GIB
    assert d.listed_invalid_lines * ROW_BYTES < 1 << 20  # a job's listed invalid lines: under 1 MiB
    assert d.min_free_bytes >= 64 << 20


def test_keep_times_over_the_admins_maximum_are_refused() -> None:
    policy = parse({"ledger": {"maxKeepFor": "7d"}})
    check_retention(policy, "7d", "0s")
    with pytest.raises(Refused) as refused:
        check_retention(policy, "999999d", "0s")
    assert refused.value.policy == "RetentionPolicy"
    assert "keepPayloadsFor 999999d" in refused.value.message
    with pytest.raises(Refused, match="keepOutputsFor"):
        check_retention(policy, "0s", "169h")
    with pytest.raises(Refused, match="RetentionPolicy"):
        check_retention(parse(None), "31d", "0s")  # the default maximum is 30 days


class FakeKube:
    async def namespace_labels(self, namespace: str) -> dict[str, str]:
        return {}


def test_admission_refuses_a_job_that_pins_its_prompts_in_the_ledger() -> None:
    policy = parse({"storage": {"prefixes": ["file:///data/{tenant}/"]}})
    raw: dict[str, Any] = {
        "provider": {"type": "openai", "model": "gpt-4o-mini", "secretRef": {"name": "k", "key": "k"}},
        "input": {"inline": [{"id": 1}]},
        "output": {"url": "file:///data/acme/out/"},
        "request": {"template": "{{ text }}"},
    }
    kube = cast(Kube, FakeKube())
    assert asyncio.run(admission.admit(kube, policy, "acme", LLMBatchJobSpec.model_validate(raw))).tenant == "acme"
    pinned = LLMBatchJobSpec.model_validate({**raw, "retention": {"keepPayloadsFor": "999999d"}})
    with pytest.raises(Refused, match="RetentionPolicy"):
        asyncio.run(admission.admit(kube, policy, "acme", pinned))


# --- metrics ---------------------------------------------------------------------------------------------------
def scrape(ctx: Context) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    registry = CollectorRegistry()
    registry.register(BargeCollector(ctx))
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(generate_latest(registry).decode())
        for s in family.samples
    }


def context(tmp_path: Path, **policy: Any) -> Context:
    config = OperatorConfig(policy=parse(policy or None))
    return Context(config, Ledger(str(tmp_path / "l.db")), cast(Kube, None), prices.load())


def test_free_text_models_do_not_become_series(tmp_path: Path) -> None:
    """A.18 at 1/10 scale: 300 deleted jobs with random 250-character models were 300 barge_requests_total series."""
    ctx = context(tmp_path)
    rng = random.Random(18)
    for n in range(300):
        key = f"team-a/j{n}/uid{n}"
        model = rng.choice(["m-", "gpt-4o-mini-"]) + "".join(rng.choices(string.ascii_lowercase, k=250))
        ctx.ledger.ensure_job(key, "h", "team-a", model)
        ctx.ledger.add_items(key, [{"custom_id": "#line-1", "line": 1, "state": "invalid", "error_type": "x"}])
        lifetime.forget_job(ctx.ledger, key)
    ctx.ledger.ensure_job("team-b/ok/1", "h", "team-b", "claude-haiku-4-5-20251001")
    ctx.ledger.add_items("team-b/ok/1", [{"custom_id": "c1", "line": 1, "state": "succeeded"}])
    series = {labels for name, labels in scrape(ctx) if name == "barge_requests_total"}
    assert len(series) <= 3, f"{len(series)} barge_requests_total series"
    models = {dict(labels)["model"] for labels in series}
    assert models == {"other", "gpt-4o-mini", "claude-haiku-4-5"}
    samples = scrape(ctx)
    assert samples[("barge_requests_total", (("model", "other"), ("outcome", "invalid"), ("tenant", "team-a")))] > 0


def test_counters_keep_a_purged_jobs_counts_and_unlisted_lines_count(tmp_path: Path) -> None:
    ctx = context(tmp_path)
    key = "team-a/j/1"
    ctx.ledger.ensure_job(key, "h", "team-a", "gpt-4o-mini")
    ctx.ledger.add_items(key, [{"custom_id": f"c{i}", "line": i, "state": "succeeded"} for i in range(1, 6)])
    ctx.ledger.set_job(key, unlisted=7, planned=True, phase="Succeeded")
    labels = (("model", "gpt-4o-mini"), ("outcome", "{}"), ("tenant", "team-a"))

    def requests(outcome: str) -> float:
        return scrape(ctx).get(("barge_requests_total", tuple((k, v.format(outcome)) for k, v in labels)), 0.0)

    before = (requests("succeeded"), requests("invalid"))
    assert before == (5.0, 7.0)
    lifetime.forget_job(ctx.ledger, key, now=0.0)
    assert lifetime.purge_deleted(ctx.ledger, 1.0, 0) == 1
    assert ctx.ledger.job(key) is None
    assert (requests("succeeded"), requests("invalid")) == before


def test_the_ledgers_free_space_is_exported(tmp_path: Path) -> None:
    ctx = context(tmp_path, ledger={"minFreeBytes": 12345})
    samples = scrape(ctx)
    assert samples[("barge_ledger_free_bytes", ())] > 0
    assert samples[("barge_ledger_size_bytes", ())] > 0
    assert samples[("barge_ledger_min_free_bytes", ())] == 12345
