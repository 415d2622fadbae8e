"""The operator logs in from KUBERNETES_SERVICE_HOST/PORT and the mounted ServiceAccount files, as client-go does
(barge/operator/login.py), for Kopf and for its own kubernetes_asyncio client (kube.client_configuration)."""

from __future__ import annotations

import asyncio
import base64
import datetime
import json
from pathlib import Path
from typing import Any

import kopf
import pytest
from kopf._core.intents import causes

from barge.config import OperatorConfig
from barge.operator import kube, login
from barge.operator.handlers import register

NOW = 1_900_000_000.0


def jwt(claims: dict[str, Any]) -> str:
    def part(obj: dict[str, Any]) -> str:
        return base64.urlsafe_b64encode(json.dumps(obj).encode()).rstrip(b"=").decode()

    return f"{part({'alg': 'RS256'})}.{part(claims)}.c2lnbmF0dXJl"


def bound_token(iat: float = NOW, lifetime: int = 3600, **extra: Any) -> str:
    return jwt({"iat": int(iat), "exp": int(iat) + lifetime, "sub": "system:serviceaccount:barge:barge", **extra})


@pytest.fixture
def sa_dir(tmp_path: Path) -> Path:
    root = tmp_path / "serviceaccount"
    root.mkdir()
    (root / "token").write_text(bound_token() + "\n")
    (root / "ca.crt").write_text("-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n")
    (root / "namespace").write_text("barge-system")
    return root


def at(seconds: float) -> datetime.datetime:
    return datetime.datetime.fromtimestamp(seconds, datetime.UTC)


def test_connection_info_from_the_service_environment_and_the_token_files(sa_dir: Path) -> None:
    found = login.in_cluster({"KUBERNETES_SERVICE_HOST": "127.0.0.1", "KUBERNETES_SERVICE_PORT": "39127"}, sa_dir)
    assert found is not None
    info = login.connection_info(found, now=NOW)
    assert info is not None
    assert info.server == "https://127.0.0.1:39127"
    assert info.ca_path == str(sa_dir / "ca.crt")
    assert info.token == bound_token()  # the file's trailing newline is not part of it
    assert info.default_namespace == "barge-system"
    assert info.as_http_headers() == {"Authorization": f"Bearer {bound_token()}"}
    assert info.expiration == at(NOW + 0.9 * 3600)  # after the kubelet's rotation at 80 %


@pytest.mark.parametrize(
    ("host", "port", "server"),
    [
        ("fd00:10:96::1", "443", "https://[fd00:10:96::1]:443"),
        ("fe80::1%eth0", "6443", "https://[fe80::1%eth0]:6443"),
        ("10.96.0.1", "443", "https://10.96.0.1:443"),
        ("api.internal", "8443", "https://api.internal:8443"),
    ],
)
def test_ipv6_hosts_are_bracketed(sa_dir: Path, host: str, port: str, server: str) -> None:
    found = login.in_cluster({"KUBERNETES_SERVICE_HOST": host, "KUBERNETES_SERVICE_PORT": port}, sa_dir)
    assert found is not None
    assert found.server == server


@pytest.mark.parametrize("environ", [{}, {"KUBERNETES_SERVICE_HOST": "", "KUBERNETES_SERVICE_PORT": "443"}])
def test_without_the_service_environment_kopfs_default_server(sa_dir: Path, environ: dict[str, str]) -> None:
    found = login.in_cluster(environ, sa_dir)
    assert found is not None
    assert found.server == "https://kubernetes.default.svc:443"


def test_no_mounted_token_no_in_cluster_login(tmp_path: Path) -> None:
    assert login.in_cluster({"KUBERNETES_SERVICE_HOST": "127.0.0.1", "KUBERNETES_SERVICE_PORT": "1"}, tmp_path) is None


def test_without_a_ca_file_the_system_trust_store(sa_dir: Path) -> None:
    (sa_dir / "ca.crt").unlink()
    found = login.in_cluster({}, sa_dir)
    assert found is not None
    info = login.connection_info(found, now=NOW)
    assert info is not None
    assert info.ca_path is None


def test_a_rotated_token_is_read_at_the_next_login(sa_dir: Path) -> None:
    found = login.in_cluster({"KUBERNETES_SERVICE_HOST": "127.0.0.1", "KUBERNETES_SERVICE_PORT": "6443"}, sa_dir)
    assert found is not None
    first = login.connection_info(found, now=NOW)
    rotated = bound_token(iat=NOW + 2880)  # the kubelet writes a new token at 80 % of the old one's lifetime
    (sa_dir / "token").write_text(rotated)
    second = login.connection_info(found, now=NOW + 3240)  # Kopf logs in again at `first.expiration`
    assert first is not None
    assert second is not None
    assert second.token == rotated != first.token
    assert second.expiration == at(NOW + 2880 + 0.9 * 3600)


