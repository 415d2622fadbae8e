"""The operator's in-cluster login (barge/operator/login.py) against the real API server: a ServiceAccount token
minted by the TokenRequest API in a fake mount directory, KUBERNETES_SERVICE_HOST=127.0.0.1 and the local API
server's port, then a list through Kopf's credentials and through the operator's own kubernetes_asyncio client."""

from __future__ import annotations

import asyncio
from pathlib import Path
from urllib.parse import urlsplit

import aiohttp
import kopf
import pytest
import yaml
from tools import localcluster

from barge.operator import kube, login
from tests.conftest import wait_until


@pytest.fixture
def mounted(cluster: localcluster.Cluster, namespace: str, tmp_path: Path) -> tuple[Path, dict[str, str]]:
    """What the kubelet would mount for ServiceAccount `reader` (may list ConfigMaps in `namespace`) and set as env."""
    cluster.run_kubectl("-n", namespace, "create", "configmap", "seen-by-login", "--from-literal=k=v")
    token = cluster.token(namespace, "reader")
    # A Role of its own: `view` is an aggregated ClusterRole, empty without kube-controller-manager.
    cluster.run_kubectl("-n", namespace, "create", "role", "reader", "--verb=list", "--resource=configmaps")
    cluster.run_kubectl(
        "-n", namespace, "create", "rolebinding", "reader", "--role=reader", f"--serviceaccount={namespace}:reader"
    )
    who = f"--as=system:serviceaccount:{namespace}:reader"
    wait_until(  # the API server's RBAC cache sees the new binding a moment later
        lambda: (
            cluster.run_kubectl("-n", namespace, "auth", "can-i", "list", "configmaps", who, check=False).returncode
            == 0
        )
    )
    config = yaml.safe_load(cluster.kubeconfig.read_text())
    entry = config["clusters"][0]["cluster"]
    server = urlsplit(entry["server"])
    root = tmp_path / "serviceaccount"
    root.mkdir()
    (root / "token").write_text(token)
    (root / "namespace").write_text(namespace)
    ca = entry.get("certificate-authority")
    if ca is None:
        pytest.skip("the control plane's kubeconfig names no CA file")
    (root / "ca.crt").write_text(Path(ca).read_text())
    assert server.hostname == "127.0.0.1"
    return root, {"KUBERNETES_SERVICE_HOST": "127.0.0.1", "KUBERNETES_SERVICE_PORT": str(server.port)}


async def names_via_kopf_credentials(info: kopf.ConnectionInfo, namespace: str) -> list[str]:
    async with (
        aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(ssl=info.as_ssl_context()), headers=info.as_http_headers()
        ) as session,
        session.get(f"{info.server}/api/v1/namespaces/{namespace}/configmaps") as response,
    ):
        assert response.status == 200, await response.text()
        return [item["metadata"]["name"] for item in (await response.json())["items"]]


def test_kopf_login_reaches_the_api_server_from_the_service_environment(
    mounted: tuple[Path, dict[str, str]], namespace: str
) -> None:
    root, environ = mounted
    found = login.in_cluster(environ, root)
    assert found is not None
    info = login.connection_info(found)
    assert info is not None
    assert info.server == f"https://127.0.0.1:{environ['KUBERNETES_SERVICE_PORT']}"
    assert info.expiration is not None  # a bound token: Kopf logs in again (reads the file again) before it ends
    assert "seen-by-login" in asyncio.run(names_via_kopf_credentials(info, namespace))


def test_the_operators_own_client_reaches_the_api_server_the_same_way(
    mounted: tuple[Path, dict[str, str]], namespace: str
) -> None:
    root, environ = mounted

    async def names() -> list[str]:
        api = kube.client_configuration(environ, root)
        from kubernetes_asyncio import client

        async with client.ApiClient(await api) as session:
            found = await client.CoreV1Api(session).list_namespaced_config_map(namespace)
            return [item.metadata.name for item in found.items]

    assert "seen-by-login" in asyncio.run(names())
