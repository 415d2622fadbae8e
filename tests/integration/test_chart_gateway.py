"""gateway.enabled in the chart, rendered by the real helm: off by default; on, a restricted-PSS Deployment whose
pods no operator selector matches, its Service, and exactly the RBAC the gateway needs."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from tools import localcluster

CHART = Path(__file__).resolve().parents[2] / "charts" / "barge"


@pytest.fixture(scope="module")
def helm() -> Path:
    return localcluster.build(argocd=False)["helm"]


def render(helm: Path, *sets: str) -> list[dict[str, Any]]:
    out = subprocess.run(
        [
            str(helm),
            "template",
            "barge",
            str(CHART),
            "--namespace",
            "barge-system",
            *(a for s in sets for a in ("--set", s)),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return [d for d in yaml.safe_load_all(out.stdout) if d]


def gateway_objects(docs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {d["kind"]: d for d in docs if d["metadata"]["name"].endswith("-gateway")}


def test_off_by_default(helm: Path) -> None:
    assert gateway_objects(render(helm)) == {}


def test_on_renders_a_restricted_deployment_its_service_and_only_the_rbac_it_needs(helm: Path) -> None:
    docs = render(helm, "gateway.enabled=true", "gateway.audience=batches", "gateway.maxUploadBytes=1000000")
    objs = gateway_objects(docs)
    assert set(objs) == {"ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Deployment", "Service"}
    rules = {(r["apiGroups"][0], r["resources"][0]): r["verbs"] for r in objs["ClusterRole"]["rules"]}
    assert rules == {
        ("authentication.k8s.io", "tokenreviews"): ["create"],
        ("authorization.k8s.io", "subjectaccessreviews"): ["create"],
        ("", "namespaces"): ["get"],
        ("barge.dev", "llmbatchjobs"): ["create", "get", "list", "patch", "delete"],
        ("barge.dev", "inferencepools"): ["get"],
    }
    pod = objs["Deployment"]["spec"]["template"]
    container = pod["spec"]["containers"][0]
    assert container["args"][0] == "gateway"
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["BARGE_GATEWAY_AUDIENCE"] == "batches"
    assert env["BARGE_GATEWAY_MAX_UPLOAD_BYTES"] == "1000000"
    sc = container["securityContext"]
    assert sc["readOnlyRootFilesystem"] is True
    assert sc["allowPrivilegeEscalation"] is False
    assert sc["capabilities"]["drop"] == ["ALL"]
    assert pod["spec"]["securityContext"]["runAsNonRoot"] is True
    assert pod["spec"]["serviceAccountName"] == objs["ServiceAccount"]["metadata"]["name"]
    labels = pod["metadata"]["labels"]
    operator = next(d for d in docs if d["kind"] == "Deployment" and d is not objs["Deployment"])
    selector = operator["spec"]["selector"]["matchLabels"]
    assert not all(labels.get(k) == v for k, v in selector.items())  # the operator's selector never takes them
    assert objs["Service"]["spec"]["selector"] == objs["Deployment"]["spec"]["selector"]["matchLabels"]


def test_the_schema_refuses_an_unknown_gateway_value(helm: Path) -> None:
    with pytest.raises(subprocess.CalledProcessError) as caught:
        render(helm, "gateway.enabled=true", "gateway.maxUploadByte=5")
    assert "maxUploadByte" in caught.value.stderr
