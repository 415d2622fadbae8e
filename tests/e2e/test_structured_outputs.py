"""Checked structured outputs on the local control plane: the operator, a real kube-apiserver, the emulator.

A job whose answers break its spec.request.responseFormat half the time: the broken ones are retried, then failed
with the validation error, `kubectl get lbj -o wide` shows them in its InvalidOutput column, and the valid ones
carry output_json. A job whose schema is not a JSON Schema is refused with a condition naming why.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
import yaml
from tools.localcluster import Cluster

from barge.emulator.server import EmulatorThread
from tests.contract.test_structured_tools import EXPECTED, SCHEMA
from tests.e2e.conftest import Operator, wait_for
from tests.e2e.test_operator import apply, job_manifest, phase_is, secret, status

pytestmark = pytest.mark.cluster


def structured_manifest(name: str, url: str, operator: Operator, n: int, schema: Any) -> str:
    doc = yaml.safe_load(job_manifest(name, url, operator.workdir, n=n))
    doc["spec"]["request"]["responseFormat"] = {"name": "claim", "schema": schema}
    doc["spec"]["successRatio"] = "0.5"
    return yaml.safe_dump(doc)


def test_broken_outputs_retried_then_failed_and_shown_by_kubectl(
    cluster: Cluster, namespace: str, operator: Operator, start_emulator: Callable[..., EmulatorThread]
) -> None:
    emu = start_emulator({"batch": {"outcomes": {"schema_violation": 0.5}}})
    secret(cluster, namespace)
    apply(cluster, namespace, structured_manifest("checked", emu.url, operator, 200, SCHEMA))
    wait_for(phase_is(cluster, namespace, "checked", "Succeeded", "Failed"), 180, "a terminal phase")
    st = status(cluster, namespace, "checked")
    out = operator.workdir / "checked-out"
    results = [json.loads(x) for x in (out / "results.jsonl").read_text().splitlines()]
    failures = [json.loads(x) for x in (out / "failures.jsonl").read_text().splitlines()]
    assert len(results) + len(failures) == 200
    assert failures, "some items broke the schema on all 3 attempts"
    assert {f["error_type"] for f in failures} == {"invalid_output"}
    assert all("the answer breaks the schema" in f["reason"] for f in failures)
    assert all(r["output_json"] == EXPECTED for r in results)
    assert st["counts"]["invalidOutput"] == len(failures)
    header, row = cluster.run_kubectl("-n", namespace, "get", "lbj", "checked", "-o", "wide").stdout.splitlines()
    at = header.index("INVALIDOUTPUT")  # by position: an empty column (no tenant, no deadline) prints nothing
    assert row[at:].split()[0] == str(len(failures))
    assert len(emu.store.batches) >= 3, "broken answers were resubmitted, twice for those that failed"


def test_a_schema_that_is_not_a_json_schema_is_refused_with_a_condition(
    cluster: Cluster, namespace: str, operator: Operator, emulator: EmulatorThread
) -> None:
    secret(cluster, namespace)
    apply(cluster, namespace, structured_manifest("badschema", emulator.url, operator, 5, {"type": "objekt"}))

    def refused() -> dict[str, Any] | None:
        conds = {c["type"]: c for c in status(cluster, namespace, "badschema").get("conditions") or []}
        admitted = conds.get("Admitted", {})
        return admitted if admitted.get("status") == "False" else None

    admitted = wait_for(refused, 60, "Admitted=False")
    assert admitted["reason"] == "InvalidSpec"
    assert "responseFormat.schema is not a valid JSON Schema" in admitted["message"]
    assert not emulator.store.batches, "nothing was sent"
