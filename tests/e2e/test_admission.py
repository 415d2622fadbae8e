"""Quota-aware admission end to end: the real API server, the e2e `barge operator`, `barge emulator` as Azure.

Two teams (namespaces labelled tenant acme and globex), each with an InferencePool on the same Azure Global Batch
deployment (the shipped sample, pointed at the emulator) declaring its enqueued-token quota. The admin's policy
lists that deployment as shared, with the same quota, and lets acme's priority count up to 1 (without the
listing each team has a queue of its own: barge/admission_policy.py). Three jobs arrive in
one `kubectl apply`: acme-a (priority 0), acme-b (priority 1), globex-c (priority 0). Each fits the quota alone,
no two fit together, and the emulator's `azureEnqueuedTokenLimit` is that same quota: it answers
`token_limit_exceeded` to any batch that would overflow it. Without admission, two of the three first batches
overflow it (checked once by disabling the gate: this test then fails on its first assertion).
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Iterator
from typing import Any

import pytest
import yaml
from tools.localcluster import Cluster

from barge.emulator.server import EmulatorThread
from tests.conftest import REPO, Factory, kubectl_json, state
from tests.e2e.conftest import SECRET, Operator, credential_secret, wait_for

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(240)]
LIMIT = 1000
DEPLOYMENT = "gpt-4o-mini-global-batch"
SYSTEM = "Tag it."  # 7 characters: (7 + 153) / 4 = 40 estimated tokens an item, 20 items = 800 tokens a job
JOBS = (("acme", "a", 0), ("acme", "b", 1), ("globex", "c", 0))


@pytest.fixture
def azure(start_emulator: Factory, operator: Operator) -> Iterator[EmulatorThread]:
    """The emulator as Azure, and the operator restarted with the admin's word that its deployment is shared."""
    emu = start_emulator({"batch": {"processingSeconds": 2, "azureEnqueuedTokenLimit": LIMIT}})
    shared = {"provider": "azure-openai", "baseURL": emu.url, "model": DEPLOYMENT, "enqueuedTokens": LIMIT}
    operator.policy_sections = {"admission": {"tenants": {"acme": {"maxPriority": 1}}, "sharedDeployments": [shared]}}
    operator.stop()
    operator.start()
    try:
        yield emu
    finally:
        operator.policy_sections = {}
        operator.stop()
        operator.start()


def job(namespace: str, name: str, priority: int, output: str) -> dict[str, Any]:
    return {
        "apiVersion": "barge.dev/v1alpha1",
        "kind": "LLMBatchJob",
        "metadata": {"name": f"job-{name}", "namespace": namespace},
        "spec": {
            "priority": priority,
            "provider": {"type": "pool", "poolRef": {"name": "azure-global-batch"}},
            "input": {"inline": [{"id": f"{name}{i:02d}", "text": f"{name * 150} {i:02d}"} for i in range(20)]},
            "request": {"system": SYSTEM, "template": "{{ text }}", "maxTokens": 20},
            "output": {"url": output},
        },
    }


def team(cluster: Cluster, ns: str, tenant: str, url: str) -> str:
    """A team's namespace (labelled with its tenant) with its Azure credential and the shipped Global Batch pool
    pointed at the emulator, declaring the quota."""
    pool = yaml.safe_load((REPO / "manifests/samples/inferencepool-azure-global-batch.yaml").read_text())
    pool["spec"]["provider"]["baseURL"] = url
    pool["spec"]["quota"] = {"enqueuedTokens": LIMIT}
    cluster.run_kubectl("create", "namespace", ns)
    cluster.run_kubectl("label", "namespace", ns, f"barge.dev/tenant={tenant}")
    credential_secret(cluster, ns, "azure-openai", {"api-key": SECRET})
    cluster.run_kubectl("-n", ns, "apply", "-f", "-", input=yaml.safe_dump(pool))
    return ns


def pool_ready(cluster: Cluster, ns: str) -> bool:
    body = kubectl_json(cluster, "-n", ns, "get", "bpool", "azure-global-batch")
    conds = (body.get("status") or {}).get("conditions") or []  # type: ignore[union-attr]
    return any(c["type"] == "Ready" and c["status"] == "True" for c in conds)  # type: ignore[index,union-attr]


