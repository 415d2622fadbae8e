"""A real node for the tests in tests/node: the control plane of tools/localcluster.py with a kubelet, a scheduler
and containerd (tools/localnode.py), Barge's image from `make image` (tools/image.py) imported into it.

One node per session (and per machine: the kubelet owns the host's /kubepods cgroups). Its teardown is checked:
no process, mount or cgroup left, the sysctls the kubelet changed restored.
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from tools import image, localcluster, localnode


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The first test on the node pays for the image build (~6 min cold on 2 busy cores) and the node's start."""
    for item in items:
        if "tests/node/" in str(item.path) and not item.get_closest_marker("timeout"):
            item.add_marker(pytest.mark.timeout(1800))


@pytest.fixture(scope="session")
def barge_image() -> Path:
    """The image of the code under test (BARGE_IMAGE_ANY=1: the newest built, while iterating on tests only)."""
    return (image.latest_archive() if os.environ.get("BARGE_IMAGE_ANY") == "1" else None) or image.build()


@pytest.fixture(scope="session")
def node(barge_image: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[localcluster.Cluster]:
    reuse = os.environ.get("BARGE_TEST_NODE_DIR")  # a node started by `localcluster.py up --node --dir D`, kept
    if reuse:
        yield localcluster.up(Path(reuse), node=True)
        return
    directory = tmp_path_factory.mktemp("node")
    sysctls = {name: (Path("/proc/sys") / name).read_text() for name in localnode.SYSCTLS}
    started = time.monotonic()
    cluster = localcluster.up(directory, node=True, images={image.TAG.rsplit(":", 1)[0]: barge_image})
    print(f"node up in {time.monotonic() - started:.1f}s")
    # No CRDs here: the chart installs Barge's (helm refuses to adopt CRDs it did not create).
    yield cluster
    localcluster.down(directory)
    assert localnode.leftovers(directory) == {"processes": [], "mounts": [], "cgroups": []}
    assert {name: (Path("/proc/sys") / name).read_text() for name in localnode.SYSCTLS} == sysctls


def get_json(cluster: localcluster.Cluster, *args: str) -> Any:
    return json.loads(cluster.run_kubectl("get", *args, "-o", "json").stdout)


def wait_for(what: str, ok: Callable[[], Any], timeout: float = 180, every: float = 1.0) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = ok()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not reached in {timeout:.0f}s")
        time.sleep(every)


def pod_ready(pod: dict[str, Any]) -> bool:
    conditions = {c["type"]: c["status"] for c in pod.get("status", {}).get("conditions", [])}
    return conditions.get("Ready") == "True"


def free_port() -> int:
    return localcluster._free_port()


def run(*args: str, **kwargs: Any) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, check=True, capture_output=True, text=True, **kwargs)


IMAGE = "localhost/barge:dev"
OPERATOR_NAMESPACE = "barge-system"


def apply(cluster: localcluster.Cluster, *objects: dict[str, Any]) -> None:
    cluster.run_kubectl("apply", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List", "items": objects}))


def helm(cluster: localcluster.Cluster, *args: str, timeout: float = 400) -> subprocess.CompletedProcess[str]:
    binary = localcluster.build(argocd=False)["helm"]
    done = subprocess.run(
        [str(binary), *args], env=cluster.env(), capture_output=True, text=True, timeout=timeout, check=False
    )
    assert done.returncode == 0, f"helm {args[0]}: {done.stderr}"
    return done


def emulator_pod(name: str, namespace: str, port: int, profile: str) -> list[dict[str, Any]]:
    """A Pod of Barge's image running `barge emulator` on 127.0.0.1:`port` with `profile` (YAML text, from a
    ConfigMap), as UID 10001 on a read-only root filesystem, Ready when it answers; and that ConfigMap."""
    return [
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": f"{name}-profile", "namespace": namespace},
            "data": {"p.yaml": profile},
        },
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "namespace": namespace, "labels": {"app": name}},
            "spec": {
                "hostNetwork": True,
                "dnsPolicy": "ClusterFirstWithHostNet",
                "securityContext": {"runAsUser": 10001, "runAsNonRoot": True},
                "containers": [
                    {
                        "name": "emulator",
                        "image": IMAGE,
                        "imagePullPolicy": "Never",
                        "args": ["emulator", "--host", "127.0.0.1", "--port", str(port), "--profile", "/p/p.yaml"],
                        "securityContext": {"readOnlyRootFilesystem": True, "allowPrivilegeEscalation": False},
                        "readinessProbe": {
                            "httpGet": {"host": "127.0.0.1", "port": port, "path": "/_emulator/state"},
                            "periodSeconds": 1,
                        },
                        "volumeMounts": [{"name": "profile", "mountPath": "/p"}],
                    }
                ],
                "volumes": [{"name": "profile", "configMap": {"name": f"{name}-profile"}}],
            },
        },
    ]


