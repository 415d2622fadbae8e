"""The operator end to end: `barge operator` as a process against the real local control plane, the provider
emulator in the test process. What a platform team would check before trusting it."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from tools.localcluster import Cluster

from barge.cli.demo_data import claims
from barge.emulator.server import EmulatorThread
from tests.conftest import REPO, kubectl_json, state
from tests.e2e.conftest import SECRET, Operator, credential_secret, wait_for

pytestmark = pytest.mark.cluster


def job_manifest(name: str, url: str, workdir: Path, *, n: int = 600, tenant: str = "", **spec: Any) -> str:
    data = workdir / f"{name}.jsonl"
    data.write_bytes(b"".join(line + b"\n" for line in claims(n)))
    doc = yaml.safe_load((REPO / "manifests" / "samples" / "claims-nightly.yaml").read_text())
    doc["metadata"]["name"] = name
    doc["spec"]["provider"]["baseURL"] = url
    doc["spec"]["input"]["url"] = f"file://{data}"
    doc["spec"]["output"]["url"] = f"file://{workdir}/{name}-out/"
    doc["spec"].pop("tenant", None)  # the sample's tenant is its namespace's (claims-team); these use their own
    if tenant:
        doc["spec"]["tenant"] = tenant
    doc["spec"].update(spec)
    return yaml.safe_dump(doc)


def secret(cluster: Cluster, namespace: str) -> None:
    credential_secret(cluster, namespace, "anthropic", {"api-key": SECRET})


def apply(cluster: Cluster, namespace: str, manifest: str) -> None:
    cluster.run_kubectl("-n", namespace, "apply", "-f", "-", input=manifest)


def status(cluster: Cluster, namespace: str, name: str) -> dict[str, Any]:
    return kubectl_json(cluster, "-n", namespace, "get", "lbj", name).get("status") or {}  # type: ignore[return-value]


def phase_is(cluster: Cluster, namespace: str, name: str, *phases: str) -> Callable[[], bool]:
    return lambda: status(cluster, namespace, name).get("phase") in phases


def assert_one_batch_per_shard(emu: EmulatorThread, *, items: int, shards: int) -> None:
    """What the provider saw: every item in exactly one batch, and one batch per shard (no duplicate create)."""
    batches = state(emu)["batches"]
    seen: dict[str, int] = {}
    for batch in batches:
        for cid in batch["custom_ids"]:
            seen[cid] = seen.get(cid, 0) + 1
    assert len(seen) == items
    assert set(seen.values()) == {1}, "no item went to the provider twice"
    assert len(batches) == shards, f"{items} items in {shards} shards: exactly one batch per shard"


def test_sample_job_succeeds_and_columns_match_outputs(
    cluster: Cluster, namespace: str, operator: Operator, emulator: EmulatorThread
) -> None:
    secret(cluster, namespace)
    apply(cluster, namespace, job_manifest("nightly", emulator.url, operator.workdir, n=1000))
    wait_for(phase_is(cluster, namespace, "nightly", "Succeeded"), 120, "Succeeded")
    st = status(cluster, namespace, "nightly")
    row = cluster.run_kubectl("-n", namespace, "get", "lbj", "nightly", "--no-headers").stdout.split()
    assert row[1] == "Succeeded"
    assert row[2] == f"{st['counts']['succeeded']}/1000"
    results = (operator.workdir / "nightly-out" / "results.jsonl").read_text().splitlines()
    failures = (operator.workdir / "nightly-out" / "failures.jsonl").read_text().splitlines()
    assert len(results) == st["counts"]["succeeded"] + st["counts"]["refused"]
    assert len(failures) == st["counts"]["invalid"] + st["counts"]["failed"]
    assert len(results) + len(failures) == 1000
    assert st["observedGeneration"] >= 1
    assert {c["type"] for c in st["conditions"]} >= {
        "Admitted",
        "Submitted",
        "Complete",
        "Failed",
        "DeadlineExceeded",
        "BudgetExceeded",
    }
    reasons = {e["reason"] for e in kubectl_json(cluster, "-n", namespace, "get", "events")["items"]}  # type: ignore[index]
    assert {"Admitted", "Submitted", "BatchEnded", "Completed"} <= reasons


def test_kill_9_mid_run_then_restart_keeps_one_batch_per_shard(
    cluster: Cluster, namespace: str, operator: Operator, start_emulator: Callable[..., EmulatorThread]
) -> None:
    emu = start_emulator({"batch": {"processingSeconds": 3}})
    secret(cluster, namespace)
    apply(cluster, namespace, job_manifest("crashy", emu.url, operator.workdir, n=800))
    wait_for(lambda: state(emu)["batches"], 60, "a first batch")
    operator.kill()
    operator.start()
    wait_for(phase_is(cluster, namespace, "crashy", "Succeeded"), 120, "Succeeded after restart")
    assert_one_batch_per_shard(emu, items=800, shards=4)


def test_delete_cancels_the_provider_batch(
    cluster: Cluster, namespace: str, operator: Operator, start_emulator: Callable[..., EmulatorThread]
) -> None:
    slow = start_emulator({"batch": {"processingSeconds": 120, "cancelSeconds": 0.2}})
    secret(cluster, namespace)
    apply(cluster, namespace, job_manifest("doomed", slow.url, operator.workdir, n=50))
    wait_for(phase_is(cluster, namespace, "doomed", "Running"), 60, "Running")
    cluster.run_kubectl("-n", namespace, "delete", "lbj", "doomed", "--wait=true", "--timeout=60s")
    assert cluster.run_kubectl("-n", namespace, "get", "lbj", "doomed", check=False).returncode != 0
    batch = state(slow)["batches"][0]
    assert batch["status"] in ("canceling", "ended")
    assert slow.store.batches[batch["id"]].cancel_at is not None


def test_suspend_cancels_and_resume_finishes(
    cluster: Cluster, namespace: str, operator: Operator, start_emulator: Callable[..., EmulatorThread]
) -> None:
    slow = start_emulator({"batch": {"processingSeconds": 8, "cancelSeconds": 0.2}})
    secret(cluster, namespace)
    apply(cluster, namespace, job_manifest("pausable", slow.url, operator.workdir, n=100))
    wait_for(phase_is(cluster, namespace, "pausable", "Running"), 60, "Running")
    cluster.run_kubectl("-n", namespace, "patch", "lbj", "pausable", "--type=merge", "-p", '{"spec":{"suspend":true}}')
    wait_for(phase_is(cluster, namespace, "pausable", "Suspended"), 60, "Suspended")
    first = state(slow)["batches"][0]
    assert slow.store.batches[first["id"]].cancel_at is not None
    time.sleep(2)
    assert len(state(slow)["batches"]) == 1, "nothing is submitted while suspended"
    cluster.run_kubectl("-n", namespace, "patch", "lbj", "pausable", "--type=merge", "-p", '{"spec":{"suspend":false}}')
    wait_for(phase_is(cluster, namespace, "pausable", "Succeeded"), 120, "Succeeded after resume")
    assert len(state(slow)["batches"]) >= 2
    assert (
        status(cluster, namespace, "pausable")["counts"]["succeeded"]
        + status(cluster, namespace, "pausable")["counts"]["refused"]
        == 100
    )


def test_missing_secret_waits_then_proceeds(
    cluster: Cluster, namespace: str, operator: Operator, emulator: EmulatorThread
) -> None:
    apply(cluster, namespace, job_manifest("keyless", emulator.url, operator.workdir, n=20))

    def admitted_false() -> bool:
        conds = {c["type"]: c for c in status(cluster, namespace, "keyless").get("conditions", [])}
        return conds.get("Admitted", {}).get("status") == "False"

    wait_for(admitted_false, 60, "Admitted=False")
    admitted = next(c for c in status(cluster, namespace, "keyless")["conditions"] if c["type"] == "Admitted")
    assert "Secret 'anthropic' not found" in admitted["message"]
    assert status(cluster, namespace, "keyless")["phase"] == "Pending"
    secret(cluster, namespace)
    wait_for(phase_is(cluster, namespace, "keyless", "Succeeded"), 120, "Succeeded once the Secret exists")


def test_tenants_are_metered_apart_and_secrets_never_leak(
    cluster: Cluster, operator: Operator, emulator: EmulatorThread
) -> None:
    for ns, tenant in (("e2e-tenant-a", "team-a"), ("e2e-tenant-b", "team-b")):
        cluster.run_kubectl("create", "namespace", ns, check=False)
        cluster.run_kubectl("label", "namespace", ns, f"barge.dev/tenant={tenant}", "--overwrite")
        cluster.run_kubectl("-n", ns, "delete", "secret", "anthropic", check=False)
        secret(cluster, ns)
        apply(cluster, ns, job_manifest(f"metered-{tenant}", emulator.url, operator.workdir, n=40, tenant=tenant))
    for ns, tenant in (("e2e-tenant-a", "team-a"), ("e2e-tenant-b", "team-b")):
        wait_for(phase_is(cluster, ns, f"metered-{tenant}", "Succeeded"), 120, f"{tenant} Succeeded")
    metrics = operator.metrics()
    for tenant in ("team-a", "team-b"):
        line = next(
            x
            for x in metrics.splitlines()
            if x.startswith("barge_cost_usd_total{") and f'tenant="{tenant}"' in x and 'path="batch"' in x
        )
        assert float(line.rsplit(" ", 1)[1]) > 0
    succeeded = [
        f'barge_jobs{{namespace="{ns}",phase="Succeeded",tenant="{tenant}"}} 1.0'
        for ns, tenant in (("e2e-tenant-a", "team-a"), ("e2e-tenant-b", "team-b"))
    ]  # the phase as the watch delivers the status the operator wrote
    wait_for(lambda: all(line in operator.metrics() for line in succeeded), 30, "barge_jobs by tenant and namespace")
    everything = operator.output()
    for ns in ("e2e-tenant-a", "e2e-tenant-b"):
        everything += cluster.run_kubectl("-n", ns, "get", "events", "-o", "yaml").stdout
        everything += cluster.run_kubectl("-n", ns, "get", "lbj", "-o", "yaml").stdout
    assert SECRET not in everything
    assert json.dumps(SECRET)[1:-1] not in everything
