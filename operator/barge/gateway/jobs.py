"""The gateway's LLMBatchJob reads and writes, always in the caller's namespace and by names the gateway built.

The gateway's own ServiceAccount does them (the caller was authorized by SubjectAccessReview first), so the
chart grants it create, get, list, patch and delete on llmbatchjobs (delete: only an ended Anthropic message
batch, as its DELETE asks), and get on inferencepools.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

from kubernetes_asyncio.client.exceptions import ApiException

from barge.gateway.batches import LABEL
from barge.operator.kube import InvalidName, Kube, call, dns_name


def _path(namespace: str, name: str | None = None) -> str:
    base = f"/apis/barge.dev/v1alpha1/namespaces/{quote(dns_name(namespace, 'namespace'), safe='')}/llmbatchjobs"
    return f"{base}/{quote(dns_name(name), safe='')}" if name else base


class Jobs:
    def __init__(self, kube: Kube) -> None:
        self.kube = kube

    async def create(self, job: dict[str, Any]) -> dict[str, Any]:
        found: dict[str, Any] = await call(self.kube, _path(job["metadata"]["namespace"]), "POST", body=job)
        return found

    async def get(self, namespace: str, name: str) -> dict[str, Any] | None:
        try:
            found: dict[str, Any] = await call(self.kube, _path(namespace, name), "GET")
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise
        meta = found.get("metadata") or {}
        if (meta.get("labels") or {}).get(LABEL) is None:
            return None  # a job of the same name that the gateway did not make is not a batch
        if meta.get("deletionTimestamp"):
            return None  # deleted (the operator is finishing its clean-up): gone for the caller
        return found

    async def list(self, namespace: str) -> list[dict[str, Any]]:
        result: dict[str, Any] = await call(self.kube, _path(namespace), "GET", query=[("labelSelector", LABEL)])
        return [j for j in result.get("items") or [] if not (j.get("metadata") or {}).get("deletionTimestamp")]

    async def patch(self, namespace: str, name: str, patch: dict[str, Any]) -> dict[str, Any]:
        found: dict[str, Any] = await call(
            self.kube, _path(namespace, name), "PATCH", body=patch, content_type="application/merge-patch+json"
        )
        return found

    async def delete(self, namespace: str, name: str) -> None:
        try:
            await call(self.kube, _path(namespace, name), "DELETE")
        except ApiException as exc:
            if exc.status != 404:
                raise

    async def pool_exists(self, namespace: str, name: str) -> bool:
        """Whether the model alias `name` is an InferencePool of the namespace (else the job would wait for it)."""
        try:
            dns_name(name)
        except InvalidName:
            return False
        path = _path(namespace).replace("/llmbatchjobs", "/inferencepools") + "/" + quote(name, safe="")
        try:
            await call(self.kube, path, "GET")
        except ApiException as exc:
            if exc.status == 404:
                return False
            raise
        return True
