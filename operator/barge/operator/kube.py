"""The few Kubernetes reads and writes the operator does itself (Kopf does the watching).

Secrets are read only from the job's own namespace and their values never leave this module except as the
return value: never logged, never put in events or status.
"""

from __future__ import annotations

import base64
from typing import Any

from kubernetes_asyncio import client, config
from kubernetes_asyncio.client.exceptions import ApiException

GROUP, VERSION = "barge.dev", "v1alpha1"


class NotFound(LookupError):
    """A referenced object or key does not exist (yet)."""


class Kube:
    def __init__(self) -> None:
        self._api: client.ApiClient | None = None

    async def api(self) -> client.ApiClient:
        if self._api is None:
            try:
                config.load_incluster_config()  # type: ignore[no-untyped-call]
            except config.ConfigException:
                await config.load_kube_config()
            self._api = client.ApiClient()
        return self._api

    async def close(self) -> None:
        if self._api is not None:
            await self._api.close()
            self._api = None

    async def secret_value(self, namespace: str, name: str, key: str) -> str:
        core = client.CoreV1Api(await self.api())
        try:
            secret = await core.read_namespaced_secret(name, namespace)
        except ApiException as exc:
            if exc.status == 404:
                raise NotFound(f"Secret {name!r} not found in namespace {namespace!r}") from None
            raise
        data = secret.data or {}
        if key not in data:
            raise NotFound(f"Secret {name!r} has no key {key!r}")
        return base64.b64decode(data[key]).decode()

    async def configmap_value(self, namespace: str, name: str, key: str) -> str:
        core = client.CoreV1Api(await self.api())
        try:
            cm = await core.read_namespaced_config_map(name, namespace)
        except ApiException as exc:
            if exc.status == 404:
                raise NotFound(f"ConfigMap {name!r} not found in namespace {namespace!r}") from None
            raise
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
