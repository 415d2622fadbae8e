"""The few Cloud Storage calls a vertex batch needs, over the GCS JSON API with the adapter's own HTTP client.

Why not gcsfs or google-cloud-storage: the adapter's httpx2 client is behind the endpoint policy at every connection
(guard.py) and capped; gcsfs pins an fsspec the pinned s3fs does not take, and google-cloud-storage brings gRPC and
`requests` (no policy at connect time). Four calls are needed: upload one object (`uploadType=media`, streamed
with its length), list a prefix, read an object streamed (`alt=media`), delete an object.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from typing import IO, Any
from urllib.parse import quote

import httpx2
import orjson

from barge.providers.errors import ProviderError, Transient, classify

CHUNK = 1 << 20


def split(uri: str) -> tuple[str, str]:
    """gs://bucket/object -> (bucket, object)."""
    if not uri.startswith("gs://"):
        raise ValueError(f"not a gs:// URI: {uri!r}")
    bucket, _, name = uri[5:].partition("/")
    return bucket, name


def _error(response: httpx2.Response, doing: str) -> ProviderError:
    try:
        body = orjson.loads(response.content)
        message = str((body.get("error") or {}).get("message") or body)[:300]
    except (orjson.JSONDecodeError, AttributeError):
        message = response.text[:300]
    kind = f"gcs_http_{response.status_code}"
    return classify(response.status_code, kind, message)(f"GCS {doing}: {message}", error_type=kind)


class Gcs:
    def __init__(self, http: httpx2.AsyncClient, endpoint: str, token: Callable[[], Awaitable[str]]) -> None:
        self.http = http
        self.endpoint = endpoint.rstrip("/")
        self.token = token

    async def _headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {await self.token()}"}

    async def _send(
        self, method: str, url: str, doing: str, extra: dict[str, str] | None = None, **kwargs: Any
    ) -> httpx2.Response:
        try:
            headers = {**await self._headers(), **(extra or {})}
            response = await self.http.request(method, url, headers=headers, **kwargs)
        except httpx2.HTTPError as exc:
            cause = f" ({exc.__cause__})" if exc.__cause__ else ""
            raise Transient(f"GCS {doing}: {exc}{cause}", error_type="connection_error") from exc
        return response

    async def upload(self, uri: str, file: IO[bytes], size: int) -> None:
        bucket, name = split(uri)

        async def body() -> AsyncIterator[bytes]:
            file.seek(0)
            while chunk := file.read(CHUNK):
                yield chunk

        url = f"{self.endpoint}/upload/storage/v1/b/{quote(bucket, safe='')}/o"
        response = await self._send(
            "POST",
            url,
            f"upload {uri}",
            params={"uploadType": "media", "name": name},
            content=body(),
            extra={"Content-Length": str(size), "Content-Type": "application/x-ndjson"},
        )
        if response.status_code >= 300:
            raise _error(response, f"upload {uri}")

    async def list(self, prefix_uri: str) -> list[str]:
        """The gs:// URIs of the objects under a prefix, in name order."""
        bucket, prefix = split(prefix_uri)
        found: list[str] = []
        token = ""
        while True:
            params = {"prefix": prefix, **({"pageToken": token} if token else {})}
            url = f"{self.endpoint}/storage/v1/b/{quote(bucket, safe='')}/o"
            response = await self._send("GET", url, f"list {prefix_uri}", params=params)
            if response.status_code >= 300:
                raise _error(response, f"list {prefix_uri}")
            page = orjson.loads(response.content)
            found += [f"gs://{bucket}/{item['name']}" for item in page.get("items") or [] if "name" in item]
            token = str(page.get("nextPageToken") or "")
            if not token:
                return sorted(found)

    async def chunks(self, uri: str) -> AsyncIterator[bytes]:
        bucket, name = split(uri)
        url = f"{self.endpoint}/storage/v1/b/{quote(bucket, safe='')}/o/{quote(name, safe='')}"
        try:
            async with self.http.stream("GET", url, params={"alt": "media"}, headers=await self._headers()) as response:
                if response.status_code >= 300:
                    await response.aread()
                    raise _error(response, f"read {uri}")
                async for chunk in response.aiter_bytes(CHUNK):
                    yield chunk
        except httpx2.HTTPError as exc:
            raise Transient(f"GCS read {uri}: {exc}", error_type="connection_error") from exc

    async def delete(self, uri: str) -> int:
        """1 if deleted now, 0 if it was already gone."""
        bucket, name = split(uri)
        url = f"{self.endpoint}/storage/v1/b/{quote(bucket, safe='')}/o/{quote(name, safe='')}"
        response = await self._send("DELETE", url, f"delete {uri}")
        if response.status_code == 404:
            return 0
        if response.status_code >= 300:
            raise _error(response, f"delete {uri}")
        return 1
