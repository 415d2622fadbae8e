"""Reconciliation (#31.4) for Azure OpenAI and Mistral.

Azure: a job runs on the Azure face of the emulator with the real openai SDK (AsyncAzureOpenAI); `barge report
reconcile --provider azure-openai` then reads the emulator's Entra ID token endpoint and Cost Management query over
plain HTTP (providers/azure_costs.py). Billed as processed the difference is 0; told to bill 10% more it shows and
the command exits 1. The OpenAI organization reports of the same emulator do not count the Azure batches (they are
on Azure's bill). Mistral has no daily bill to read: the command says `not available for mistral: <reason>` and no
line, never a 0. The operator's timer does the same on a real API server: a gauge per day for azure-openai, none
for mistral."""

from __future__ import annotations

import csv
import io
import time
from decimal import Decimal
from pathlib import Path

import pytest
from kubernetes_asyncio.config import kube_config
from tools import localcluster
from typer.testing import CliRunner

from barge.batch import prices
from barge.batch.runner import JobRunner
from barge.cli.main import app
from barge.config import OperatorConfig
from barge.emulator.server import EmulatorThread
from barge.ledger import Ledger
from barge.operator import jobs, reconcile_timer
from barge.operator.kube import Kube
from barge.policy import parse
from tests.conftest import Factory
from tests.integration.test_engine import FAST, provider_for, run_to_end
from tests.integration.test_robustness_money import claims, job_of

DAY = 86400
MODEL = "gpt-4o-mini-batch"
SCOPE = "/subscriptions/sub-1/resourceGroups/llm"


async def azure_job(tmp_path: Path, emu: EmulatorThread) -> str:
    path = str(tmp_path / "ledger.db")
    ledger = Ledger(path)
    try:
        job = job_of(tmp_path, "azure-openai", MODEL, claims(30, 200))
        snap = await run_to_end(JobRunner(job, provider_for("azure-openai", emu.url), ledger, prices.load(), FAST))
        assert snap.phase == "Succeeded", snap
    finally:
        ledger.close()
    return path


def reconcile(emu: EmulatorThread, ledger: str, *extra: str, secret: str = "s3cret") -> tuple[int, str, str]:  # noqa: S107
    today = time.strftime("%Y-%m-%d", time.gmtime())
    tomorrow = time.strftime("%Y-%m-%d", time.gmtime(time.time() + DAY))
    env = {
        "AZURE_CLIENT_SECRET": secret,
        "AZURE_TENANT_ID": "tenant-1",
        "AZURE_CLIENT_ID": "client-1",
        "AZURE_COST_SCOPE": SCOPE,
        "AZURE_MANAGEMENT_URL": f"{emu.url}/azure/management",
        "AZURE_LOGIN_URL": f"{emu.url}/azure/login",
        "OPENAI_BASE_URL": f"{emu.url}/v1",
        "COLUMNS": "160",
    }
    args = ["report", "reconcile", "--ledger", ledger, "--from", today, "--to", tomorrow, *extra]
    result = CliRunner().invoke(app, args, env=env)
    return result.exit_code, result.stdout, result.stderr


def rows(text: str) -> list[dict[str, str]]:
    return list(csv.DictReader(io.StringIO(text)))


@pytest.mark.parametrize("ratio", [1.0, 1.1])
async def test_azure_bill_from_cost_management(start_emulator: Factory, tmp_path: Path, ratio: float) -> None:
    emu = start_emulator({"billing": {"overchargeRatio": ratio}})
    ledger = await azure_job(tmp_path, emu)
    code, out, err = reconcile(emu, ledger, "--provider", "azure-openai", "--format", "csv", "--threshold", "0.00001")
    (line,) = rows(out)
    assert line["provider"] == "azure-openai", out
    barge_usd, provider_usd = Decimal(line["barge_usd"]), Decimal(line["provider_usd"])
    assert barge_usd > 0
    assert abs(provider_usd - barge_usd * Decimal(str(ratio))) <= Decimal("0.000002"), line
    assert line["provider_tokens"] == "0"  # Cost Management gives meter quantities, not tokens
    assert code == (1 if ratio != 1.0 else 0), (out, err)
    # OpenAI's organization reports on the same emulator do not carry Azure's batches
    code_oa, out_oa, _ = reconcile(
        emu, ledger, "--provider", "openai", "--openai-admin-key", "sk-admin", "--format", "csv"
    )
    assert (code_oa, rows(out_oa)) == (0, [])


