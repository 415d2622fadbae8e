"""The gateway's LLMBatchJob reads and writes, always in the caller's namespace and by names the gateway built.

The gateway's own ServiceAccount does them (the caller was authorized by SubjectAccessReview first), so the
chart grants it create, get, list and patch on llmbatchjobs; it never deletes a job (retention is the operator's).
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

from kubernetes_asyncio.client.exceptions import ApiException

from barge.gateway.batches import LABEL
from barge.operator.kube import Kube, dns_name


def _path(namespace: str, name: str | None = None) -> str:
    base = f"/apis/barge.dev/v1alpha1/namespaces/{quote(dns_name(namespace, 'namespace'), safe='')}/llmbatchjobs"
    return f"{base}/{quote(dns_name(name), safe='')}" if name else base


class Jobs:
    def __init__(self, kube: Kube) -> None:
        self.kube = kube

    async def _call(
        self,
        path: str,
        method: str,
        body: Any = None,
        query: list[tuple[str, str]] | None = None,
        content_type: str = "application/json",
    ) -> Any:
        api = await self.kube.api()
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

    async def create(self, job: dict[str, Any]) -> dict[str, Any]:
        found: dict[str, Any] = await self._call(_path(job["metadata"]["namespace"]), "POST", job)
        return found

    async def get(self, namespace: str, name: str) -> dict[str, Any] | None:
        try:
            found: dict[str, Any] = await self._call(_path(namespace, name), "GET")
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise
        if ((found.get("metadata") or {}).get("labels") or {}).get(LABEL) is None:
            return None  # a job of the same name that the gateway did not make is not a batch
        return found

    async def list(self, namespace: str) -> list[dict[str, Any]]:
        result: dict[str, Any] = await self._call(_path(namespace), "GET", query=[("labelSelector", LABEL)])
        return list(result.get("items") or [])

    async def patch(self, namespace: str, name: str, patch: dict[str, Any]) -> dict[str, Any]:
        found: dict[str, Any] = await self._call(
            _path(namespace, name), "PATCH", patch, content_type="application/merge-patch+json"
        )
        return found