def emulator_state(port: int) -> dict[str, Any]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/_emulator/state", timeout=10) as answer:
        return json.loads(answer.read())  # type: ignore[no-any-return]


def tenant_namespace(name: str, tenant: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": {"barge.dev/tenant": tenant}}}


def credential(namespace: str, name: str, value: str = "node-test-key-not-a-real-one") -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": name, "namespace": namespace, "labels": {"barge.dev/credential": "true"}},
        "stringData": {"api-key": value},
    }


def chart_values(
    cluster: localcluster.Cluster, metrics_port: int, env: dict[str, str] | None = None, **more: Any
) -> dict[str, Any]:
    """The chart's values on this node (README, "Run it on a real node locally"): the imported image, the host's
    network, the API server at 127.0.0.1, `env` added; `more` merged over them (one level deep)."""
    values: dict[str, Any] = {
        "image": {"repository": IMAGE.rsplit(":", 1)[0], "tag": "dev", "pullPolicy": "Never"},
        "hostNetwork": True,
        "dnsPolicy": "ClusterFirstWithHostNet",
        "extraEnv": [
            {"name": "KUBERNETES_SERVICE_HOST", "value": "127.0.0.1"},
            {"name": "KUBERNETES_SERVICE_PORT", "value": cluster.server.rsplit(":", 1)[1]},
            *({"name": k, "value": v} for k, v in (env or {}).items()),
        ],
        "metrics": {"port": metrics_port},
    }
    for key, value in more.items():
        values[key] = {**values[key], **value} if isinstance(value, dict) and key in values else value
    return values


def operator_pods(cluster: localcluster.Cluster, release: str = "barge") -> list[dict[str, Any]]:
    selector = f"app.kubernetes.io/name=barge,app.kubernetes.io/instance={release}"
    pods = get_json(cluster, "-n", OPERATOR_NAMESPACE, "pods", "-l", selector)["items"]
    return [p for p in pods if not p["metadata"].get("deletionTimestamp")]


def file_policy(data: Path) -> dict[str, Any]:
    """The admin's policy of the node tests: files under `data`, the emulator's loopback address allowed."""
    return {
        "storage": {"prefixes": [f"file://{data}/"]},
        "endpoints": {"allow": [{"host": "127.0.0.1", "private": True}]},
    }


def ledger_secret(cluster: localcluster.Cluster, name: str, url: str) -> None:
    """The Secret holding the PostgreSQL ledger's URL, in the operator's namespace (made if need be)."""
    cluster.run_kubectl("create", "namespace", OPERATOR_NAMESPACE, check=False)
    secret = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": name, "namespace": OPERATOR_NAMESPACE},
        "data": {"url": base64.b64encode(url.encode()).decode()},
    }
    apply(cluster, secret)


def crds_installed(cluster: localcluster.Cluster) -> bool:
    """Barge's CRDs are there already (an earlier release kept them): the next release must not install them."""
    return cluster.run_kubectl("get", "crd", "llmbatchjobs.barge.dev", check=False).returncode == 0
