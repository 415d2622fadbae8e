"""Barge's CRDs on a real kube-apiserver: install, samples, printer columns, CEL and schema rejections."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from tools.localcluster import Cluster

from tests.conftest import REPO, kubectl_json

SAMPLES = sorted((REPO / "manifests" / "samples").glob("*.yaml"))


def _job(name: str, **spec: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "provider": {"type": "anthropic", "model": "claude-sonnet-4-6", "secretRef": {"name": "anthropic"}},
        "input": {"url": "s3://bucket/in.jsonl"},
        "output": {"url": "s3://bucket/out/"},
    }
    base.update(spec)
    return {"apiVersion": "barge.dev/v1alpha1", "kind": "LLMBatchJob", "metadata": {"name": name}, "spec": base}


def _apply(cluster: Cluster, namespace: str, obj: dict[str, Any]) -> Any:
    return cluster.run_kubectl(
        "apply", "--server-side", "-n", namespace, "-f", "-", check=False, input=yaml.safe_dump(obj)
    )


@pytest.mark.cluster
def test_every_crd_is_established(cluster: Cluster) -> None:
    names = {c["metadata"]["name"] for c in kubectl_json(cluster, "get", "crd")["items"]}  # type: ignore[attr-defined]
    assert {"llmbatchjobs.barge.dev", "inferencepools.barge.dev"} <= names
    assert {
        "scaledobjects.keda.sh",
        "triggerauthentications.keda.sh",
        "servicemonitors.monitoring.coreos.com",
        "inferencepools.inference.networking.k8s.io",
    } <= names


@pytest.mark.cluster
@pytest.mark.parametrize("path", SAMPLES, ids=lambda p: p.name)
def test_sample_applies_server_side(cluster: Cluster, namespace: str, path: Path) -> None:
    out = cluster.run_kubectl("apply", "--server-side", "-n", namespace, "-f", str(path), check=False)
    assert out.returncode == 0, out.stderr
    for doc in yaml.safe_load_all(path.read_text()):
        got = kubectl_json(cluster, "get", doc["kind"].lower(), doc["metadata"]["name"], "-n", namespace)
        field = {"InferencePool": "model", "LLMBatchSchedule": "schedule"}.get(doc["kind"], "provider")
        assert got["spec"][field]  # type: ignore[index]


@pytest.mark.cluster
def test_printer_columns_and_short_names(cluster: Cluster, namespace: str) -> None:
    cluster.run_kubectl("apply", "--server-side", "-n", namespace, "-f", str(REPO / "manifests" / "samples"))
    header = cluster.run_kubectl("get", "llmbatchjobs", "-n", namespace).stdout.splitlines()[0].split()
    assert header == ["NAME", "PHASE", "DONE", "FAILED", "COST", "DEADLINE", "AGE"]
    wide = cluster.run_kubectl("get", "lbj", "-o", "wide", "-n", namespace).stdout.splitlines()
    assert wide[0].split() == [
        "NAME",
        "PHASE",
        "DONE",
        "FAILED",
        "COST",
        "DEADLINE",
        "AGE",
        "PROVIDER",
        "MODEL",
        "TENANT",
        "REFUSED",
        "INVALID",
        "INVALIDOUTPUT",
        "SAVED",
    ]
    assert any("claims-anthropic" in line and "claude-sonnet-4-6" in line for line in wide[1:])
    pools = cluster.run_kubectl("get", "bpool", "-n", namespace).stdout.splitlines()
    assert pools[0].split() == ["NAME", "MODEL", "READY", "ENDPOINT", "AGE"]
    everything = cluster.run_kubectl("get", "barge", "-n", namespace, "-o", "name").stdout.split()
    assert "llmbatchjob.barge.dev/claims-anthropic" in everything
    assert "inferencepool.barge.dev/azure-mini" in everything


@pytest.mark.cluster
@pytest.mark.parametrize(
    ("spec", "field", "words"),
    [
        (
            {"input": {"url": "s3://b/a.jsonl", "inline": [{"id": "1", "text": "x"}]}},
            "spec.input",
            "exactly one of spec.input.url, spec.input.configMapRef, spec.input.inline",
        ),
        (
            {"provider": {"type": "cohere", "model": "m", "secretRef": {"name": "s"}}},
            "spec.provider.type",
            "Unsupported value",
        ),
        ({"provider": {"type": "pool"}}, "spec.provider.poolRef", "poolRef.name is required"),
        ({"request": {"maxTokens": -5}}, "spec.request.maxTokens", "greater than or equal to 1"),
        ({"customId": "{id}-{date}"}, "spec.customId", "should match"),
        ({"successRatio": "2"}, "spec.successRatio", "should match"),
    ],
    ids=[
        "two-input-sources",
        "bad-provider-type",
        "pool-without-poolRef",
        "negative-maxTokens",
        "unknown-customId-placeholder",
        "ratio-over-one",
    ],
)
def test_invalid_jobs_are_rejected_naming_the_field(
    cluster: Cluster, namespace: str, spec: dict[str, Any], field: str, words: str
) -> None:
    out = _apply(cluster, namespace, _job("bad", **spec))
    assert out.returncode != 0, out.stdout
    assert field in out.stderr, out.stderr
    assert words in out.stderr, out.stderr
    assert cluster.run_kubectl("get", "lbj", "bad", "-n", namespace, check=False).returncode != 0


@pytest.mark.cluster
def test_pool_rules_are_enforced_by_the_server(cluster: Cluster, namespace: str) -> None:
    bad = {
        "apiVersion": "barge.dev/v1alpha1",
        "kind": "InferencePool",
        "metadata": {"name": "p"},
        "spec": {"model": "m", "engine": {"gpus": 1, "tensorParallelSize": 4}},
    }
    out = _apply(cluster, namespace, bad)
    assert out.returncode != 0
    assert "tensorParallelSize must not exceed" in out.stderr
    neither = {**bad, "spec": {"model": "m"}}
    out = _apply(cluster, namespace, neither)
    assert "exactly one of spec.engine and spec.provider" in out.stderr


@pytest.mark.cluster
def test_spec_is_immutable_except_suspend_deadline_ratio_budget(cluster: Cluster, namespace: str) -> None:
    assert _apply(cluster, namespace, _job("imm")).returncode == 0
    created = kubectl_json(cluster, "get", "lbj", "imm", "-n", namespace)
    assert created["spec"]["retry"] == {"maxAttempts": 3}  # type: ignore[index]  # defaults applied by the server

    def patch(spec: dict[str, Any]) -> Any:
        return cluster.run_kubectl(
            "patch", "lbj", "imm", "-n", namespace, "--type=merge", "-p", json.dumps({"spec": spec}), check=False
        )

    for immutable, field in [
        ({"request": {"maxTokens": 5}}, "spec.request"),
        ({"provider": {"model": "claude-haiku-4-5"}}, "spec.provider"),
        ({"input": {"url": "s3://bucket/other.jsonl"}}, "spec.input"),
        ({"tenant": "someone-else"}, "spec.tenant"),
    ]:
        out = patch(immutable)
        assert out.returncode != 0, f"{field} changed: {out.stdout}"
        assert f"{field} is immutable" in out.stderr
    for mutable in [
        {"suspend": True},
        {"deadline": "2030-01-01T00:00:00Z"},
        {"successRatio": "0.9"},
        {"budget": {"maxCostUSD": "10"}},
    ]:
        out = patch(mutable)
        assert out.returncode == 0, out.stderr
    spec = kubectl_json(cluster, "get", "lbj", "imm", "-n", namespace)["spec"]
    assert spec["suspend"] is True  # type: ignore[index]
    assert spec["budget"] == {"maxCostUSD": "10"}  # type: ignore[index]


@pytest.mark.cluster
def test_status_is_a_subresource(cluster: Cluster, namespace: str) -> None:
    assert _apply(cluster, namespace, _job("st")).returncode == 0
    body = json.dumps({"status": {"phase": "Running", "progress": "1/2"}})
    cluster.run_kubectl("patch", "lbj", "st", "-n", namespace, "--type=merge", "-p", body)
    # Ignored on the main resource: the status stays the server's default (observedGeneration 0, for kstatus).
    status = kubectl_json(cluster, "get", "lbj", "st", "-n", namespace)["status"]
    assert status["phase"] == "Pending"
    assert status["observedGeneration"] == 0
    assert status["progress"] == ""
    cluster.run_kubectl("patch", "lbj", "st", "-n", namespace, "--type=merge", "--subresource=status", "-p", body)
    row = cluster.run_kubectl("get", "lbj", "st", "-n", namespace, "--no-headers").stdout.split()
    assert row[1:3] == ["Running", "1/2"]


@pytest.mark.cluster
def test_rbac_is_enforced_for_service_account_tokens(cluster: Cluster, namespace: str) -> None:
    token = cluster.token(namespace, "reader")
    as_reader = ["--token", token, "--kubeconfig", str(cluster.kubeconfig), "-n", namespace]
    denied = cluster.run_kubectl("get", "lbj", *as_reader, check=False)
    assert denied.returncode != 0
    assert "forbidden" in denied.stderr
    cluster.run_kubectl(
        "-n", namespace, "create", "role", "lbj-reader", "--verb=get,list,watch", "--resource=llmbatchjobs.barge.dev"
    )
    cluster.run_kubectl(
        "-n",
        namespace,
        "create",
        "rolebinding",
        "lbj-reader",
        "--role=lbj-reader",
        f"--serviceaccount={namespace}:reader",
    )
    allowed = cluster.run_kubectl("get", "lbj", *as_reader, check=False)
    assert allowed.returncode == 0, allowed.stderr
    assert "forbidden" in cluster.run_kubectl("get", "secrets", *as_reader, check=False).stderr
