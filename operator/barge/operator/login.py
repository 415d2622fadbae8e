"""Logging in from inside a Pod the way client-go does, for Kopf and for Barge's own client alike.

Why: Kopf's `login_with_service_account` always connects to https://kubernetes.default.svc (port 443). That name
and port are the `kubernetes` Service's, which a Pod reaches only through a Pod network and kube-proxy (or a DNS
that resolves cluster names). Where the Pod network is the host's (single-node labs, edge clusters, Barge's own
local node), the API server is reachable only where `KUBERNETES_SERVICE_HOST`/`KUBERNETES_SERVICE_PORT` say: the
kubelet sets both in every container, a container's own `env` overrides them, and client-go, kubectl and
kubernetes_asyncio all read them. So Barge reads them too:

| what | from |
| --- | --- |
| server | `https://$KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT`, an IPv6 host in brackets (Go's JoinHostPort) |
| server, if either is unset or empty | Kopf's `https://kubernetes.default.svc`, as before |
| token | `<dir>/token`, read again whenever Kopf logs in again (below) |
| CA | `<dir>/ca.crt` if it exists, else the system's trust store |
| namespace | `<dir>/namespace` (where Kopf posts events of cluster-scoped objects) |

`<dir>` is /var/run/secrets/kubernetes.io/serviceaccount. With no token there, the login falls back to a kubeconfig
(`KUBECONFIG` or ~/.kube/config), as before.

Token rotation: a projected ServiceAccount token is bound to the Pod and expires (an hour by default); the kubelet
writes a fresh one into the file at 80 % of its lifetime. Kopf keeps the token of a login for the whole session, and
logs in again (calling `login` again) when the ConnectionInfo's `expiration` passes or when a request gets 401. So
`expiration` is set to 90 % of the token's lifetime (from its `iat` to the earlier of `exp` and the API server's
`kubernetes.io.warnafter`, which an API server that extends tokens sets at the lifetime the kubelet asked for): the
kubelet has rotated the file by then. If it has not (the file still holds a token past that point), the login is
looked at again on the next whole minute at least 60 s away; whole minutes so that a 401 within one minute meets the
same ConnectionInfo, which Kopf refuses as already invalid instead of retrying forever. A token that is not a JWT
(a legacy Secret token) has no expiration and is read again only after a 401.

Barge's own client (kube.py) gets the same server, CA and token file from `in_cluster`; kubernetes_asyncio re-reads
the token file every minute.
"""

from __future__ import annotations

import base64
import binascii
import datetime
import json
import os
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import kopf

SERVICE_ACCOUNT_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")
HOST_ENV, PORT_ENV = "KUBERNETES_SERVICE_HOST", "KUBERNETES_SERVICE_PORT"
DEFAULT_HOST, DEFAULT_PORT = "kubernetes.default.svc", "443"  # Kopf's, used when the environment names none
#: Kopf's own priority for its service-account login: a kubeconfig login (priority 10) never outranks it.
PRIORITY = 20
RENEW_AT = 0.9  # of the token's lifetime: after the kubelet's rotation at 0.8
RECHECK_SECONDS = 60


def join_host_port(host: str, port: str) -> str:
    """`host:port`, with an IPv6 literal (or one with a zone, `%`) in brackets, as Go's net.JoinHostPort."""
    return f"[{host}]:{port}" if ":" in host or "%" in host else f"{host}:{port}"


@dataclass(frozen=True)
class InCluster:
    """Where a Pod finds its API server and its ServiceAccount's credentials."""

    host: str
    port: str
    token_path: Path
    ca_path: Path | None
    namespace: str | None

    @property
    def server(self) -> str:
        return "https://" + join_host_port(self.host, self.port)

    def token(self) -> str:
        """The token as the file holds it now (the kubelet replaces the file when it rotates the token)."""
        return self.token_path.read_text(encoding="utf-8").strip()


def in_cluster(environ: Mapping[str, str] | None = None, root: Path | None = None) -> InCluster | None:
    """The in-cluster settings (from os.environ and SERVICE_ACCOUNT_DIR unless given), or None where no
    ServiceAccount token is mounted (not in a Pod, or automountServiceAccountToken off)."""
    environ = os.environ if environ is None else environ
    root = SERVICE_ACCOUNT_DIR if root is None else root
    token_path = root / "token"
    if not token_path.is_file():
        return None
    host, port = environ.get(HOST_ENV, ""), environ.get(PORT_ENV, "")
    if not host or not port:
        host, port = DEFAULT_HOST, DEFAULT_PORT
    ca_path = root / "ca.crt"
    ns_path = root / "namespace"
    namespace = ns_path.read_text(encoding="utf-8").strip() if ns_path.is_file() else ""
    return InCluster(host, port, token_path, ca_path if ca_path.is_file() else None, namespace or None)


def _claims(token: str) -> dict[str, Any]:
    """The claims of a JWT, unverified (only to learn when to read the file again), or {} if it is not one."""
    parts = token.split(".")
    if len(parts) != 3:
        return {}
    try:
        claims = json.loads(base64.urlsafe_b64decode(parts[1] + "=" * (-len(parts[1]) % 4)))
    except (binascii.Error, ValueError):
        return {}
    return claims if isinstance(claims, dict) else {}


def renewal(token: str, now: float) -> datetime.datetime | None:
    """When Kopf should log in again (read the token file again) for this token; None if it never expires."""
    claims = _claims(token)
    nested = claims.get("kubernetes.io")
    ends = [claims.get("exp"), nested.get("warnafter") if isinstance(nested, dict) else None]
    end = min((float(v) for v in ends if isinstance(v, int | float)), default=None)
    if end is None:
        return None
    issued = claims.get("iat")
    start = float(issued) if isinstance(issued, int | float) and issued < end else end - RECHECK_SECONDS
    renew = start + RENEW_AT * (end - start)
    soonest = (int(now) // RECHECK_SECONDS + 2) * RECHECK_SECONDS  # a whole minute, at least 60 s away
    return datetime.datetime.fromtimestamp(max(renew, soonest), datetime.UTC)


def connection_info(
    found: InCluster, *, trust_env: bool = False, now: float | None = None
) -> kopf.ConnectionInfo | None:
    """Kopf's credentials for `found`, with the token read from its file now; None if the file is empty."""
    token = found.token()
    if not token:
        return None
    return kopf.ConnectionInfo(
        server=found.server,
        ca_path=str(found.ca_path) if found.ca_path else None,
        token=token,
        default_namespace=found.namespace,
        trust_env=trust_env,
        priority=PRIORITY,
        expiration=renewal(token, time.time() if now is None else now),
    )


def login(*, settings: kopf.OperatorSettings, **kwargs: Any) -> kopf.ConnectionInfo | None:
    """Barge's Kopf login handler: in-cluster as above, else Kopf's kubeconfig login."""
    found = in_cluster()
    if found is not None:
        info = connection_info(found, trust_env=settings.networking.trust_env)
        if info is not None:
            return info
    return kopf.login_with_kubeconfig(settings=settings, **kwargs)
