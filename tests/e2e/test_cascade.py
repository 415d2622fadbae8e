"""The cascade on the local control plane (issue 29, point 4): the sample claims-cascade.yaml, stage 2 fed by
stage 1's results (spec.input.fromJob) as its batches land, against the emulator."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Callable
from datetime import datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
import yaml
from tools.localcluster import Cluster

from barge.cli.demo_data import claims
from barge.emulator.server import EmulatorThread
from tests.conftest import REPO, kubectl_json, state
from tests.e2e.conftest import SECRET, Operator, credential_secret, wait_for

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(600)]
SAMPLE = REPO / "manifests" / "samples" / "claims-cascade.yaml"


def cascade_docs(url: str, workdir: Path, n: int) -> list[dict[str, Any]]:
    """The sample's two stages, pointed at the emulator and at `n` generated claims under `workdir`."""
    data = workdir / "cascade-claims.jsonl"
    data.write_bytes(b"".join(line + b"\n" for line in claims(n)))
    docs = [d for d in yaml.safe_load_all(SAMPLE.read_text()) if d]
    for doc in docs:
        spec = doc["spec"]
        spec.pop("tenant", None)
        spec["provider"]["baseURL"] = url
        spec["output"]["url"] = f"file://{workdir}/{doc['metadata']['name']}-out/"
        spec["successRatio"] = "0.9"  # the emulator's server errors: a few items fail after 3 attempts
        if "url" in spec["input"]:
            spec["input"]["url"] = f"file://{data}"
    return docs


def status(cluster: Cluster, namespace: str, name: str) -> dict[str, Any]:
    return kubectl_json(cluster, "-n", namespace, "get", "lbj", name).get("status") or {}  # type: ignore[return-value]


def condition(cluster: Cluster, namespace: str, name: str, kind: str) -> dict[str, Any]:
    found = [c for c in status(cluster, namespace, name).get("conditions", []) if c.get("type") == kind]
    return found[0] if found else {}


def apply(cluster: Cluster, namespace: str, doc: dict[str, Any]) -> None:
    cluster.run_kubectl("-n", namespace, "apply", "-f", "-", input=yaml.safe_dump(doc))


def lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()]


def baseline(manifest: Path) -> tuple[Decimal, Decimal]:
    """`barge plan` of the pipeline: (cascade total, all-large baseline), batch prices."""
    out = subprocess.run(
        [sys.executable, "-m", "barge.cli", "plan", str(manifest)], capture_output=True, text=True, check=True
    ).stdout
    total = re.search(r"cascade total: batch \$([0-9.]+)", out)
    large = re.search(r"all-large baseline \([^)]*\): batch \$([0-9.]+)", out)
    assert total, out
    assert large, out
    return Decimal(total.group(1)), Decimal(large.group(1))


def test_cascade_stage_two_starts_early_takes_exactly_the_selected_and_costs_less(
    cluster: Cluster, namespace: str, operator: Operator, start_emulator: Callable[..., EmulatorThread]
) -> None:
    # server errors make stage 1 retry in later batches: its first results land while it still runs
    emu = start_emulator({"batch": {"processingSeconds": 5, "outcomes": {"server_error": 0.3}}})
    credential_secret(cluster, namespace, "anthropic", {"api-key": SECRET})
    classify, summarise = cascade_docs(emu.url, operator.workdir, 600)
    manifest = operator.workdir / "cascade.yaml"
    manifest.write_text(yaml.safe_dump_all([classify, summarise]))
    planned_total, all_large = baseline(manifest)
    assert planned_total < all_large

    apply(cluster, namespace, summarise)  # before its upstream exists: it waits, saying for what
    waiting = wait_for(
        lambda: (
            condition(cluster, namespace, "claims-summarise", "Admitted").get("reason") == "WaitingForUpstream"
            and condition(cluster, namespace, "claims-summarise", "Admitted")
        ),
        60,
        "WaitingForUpstream",
    )
    assert "claims-classify" in waiting["message"]
    assert status(cluster, namespace, "claims-summarise")["phase"] == "Pending"

    apply(cluster, namespace, classify)

    def ended(name: str) -> Callable[[], bool]:
        return lambda: status(cluster, namespace, name).get("phase") in ("Succeeded", "Failed")

    for name in ("claims-classify", "claims-summarise"):
        wait_for(ended(name), 240, name)
    up, down = status(cluster, namespace, "claims-classify"), status(cluster, namespace, "claims-summarise")
    assert up["phase"] == "Succeeded", up["message"]
    assert down["phase"] == "Succeeded", down["message"]

    # exactly the selected items: stage 1's succeeded results whose claim is a fire (the emulator answers no
    # JSON, so the select's second arm decides), each sent to the large model, none other
    inputs = {c["id"]: c for c in map(json.loads, (operator.workdir / "cascade-claims.jsonl").read_text().splitlines())}
    upstream = lines(operator.workdir / "claims-classify-out" / "results.jsonl")
    expected = {r["id"] for r in upstream if r["status"] == "succeeded" and "fire" in inputs[r["id"]]["text"]}
    assert 0 < len(expected) < len(upstream)
    out = operator.workdir / "claims-summarise-out"
    taken = {r["id"] for r in lines(out / "results.jsonl")} | {r["id"] for r in lines(out / "failures.jsonl")}
    assert taken == expected
    batches = state(emu)["batches"]
    sent = {cid.split("-")[1] for b in batches for cid in b["custom_ids"] if cid.startswith("sum-")}
    assert sent == expected

    # stage 2 submitted before stage 1 ended
    first_down = min(b["created_at"] for b in batches if b["custom_ids"][0].startswith("sum-"))
    up_done = datetime.fromisoformat(up["completedAt"]).timestamp()
    assert first_down < up_done, "stage 2's first batch was created before stage 1 completed"
    events: list[dict[str, Any]] = kubectl_json(cluster, "-n", namespace, "get", "events")["items"]  # type: ignore[assignment]
    reasons = [e["reason"] for e in events]
    assert reasons.count("Fed") >= 2, "stage 2 took stage 1's results in more than one wave"

    # the pipeline cost less than sending every claim to the large model, as barge plan printed it
    spent = Decimal(up["usage"]["costUSD"]) + Decimal(down["usage"]["costUSD"])
    assert 0 < spent < all_large


def test_fromjob_in_another_namespace_is_refused(
    cluster: Cluster, namespace: str, operator: Operator, start_emulator: Callable[..., EmulatorThread]
) -> None:
    emu = start_emulator()
    credential_secret(cluster, namespace, "anthropic", {"api-key": SECRET})
    _, summarise = cascade_docs(emu.url, operator.workdir, 10)
    summarise["metadata"]["name"] = "elsewhere"
    summarise["spec"]["input"]["fromJob"]["namespace"] = "kube-system"
    apply(cluster, namespace, summarise)
    refused = wait_for(
        lambda: (
            condition(cluster, namespace, "elsewhere", "Admitted").get("reason") == "CrossNamespace"
            and condition(cluster, namespace, "elsewhere", "Admitted")
        ),
        60,
        "CrossNamespace",
    )
    assert "kube-system" in refused["message"]
    assert not [b for b in state(emu)["batches"]], "nothing was sent"
