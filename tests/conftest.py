"""Fixtures shared by every test tier.

`cluster` starts a real etcd + kube-apiserver on loopback (binaries built from Go modules and cached under
~/.cache/barge/bin) once per session, installs Barge's CRDs and the upstream KEDA, Prometheus Operator and
Gateway API Inference Extension CRDs from ../shared/reference/crds, and stops everything at the end.
Set BARGE_TEST_KUBECONFIG to reuse a running control plane instead (e.g. one from `make cluster-up`).
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from tools import localcluster

REPO = Path(__file__).resolve().parent.parent
SHARED = Path(os.environ.get("BARGE_SHARED_DIR", REPO.parent / "shared"))
REFERENCE_CRDS = [
    SHARED / "reference" / "crds" / d for d in ("keda", "prometheus-operator", "gateway-api-inference-extension")
]


def _wait_established(cluster: localcluster.Cluster, names: list[str]) -> None:
    deadline = time.monotonic() + 60
    for name in names:
        while True:
            out = cluster.run_kubectl("get", "crd", name, "-o", "json", check=False)
            if out.returncode == 0:
                conds = json.loads(out.stdout).get("status", {}).get("conditions", [])
                if any(c["type"] == "Established" and c["status"] == "True" for c in conds):
                    break
            if time.monotonic() > deadline:
                raise TimeoutError(f"CRD {name} not Established: {out.stdout or out.stderr}")
            time.sleep(0.2)


def install_crds(cluster: localcluster.Cluster, *paths: Path) -> list[str]:
    names = []
    for path in paths:
        out = cluster.run_kubectl("apply", "--server-side", "-f", str(path), "-o", "name")
        names += [line.split("/", 1)[1] for line in out.stdout.split()]
    _wait_established(cluster, names)
    return names


@pytest.fixture(scope="session")
def cluster() -> Iterator[localcluster.Cluster]:
    reuse = os.environ.get("BARGE_TEST_KUBECONFIG")
    if reuse:
        running = localcluster.Cluster(Path(reuse).parent, "", Path(reuse), localcluster.build()["kubectl"])
        install_crds(running, REPO / "crds", *[p for p in REFERENCE_CRDS if p.exists()])
        yield running
        return
    with tempfile.TemporaryDirectory(prefix="barge-cluster-") as tmp:
        started = time.monotonic()
        running = localcluster.up(Path(tmp) / "cluster")
        try:
            install_crds(running, REPO / "crds", *[p for p in REFERENCE_CRDS if p.exists()])
            print(f"\ncontrol plane + CRDs ready in {time.monotonic() - started:.1f}s")
            yield running
        finally:
            localcluster.down(Path(tmp) / "cluster")


@pytest.fixture
def namespace(cluster: localcluster.Cluster, request: pytest.FixtureRequest) -> str:
    """A fresh namespace per test (namespaces never finish deleting here: no controllers run)."""
    name = f"t-{request.node.name.lower().replace('_', '-')[:40].strip('-')}-{os.urandom(2).hex()}"
    name = "".join(ch if ch.isalnum() or ch == "-" else "-" for ch in name)
    cluster.run_kubectl("create", "namespace", name)
    return name


def kubectl_json(cluster: localcluster.Cluster, *args: str) -> dict[str, object]:
    out = cluster.run_kubectl(*args, "-o", "json")
    return json.loads(out.stdout)  # type: ignore[no-any-return]
