"""The few Kubernetes reads and writes the operator does itself (Kopf does the watching).

Secrets are read only from the job's own namespace, only when they carry the label barge.dev/credential:
"true" (barge.policy.check_secret), and their values never leave this module except as the return value:
never logged, never put in events or status. Every path to the API server is built from names checked as
DNS names and percent-quoted, so a name like `../../ns-b/inferencepools/gpu` cannot reach another namespace.
"""

from __future__ import annotations

import base64
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any
from urllib.parse import quote

from kubernetes_asyncio import client, config
from kubernetes_asyncio.client.exceptions import ApiException
from kubernetes_asyncio.config.incluster_config import InClusterConfigLoader

from barge.operator import login
from barge.policy import Refused, check_input_configmap, check_secret

GROUP, VERSION = "barge.dev", "v1alpha1"
DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


class InvalidName(Refused):
    """A referenced object name that is not a DNS name (never sent to the API server)."""

    def __init__(self, message: str) -> None:
        super().__init__("InvalidName", message)


def dns_name(name: str, what: str = "name") -> str:
    """`name` if it is a DNS subdomain name (what every referenced object's name must be), else InvalidName."""
    if not name or len(name) > 253 or not DNS_SUBDOMAIN.match(name):
        raise InvalidName(f"{what} {name!r} is not a DNS name (lowercase letters, digits, '-' and '.')")
    return name


class NotFound(LookupError):
    """A referenced object or key does not exist (yet)."""


async def client_configuration(
    environ: Mapping[str, str] | None = None, root: Path | None = None
) -> client.Configuration:
    """The client's settings: in a Pod, the same server, CA and token file as the operator's Kopf login
    (login.in_cluster: KUBERNETES_SERVICE_HOST/PORT), the token re-read every minute by kubernetes_asyncio;
    elsewhere the kubeconfig. Its own object, not the library's process-wide default."""
    configuration = client.Configuration()
    found = login.in_cluster(environ, root)
    if found is not None and found.ca_path is not None:
        try:
            InClusterConfigLoader(
                token_filename=str(found.token_path),
                cert_filename=str(found.ca_path),
                environ={login.HOST_ENV: found.host, login.PORT_ENV: found.port},
            ).load_and_set(configuration)
            return configuration
        except config.ConfigException:
            pass  # e.g. an empty token file: as before, try a kubeconfig
    await config.load_kube_config(client_configuration=configuration)
    return configuration


class Kube:
    def __init__(self) -> None:
        self._api: client.ApiClient | None = None

    async def api(self) -> client.ApiClient:
        if self._api is None:
            self._api = client.ApiClient(await client_configuration())
        return self._api

    async def close(self) -> None:
        if self._api is not None:
            await self._api.close()
            self._api = None

    async def namespace_labels(self, name: str) -> dict[str, str]:
        """The labels of a namespace (the admin's barge.dev/tenant lives there)."""
        core = client.CoreV1Api(await self.api())
        try:
            found = await core.read_namespace(dns_name(name, "namespace"))
        except ApiException as exc:
            if exc.status == 404:
                raise NotFound(f"namespace {name!r} not found") from None
            raise
        return dict(found.metadata.labels or {})

    async def secret_data(self, namespace: str, name: str, *, fresh: bool = False) -> dict[str, str]:
        """Every key of a Secret marked barge.dev/credential: "true" (else policy.Refused), decoded. `fresh`: read
        from the API server even where a cache holds it (cache.CachedKube)."""
        core = client.CoreV1Api(await self.api())
        try:
            secret = await core.read_namespaced_secret(dns_name(name, "Secret name"), dns_name(namespace))
        except ApiException as exc:
            if exc.status == 404:
                raise NotFound(f"Secret {name!r} not found in namespace {namespace!r}") from None
            raise
        check_secret(name, secret.metadata.labels)
        return {k: base64.b64decode(v).decode() for k, v in (secret.data or {}).items()}

    async def secret_value(self, namespace: str, name: str, key: str, *, fresh: bool = False) -> str:
        data = await self.secret_data(namespace, name, fresh=fresh)
        if key not in data:
            raise NotFound(f"Secret {name!r} has no key {key!r}")
        return data[key]

    async def configmap_value(self, namespace: str, name: str, key: str) -> str:
        core = client.CoreV1Api(await self.api())
        try:
            cm = await core.read_namespaced_config_map(dns_name(name, "ConfigMap name"), dns_name(namespace))
        except ApiException as exc:
            if exc.status == 404:
                raise NotFound(f"ConfigMap {name!r} not found in namespace {namespace!r}") from None
            raise
        check_input_configmap(name, cm.metadata.labels)  # before its data is looked at (InputPolicy)
        data = cm.data or {}
        if key not in data:
            raise NotFound(f"ConfigMap {name!r} has no key {key!r}")
        return str(data[key])

    async def patch_status(self, plural: str, namespace: str, name: str, status: dict[str, Any]) -> None:
        custom = client.CustomObjectsApi(await self.api())
        # A JSON merge patch; the generated client would pick json-patch for a dict body otherwise.
        await custom.patch_namespaced_custom_object_status(  # type: ignore[call-arg]  # accepted via **kwargs
            GROUP, VERSION, namespace, plural, name, {"status": status}, _content_type="application/merge-patch+json"
        )