def metric(text: str, name: str, **labels: str) -> float:
    """Sum of the samples of `name` whose labels include `labels`."""
    total = 0.0
    for line in text.splitlines():
        found = re.match(rf"^{name}\{{(.*)\}} ([0-9.e+-]+)$", line)
        if found and all(f'{k}="{v}"' in found.group(1) for k, v in labels.items()):
            total += float(found.group(2))
    return total


def test_three_jobs_two_tenants_one_deployment_quota(
    cluster: Cluster, operator: Operator, azure: EmulatorThread
) -> None:
    namespaces = {}
    for tenant in ("acme", "globex"):
        namespaces[tenant] = team(cluster, f"adm-{tenant}-{os.urandom(3).hex()}", tenant, azure.url)
        (operator.workdir / tenant).mkdir(exist_ok=True)
    for ns in namespaces.values():
        wait_for(lambda ns=ns: pool_ready(cluster, ns), 120, f"pool Ready in {ns}")
    docs = [
        job(namespaces[tenant], name, priority, f"file://{operator.workdir}/{tenant}/admission-{name}-{os.getpid()}/")
        for tenant, name, priority in JOBS
    ]
    cluster.run_kubectl("apply", "-f", "-", input=yaml.safe_dump_all(docs))

    def statuses() -> dict[str, dict[str, Any]]:
        out = {}
        for tenant, name, _ in JOBS:
            body = kubectl_json(cluster, "-n", namespaces[tenant], "get", "lbj", f"job-{name}")
            out[name] = body.get("status") or {}
        return out  # type: ignore[return-value]

    seen: dict[str, set[tuple[str, str]]] = {name: set() for _, name, _ in JOBS}
    queued_metric = 0.0
    started = time.monotonic()
    while True:
        now = statuses()
        for name, st in now.items():
            admitted = next((c for c in st.get("conditions", []) if c["type"] == "Admitted"), {})
            if st.get("phase") == "Queued":
                seen[name].add((str(admitted.get("reason")), str(admitted.get("message"))))
        queued_metric = max(queued_metric, metric(operator.metrics(), "barge_admission_queued_jobs"))
        if all(st.get("phase") == "Succeeded" for st in now.values()):
            break
        if time.monotonic() - started > 120 or any(st.get("phase") == "Failed" for st in now.values()):
            print(cluster.run_kubectl("get", "lbj", "-A", "-o", "yaml").stdout)
            pytest.fail(f"not all Succeeded: { {n: s.get('phase') for n, s in now.items()} }")
        time.sleep(0.25)
    elapsed = time.monotonic() - started

    batches = state(azure)["batches"]
    assert not [b for b in batches if b["errors"]], "the emulator answered token_limit_exceeded"
    assert max(b["input_tokens"] for b in batches) <= LIMIT
    order: list[str] = []
    for b in sorted(batches, key=lambda b: b["created_at"]):
        name = b["custom_ids"][0][0]
        if name not in order:
            order.append(name)
    print(f"\nadmission order {order} in {elapsed:.1f}s; held as {seen}")
    # b first (priority 1); then at priority 0 globex's c before acme's older a: acme was served last (b)
    assert order == ["b", "c", "a"]
    # while b ran, c was first and a second in the queue, held by the quota
    assert any(r == "QuotaExhausted" and "position 1 in the queue" in m for r, m in seen["c"]), seen
    assert any(r == "QuotaExhausted" and "position 2 in the queue" in m for r, m in seen["a"]), seen
    assert not seen["b"] or {r for r, _ in seen["b"]} == {"AdmissionWindow"}
    assert queued_metric >= 2
    text = operator.metrics()
    for tenant, ns in namespaces.items():
        assert metric(text, "barge_admission_queued_jobs", namespace=ns, pool="azure-global-batch") == 0
        waits = metric(text, "barge_admission_wait_seconds_count", namespace=ns, tenant=tenant)
        assert waits == {"acme": 2, "globex": 1}[tenant]
