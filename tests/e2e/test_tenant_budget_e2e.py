"""Tenant budgets on the real local control plane (#31.1): `barge operator` with an admin policy whose budget for
the namespace's tenant is too small holds a job Admitted=False TenantBudgetExceeded (figures in the message, nothing
sent); the admin raises it, the operator restarts, the job runs, and /metrics shows the tenant's month-to-date spend,
read back from the ledger, against its budget."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from tools.localcluster import Cluster

from tests.conftest import Factory, kubectl_json, state
from tests.e2e.conftest import SECRET, Operator, credential_secret, own_control_plane, wait_for

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(300)]


@pytest.fixture(scope="module")
def own_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """A control plane of this module's own: its operator must never meet the package's `operator`, which watches
    every namespace of the session's cluster (in a full run that one refused the job first: StoragePolicy)."""
    with own_control_plane(tmp_path_factory.mktemp("budget") / "cluster") as cluster:
        yield cluster


@pytest.fixture
def budget_operator(own_cluster: Cluster, tmp_path: Path) -> Iterator[Operator]:
    op = Operator(own_cluster, tmp_path, "http://127.0.0.1:1/v1", name="budget-operator")
    yield op
    op.stop()


def job(name: str, url: str, workdir: Path) -> str:
    doc: dict[str, Any] = {
        "apiVersion": "barge.dev/v1alpha1",
        "kind": "LLMBatchJob",
        "metadata": {"name": name},
        "spec": {
            "provider": {
                "type": "anthropic",
                "model": "claude-sonnet-4-6",
                "secretRef": {"name": "anthropic", "key": "api-key"},
                "baseURL": url,
            },
            "input": {"inline": [{"id": f"c{n}", "text": f"claim {n}: water in the basement"} for n in range(20)]},
            "request": {"template": "{{ text }}", "maxTokens": 50},
            "output": {"url": f"file://{workdir}/{name}/"},
        },
    }
    return yaml.safe_dump(doc)


def metric(text: str, name: str, tenant: str) -> float | None:
    found = re.search(rf'^{name}{{tenant="{re.escape(tenant)}"}} (\S+)$', text, re.M)
    return float(found.group(1)) if found else None


def test_a_tenant_over_its_monthly_budget_waits_until_the_admin_raises_it(
    own_cluster: Cluster, budget_operator: Operator, start_emulator: Factory
) -> None:
    cluster, namespace = own_cluster, "budget-team"
    cluster.run_kubectl("create", "namespace", namespace)
    emu = start_emulator()
    credential_secret(cluster, namespace, "anthropic", {"api-key": SECRET})
    tenant = namespace  # no barge.dev/tenant label: the namespace is its own tenant
    budget_operator.policy_sections = {"budgets": {"tenants": {tenant: {"monthlyUSD": "0.000001"}}}}
    budget_operator.start()
    cluster.run_kubectl("-n", namespace, "apply", "-f", "-", input=job("claims", emu.url, budget_operator.workdir))

    def admitted() -> dict[str, Any] | None:
        status = kubectl_json(cluster, "-n", namespace, "get", "lbj", "claims").get("status") or {}
        found = [c for c in status.get("conditions", []) if c["type"] == "Admitted"]  # type: ignore[union-attr]
        return found[0] if found and found[0]["status"] == "False" else None

    refused = wait_for(admitted, 60, "Admitted=False")
    assert refused["reason"] == "TenantBudgetExceeded"
    assert f"tenant {tenant!r}: spent $0 this month + this job's estimate $" in refused["message"]
    assert "> monthly budget $0.000001" in refused["message"]
    assert state(emu)["batches"] == []  # nothing was sent
    assert metric(budget_operator.metrics(), "barge_tenant_budget_usd", tenant) == 0.000001

    budget_operator.stop()
    budget_operator.policy_sections = {"budgets": {"tenants": {tenant: {"monthlyUSD": 100, "warnAt": 0.5}}}}
    budget_operator.start()

    def phase() -> str:
        return str((kubectl_json(cluster, "-n", namespace, "get", "lbj", "claims").get("status") or {}).get("phase"))

    wait_for(lambda: phase() == "Succeeded", 120, "Succeeded once the budget fits")
    text = budget_operator.metrics()
    spent = metric(text, "barge_tenant_spend_usd", tenant)
    assert spent is not None
    assert 0 < spent < 100
    assert metric(text, "barge_tenant_budget_usd", tenant) == 100
    assert metric(text, "barge_tenant_budget_warn_usd", tenant) == 50
    cost = re.findall(rf'^barge_cost_usd_total{{[^}}]*tenant="{re.escape(tenant)}"[^}}]*}} (\S+)$', text, re.M)
    assert spent == pytest.approx(sum(float(c) for c in cost), rel=1e-6)  # the same money, counted twice the same