PLURALS = {
    ("v1", "Secret"): "secrets",  # only an engine pool's key, created once (operator/engine_key.py)
    ("v1", "Service"): "services",
    ("v1", "ConfigMap"): "configmaps",
    ("v1", "PersistentVolumeClaim"): "persistentvolumeclaims",
    ("apps/v1", "Deployment"): "deployments",
    ("policy/v1", "PodDisruptionBudget"): "poddisruptionbudgets",
    ("autoscaling/v2", "HorizontalPodAutoscaler"): "horizontalpodautoscalers",
    ("monitoring.coreos.com/v1", "ServiceMonitor"): "servicemonitors",
    ("keda.sh/v1alpha1", "ScaledObject"): "scaledobjects",
    ("keda.sh/v1alpha1", "TriggerAuthentication"): "triggerauthentications",
    ("inference.networking.k8s.io/v1", "InferencePool"): "inferencepools",
    ("networking.k8s.io/v1", "NetworkPolicy"): "networkpolicies",  # an engine pool's (k8s/pool_network.py)
    ("barge.dev/v1alpha1", "InferencePool"): "inferencepools",
}
FIELD_MANAGER = "barge"


def object_path(api_version: str, kind: str, namespace: str, name: str | None = None) -> str:
    """The API path of an object (or of its kind in a namespace), from checked and quoted parts."""
    prefix = "/api/v1" if api_version == "v1" else f"/apis/{api_version}"
    path = f"{prefix}/namespaces/{quote(dns_name(namespace, 'namespace'), safe='')}/{PLURALS[(api_version, kind)]}"
    return f"{path}/{quote(dns_name(name, kind + ' name'), safe='')}" if name else path


async def call(
    kube: Kube,
    path: str,
    method: str,
    *,
    body: Any = None,
    query: list[tuple[str, str]] | None = None,
    content_type: str = "application/json",
) -> Any:
    """One API call on an already checked and quoted `path`, answered as plain JSON (Objects, the gateway's jobs)."""
    api = await kube.api()
    return await api.call_api(
        path,
        method,
        query_params=query or [],
        body=body,
        auth_settings=["BearerToken"],
        header_params={"Content-Type": content_type, "Accept": "application/json"},
        response_types_map={200: "object", 201: "object"},
        _return_http_data_only=True,
    )


class Objects:
    """Server-side apply, get, list and delete for the kinds Barge generates (a thin layer over call_api)."""

    def __init__(self, kube: Kube) -> None:
        self.kube = kube

    async def _call(
        self,
        path: str,
        method: str,
        *,
        body: Any = None,
        query: list[tuple[str, str]] | None = None,
        content_type: str = "application/json",
    ) -> Any:
        return await call(self.kube, path, method, body=body, query=query, content_type=content_type)

    async def apply(self, obj: dict[str, Any]) -> Any:
        meta = obj["metadata"]
        path = object_path(obj["apiVersion"], obj["kind"], meta["namespace"], meta["name"])
        return await self._call(
            path,
            "PATCH",
            body=obj,
            query=[("fieldManager", FIELD_MANAGER), ("force", "true")],
            content_type="application/apply-patch+yaml",
        )

    async def create(self, obj: dict[str, Any]) -> bool:
        """POST `obj`; False when an object of its name exists already (409: nothing is changed)."""
        meta = obj["metadata"]
        try:
            await self._call(object_path(obj["apiVersion"], obj["kind"], meta["namespace"]), "POST", body=obj)
        except ApiException as exc:
            if exc.status == 409:
                return False
            raise
        return True

    async def get(self, api_version: str, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        try:
            found: dict[str, Any] = await self._call(object_path(api_version, kind, namespace, name), "GET")
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise
        return found

    async def list(self, api_version: str, kind: str, namespace: str, selector: str = "") -> list[dict[str, Any]]:
        """Objects of a kind; none when the kind's CRD is not installed (KEDA, Prometheus Operator are optional)."""
        query = [("labelSelector", selector)] if selector else None
        try:
            result: dict[str, Any] = await self._call(object_path(api_version, kind, namespace), "GET", query=query)
        except ApiException as exc:
            if exc.status == 404:
                return []
            raise
        return list(result.get("items", []))

    async def delete(self, api_version: str, kind: str, namespace: str, name: str) -> None:
        try:
            await self._call(object_path(api_version, kind, namespace, name), "DELETE")
        except ApiException as exc:
            if exc.status != 404:
                raise