def test_a_token_not_yet_rotated_is_looked_at_again_on_a_whole_minute(sa_dir: Path) -> None:
    found = login.in_cluster({}, sa_dir)
    assert found is not None
    late = NOW + 3300  # past the renewal point, the file still holds the first token
    info = login.connection_info(found, now=late)
    assert info is not None
    assert info.expiration is not None
    seconds = info.expiration.timestamp()
    assert seconds % 60 == 0
    assert late + 60 <= seconds < late + 120
    again = login.connection_info(found, now=late + 5)  # a 401 within that minute: the same ConnectionInfo,
    assert again == info  # which Kopf's vault refuses as already invalid (no endless re-login)


def test_an_extended_token_is_renewed_by_its_warnafter(sa_dir: Path) -> None:
    # An API server with --service-account-extend-token-expiration issues a year-long token and says when the
    # kubelet's own lifetime ends (kubernetes.io.warnafter): renew by that, as the kubelet rotates by it.
    token = bound_token(lifetime=365 * 86400, **{"kubernetes.io": {"warnafter": int(NOW) + 3607}})
    (sa_dir / "token").write_text(token)
    found = login.in_cluster({}, sa_dir)
    assert found is not None
    info = login.connection_info(found, now=NOW)
    assert info is not None
    assert info.expiration == at(NOW + 0.9 * 3607)


def test_an_opaque_token_never_expires_by_itself(sa_dir: Path) -> None:
    (sa_dir / "token").write_text("abcdef0123456789")  # a legacy Secret token is a JWT; any opaque one too
    found = login.in_cluster({}, sa_dir)
    assert found is not None
    info = login.connection_info(found, now=NOW)
    assert info is not None
    assert info.token == "abcdef0123456789"
    assert info.expiration is None


def test_an_empty_token_file_gives_no_credentials(sa_dir: Path) -> None:
    (sa_dir / "token").write_text("")
    found = login.in_cluster({}, sa_dir)
    assert found is not None
    assert login.connection_info(found) is None


def registered_login(registry: kopf.OperatorRegistry) -> Any:
    handlers = [h for h in registry._activities.get_all_handlers() if h.activity == causes.Activity.AUTHENTICATION]
    assert len(handlers) == 1
    return handlers[0].fn


def test_the_operators_login_handler_uses_the_service_environment(
    sa_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(login, "SERVICE_ACCOUNT_DIR", sa_dir)
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "127.0.0.1")
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", "39127")
    registry = kopf.OperatorRegistry()
    register(registry, OperatorConfig())
    info = registered_login(registry)(settings=kopf.OperatorSettings(), logger=None)
    assert isinstance(info, kopf.ConnectionInfo)
    assert (info.server, info.token, info.ca_path) == ("https://127.0.0.1:39127", bound_token(), str(sa_dir / "ca.crt"))


def test_without_a_mounted_token_the_login_handler_uses_the_kubeconfig(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(login, "SERVICE_ACCOUNT_DIR", tmp_path / "absent")
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: c\n"
        "clusters: [{name: k, cluster: {server: 'https://127.0.0.1:7443'}}]\n"
        "users: [{name: u, user: {token: dev}}]\ncontexts: [{name: c, context: {cluster: k, user: u}}]\n"
    )
    monkeypatch.setenv("KUBECONFIG", str(kubeconfig))
    info = login.login(settings=kopf.OperatorSettings(), logger=None)
    assert info is not None
    assert (info.server, info.token) == ("https://127.0.0.1:7443", "dev")


def test_the_operators_own_client_uses_the_same_server_ca_and_token_file(sa_dir: Path) -> None:
    environ = {"KUBERNETES_SERVICE_HOST": "fd00::1", "KUBERNETES_SERVICE_PORT": "6443"}
    configuration = asyncio.run(kube.client_configuration(environ, sa_dir))
    assert configuration.host == "https://[fd00::1]:6443"
    assert configuration.ssl_ca_cert == str(sa_dir / "ca.crt")
    header = asyncio.run(configuration.get_api_key_with_prefix("BearerToken"))
    assert header is not None
    assert header.strip() == f"Bearer {bound_token()}"


def test_the_operators_own_client_without_the_service_environment(sa_dir: Path) -> None:
    configuration = asyncio.run(kube.client_configuration({}, sa_dir))
    assert configuration.host == "https://kubernetes.default.svc:443"
