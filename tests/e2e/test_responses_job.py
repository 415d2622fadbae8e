"""spec.request.endpoint responses on the local control plane: the operator, a real kube-apiserver, the emulator.

An OpenAI job of /v1/responses batches whose structured answers break the schema half the time: the broken ones
are retried, then failed with the validation error (kubectl get lbj -o wide's InvalidOutput column), the valid
ones carry output_json; every batch the emulator saw was a /v1/responses one. The same job on Azure OpenAI is
refused at admission (Admitted=False, InvalidSpec) naming why, nothing sent.
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
from tests.e2e.conftest import SECRET, Operator, credential_secret, wait_for
from tests.e2e.test_operator import apply, job_manifest, phase_is, status

pytestmark = pytest.mark.cluster


def responses_manifest(name: str, url: str, operator: Operator, n: int, kind: str = "openai") -> str:
    doc = yaml.safe_load(job_manifest(name, url, operator.workdir, n=n))
    doc["spec"]["provider"] = {
        "type": kind,
        "model": "gpt-4.1-mini" if kind == "openai" else "gpt-4o-mini-batch",
        "secretRef": {"name": "openai", "key": "api-key"},
        "baseURL": f"{url}/v1" if kind == "openai" else url,
    }
    doc["spec"]["request"]["endpoint"] = "responses"
    doc["spec"]["request"]["responseFormat"] = {"name": "claim", "schema": SCHEMA}
    doc["spec"]["successRatio"] = "0.5"
    return yaml.safe_dump(doc)


def test_a_responses_job_checks_its_answers_and_kubectl_shows_the_broken_ones(
    cluster: Cluster, namespace: str, operator: Operator, start_emulator: Callable[..., EmulatorThread]
) -> None:
    emu = start_emulator({"batch": {"outcomes": {"schema_violation": 0.5}}})
    credential_secret(cluster, namespace, "openai", {"api-key": SECRET})
    apply(cluster, namespace, responses_manifest("resp", emu.url, operator, 120))
    wait_for(phase_is(cluster, namespace, "resp", "Succeeded", "Failed"), 180, "a terminal phase")
    st = status(cluster, namespace, "resp")
    out = operator.workdir / "resp-out"
    results = [json.loads(x) for x in (out / "results.jsonl").read_text().splitlines()]
    failures = [json.loads(x) for x in (out / "failures.jsonl").read_text().splitlines()]
    assert len(results) + len(failures) == 120
    assert results, "most items pass within 3 attempts"
    assert failures, "some items broke the schema on all 3 attempts"
    assert {f["error_type"] for f in failures} == {"invalid_output"}
    assert all("the answer breaks the schema" in f["reason"] for f in failures)
    assert all(r["output_json"] == EXPECTED for r in results)
    assert {b.endpoint for b in emu.store.batches.values()} == {"/v1/responses"}
    assert st["counts"]["invalidOutput"] == len(failures)
    header, row = cluster.run_kubectl("-n", namespace, "get", "lbj", "resp", "-o", "wide").stdout.splitlines()
    at = header.index("INVALIDOUTPUT")
    assert row[at:].split()[0] == str(len(failures))


def test_a_responses_job_on_azure_is_refused_naming_why(
    cluster: Cluster, namespace: str, operator: Operator, emulator: EmulatorThread
) -> None:
    credential_secret(cluster, namespace, "openai", {"api-key": SECRET})
    apply(cluster, namespace, responses_manifest("resp-azure", emulator.url, operator, 5, kind="azure-openai"))

    def refused() -> dict[str, Any] | None:
        conds = {c["type"]: c for c in status(cluster, namespace, "resp-azure").get("conditions") or []}
        admitted = conds.get("Admitted", {})
        return admitted if admitted.get("status") == "False" else None

    admitted = wait_for(refused, 60, "Admitted=False")
    assert admitted["reason"] == "InvalidSpec"
    assert "spec.request.endpoint responses is not offered by azure-openai" in admitted["message"]
    assert "Azure OpenAI Global Batch takes /chat/completions and /embeddings lines" in admitted["message"]
    assert not emulator.store.batches, "nothing was sent"
