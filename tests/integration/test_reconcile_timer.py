"""The operator's reconciliation timer (#31.4) on a real API server: the admin key is read from the Secret the
policy names, only when it is marked barge.dev/credential; the emulator's admin reports are compared with a real
ledger filled by a job run with the real Anthropic adapter; the gauge barge_reconcile_difference_usd shows 0 when
the emulator bills what it processed and the planted 10% when it overcharges."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from kubernetes_asyncio.config import kube_config
from tools import localcluster

from barge.batch import prices
from barge.batch.runner import JobRunner
from barge.config import OperatorConfig
from barge.ledger import Ledger
from barge.operator import jobs, reconcile_timer
from barge.operator.kube import Kube
from barge.policy import parse
from tests.conftest import Factory
from tests.integration.test_engine import FAST, provider_for, run_to_end
from tests.integration.test_robustness_money import claims, job_of

DAY = 86400


def secret(cluster: localcluster.Cluster, namespace: str, name: str, marked: bool) -> None:
    cluster.run_kubectl("-n", namespace, "create", "secret", "generic", name, "--from-literal=adminKey=sk-ant-admin-x")
    if marked:
        cluster.run_kubectl("-n", namespace, "label", "secret", name, "barge.dev/credential=true")


def samples(state: reconcile_timer.Reconciled) -> dict[tuple[str, tuple[str, ...]], float]:
    out = {}
    for family in reconcile_timer.collect(state):
        for s in family.samples:
            out[(s.name, tuple(s.labels.values()))] = s.value
    return out


@pytest.mark.parametrize("ratio", [1.0, 1.1])
async def test_the_timer_exports_the_difference_per_provider_and_day(
    cluster: localcluster.Cluster,
    namespace: str,
    start_emulator: Factory,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    ratio: float,
) -> None:
    # kubernetes_asyncio reads KUBECONFIG once, at import: point it at the test's control plane
    monkeypatch.setattr(kube_config, "KUBE_CONFIG_DEFAULT_LOCATION", str(cluster.kubeconfig))
    secret(cluster, namespace, "anthropic-admin", marked=True)
    secret(cluster, namespace, "openai-admin", marked=False)
    emu = start_emulator({"billing": {"overchargeRatio": ratio}})
    policy = parse(
        {
            "reconcile": {
                "thresholdUSD": 0.0001,
                "days": 2,
                "providers": {
                    "anthropic": {"secretRef": {"namespace": namespace, "name": "anthropic-admin"}, "baseURL": emu.url},
                    "openai": {"secretRef": {"namespace": namespace, "name": "openai-admin"}, "baseURL": emu.url},
                },
            }
        }
    )
    ledger = Ledger(str(tmp_path / "l.db"))
    kube = Kube()
    ctx = jobs.Context(OperatorConfig(policy=policy), ledger, kube, prices.load())  # type: ignore[arg-type]
    try:
        job = job_of(tmp_path, "anthropic", "claude-sonnet-4-6", claims(20, 200))
        snap = await run_to_end(JobRunner(job, provider_for("anthropic", emu.url), ledger, prices.load(), FAST))
        assert snap.phase == "Succeeded", snap
        tomorrow = time.time() + DAY  # complete days only: today is compared once it has ended
        lines = await reconcile_timer.reconcile_once(ctx, tomorrow)
    finally:
        await kube.close()
        ledger.close()
    today = time.strftime("%Y-%m-%d", time.gmtime())
    yesterday = time.strftime("%Y-%m-%d", time.gmtime(time.time() - DAY))
    (line,) = lines
    assert (line.provider, line.day) == ("anthropic", today)
    assert line.barge_usd > 0
    assert line.barge_tokens == line.provider_tokens
    assert line.mismatched(policy.reconcile.threshold_usd) is (ratio != 1.0)
    got = samples(ctx.reconciled)
    expected = float(line.barge_usd) * (ratio - 1)
    assert got[("barge_reconcile_difference_usd", ("anthropic", today))] == pytest.approx(expected, abs=2e-6)
    assert got[("barge_reconcile_difference_usd", ("anthropic", yesterday))] == 0.0  # compared, nothing either side
    assert got[("barge_reconcile_threshold_usd", ("anthropic", today))] == 0.0001
    # the unmarked Secret is never read: the provider is counted as failed and exports no difference
    assert got[("barge_reconcile_errors_total", ("openai",))] == 1
    assert not any(k[0] == "barge_reconcile_difference_usd" and k[1][0] == "openai" for k in got)
