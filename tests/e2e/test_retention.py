"""Retention through the operator: the real API server accepts spec.retention (CRD schema), the operator's default
deletes a finished job's Anthropic batches at the emulator, and a job that opts out keeps them."""

from __future__ import annotations

import pytest
from tools.localcluster import Cluster

from barge.emulator.server import EmulatorThread
from tests.conftest import kubectl_json, state
from tests.e2e.conftest import Operator, wait_for
from tests.e2e.test_operator import apply, job_manifest, phase_is, secret, status

pytestmark = pytest.mark.cluster


def test_operator_deletes_provider_copies_unless_the_job_keeps_them(
    cluster: Cluster, namespace: str, operator: Operator, emulator: EmulatorThread
) -> None:
    secret(cluster, namespace)
    apply(cluster, namespace, job_manifest("clean", emulator.url, operator.workdir, n=300))
    apply(
        cluster,
        namespace,
        job_manifest(
            "keep",
            emulator.url,
            operator.workdir,
            n=300,
            retention={"deleteProviderCopies": False, "keepOutputsFor": "1d"},
        ),
    )
    for name in ("clean", "keep"):
        wait_for(phase_is(cluster, namespace, name, "Succeeded"), 120, f"{name} Succeeded")
    ids = {name: {b["id"] for b in status(cluster, namespace, name)["batches"]} for name in ("clean", "keep")}
    archived = {b["id"]: b["archived"] for b in state(emulator)["batches"]}
    assert ids["clean"]
    assert ids["keep"]
    assert all(archived[i] for i in ids["clean"]), "the finished job's batches are deleted at the provider"
    assert not any(archived[i] for i in ids["keep"]), "the job that keeps its provider copies keeps them"
    events = kubectl_json(cluster, "-n", namespace, "get", "events")["items"]  # type: ignore[index]
    deleted = {e["involvedObject"]["name"] for e in events if e["reason"] == "ProviderCopiesDeleted"}
    assert deleted == {"clean"}