async def test_a_refused_service_principal_is_an_error_naming_azure(start_emulator: Factory, tmp_path: Path) -> None:
    emu = start_emulator()
    ledger = await azure_job(tmp_path, emu)
    code, _out, err = reconcile(emu, ledger, "--provider", "azure-openai", secret="invalid")
    assert code == 2
    assert "could not read azure-openai's bill: HTTP 401: AADSTS7000215" in err
    code2, _, err2 = reconcile(emu, ledger, "--provider", "azure-openai", "--azure-scope", "")
    assert code2 == 2
    assert "AZURE_COST_SCOPE" in err2


def test_azure_is_compared_by_default_only_with_a_scope(start_emulator: Factory, tmp_path: Path) -> None:
    emu = start_emulator()
    Ledger(str(tmp_path / "ledger.db")).close()
    code, out, _ = reconcile(emu, str(tmp_path / "ledger.db"), "--azure-scope", "")  # AZURE_CLIENT_SECRET only
    assert code == 2  # nothing to compare: the secret alone may be azure-identity's, for storage
    code, out, err = reconcile(emu, str(tmp_path / "ledger.db"), "--format", "csv")
    assert (code, rows(out)) == (0, []), err  # secret and scope: Azure compared (an empty day on both sides)


def test_mistral_is_reported_not_available_never_zero(start_emulator: Factory, tmp_path: Path) -> None:
    emu = start_emulator()
    Ledger(str(tmp_path / "ledger.db")).close()
    code, out, err = reconcile(emu, str(tmp_path / "ledger.db"), "--provider", "mistral", "--format", "csv")
    assert code == 0
    assert "not available for mistral: " in err
    assert "billing month" in err
    assert rows(out) == []


async def test_the_timer_exports_azure_per_day_and_nothing_for_mistral(
    cluster: localcluster.Cluster,
    namespace: str,
    start_emulator: Factory,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(kube_config, "KUBE_CONFIG_DEFAULT_LOCATION", str(cluster.kubeconfig))
    cluster.run_kubectl("-n", namespace, "create", "secret", "generic", "azure-costs", "--from-literal=clientSecret=s")
    cluster.run_kubectl("-n", namespace, "label", "secret", "azure-costs", "barge.dev/credential=true")
    emu = start_emulator({"billing": {"overchargeRatio": 1.1}})
    policy = parse(
        {
            "reconcile": {
                "thresholdUSD": 0.00001,
                "days": 2,
                "providers": {
                    "azure-openai": {
                        "secretRef": {"namespace": namespace, "name": "azure-costs"},
                        "tenantId": "tenant-1",
                        "clientId": "client-1",
                        "scope": SCOPE,
                        "baseURL": f"{emu.url}/azure/management",
                        "loginURL": f"{emu.url}/azure/login",
                    },
                    "mistral": {},
                },
            }
        }
    )
    path = await azure_job(tmp_path, emu)
    ledger = Ledger(path)
    kube = Kube()
    ctx = jobs.Context(OperatorConfig(policy=policy), ledger, kube, prices.load())  # type: ignore[arg-type]
    try:
        lines = await reconcile_timer.reconcile_once(ctx, time.time() + DAY)
    finally:
        await kube.close()
        ledger.close()
    today = time.strftime("%Y-%m-%d", time.gmtime())
    yesterday = time.strftime("%Y-%m-%d", time.gmtime(time.time() - DAY))
    (line,) = lines
    assert (line.provider, line.day) == ("azure-openai", today)
    assert line.mismatched(policy.reconcile.threshold_usd)
    got = {}
    for family in reconcile_timer.collect(ctx.reconciled):
        for s in family.samples:
            got[(s.name, tuple(s.labels.values()))] = s.value
    assert got[("barge_reconcile_difference_usd", ("azure-openai", today))] == pytest.approx(
        float(line.barge_usd) * 0.1, abs=2e-6
    )
    assert got[("barge_reconcile_difference_usd", ("azure-openai", yesterday))] == 0.0
    assert not any(k[1] and k[1][0] == "mistral" for k in got)  # absent, not 0
    assert ctx.reconciled.unavailable["mistral"].startswith("not available for mistral: ")
    assert ctx.reconciled.errors == {}
