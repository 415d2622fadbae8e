"""Who is calling, and may they: the API server answers both, the gateway keeps no users of its own.

The bearer token (or `x-api-key`, the Anthropic SDK's header) must be a ServiceAccount token for the gateway's
audience (TokenReview; default `barge`, so a token minted for the API server or another service is refused): its
namespace is the caller's, that namespace's tenant the caller's tenant. Each call is then a SubjectAccessReview
of the verb it needs on `llmbatchjobs.barge.dev` in that namespace, the same RBAC as `kubectl` on the custom
resources, so a platform team opens the door with a RoleBinding. Answers are cached for `CACHE_SECONDS` per token
(by its SHA-256, the token itself is never kept) and per (user, verb).

| call | verb on llmbatchjobs |
| --- | --- |
| POST /v1/files, POST /v1/batches | create |
| GET a file, its content, a batch | get |
| GET /v1/files, GET /v1/batches | list |
| DELETE a file | delete |
| POST a batch's cancel (patches the job's spec.suspend) | patch |
"""

from __future__ import annotations

import hashlib
import time
from dataclasses import dataclass
from typing import Any

from kubernetes_asyncio.client.exceptions import ApiException

from barge.operator.kube import Kube
from barge.policy import Policy, Refused, tenant_of

CACHE_SECONDS = 30.0
SA_PREFIX = "system:serviceaccount:"
GROUP, RESOURCE = "barge.dev", "llmbatchjobs"


class Unauthorized(Exception):
    """No token, or one the API server does not accept for the gateway's audience (HTTP 401)."""


class Forbidden(Exception):
    """The caller's RBAC does not grant the verb in its namespace (HTTP 403)."""


@dataclass(frozen=True)
class Caller:
    user: str
    uid: str
    groups: tuple[str, ...]
    extra: dict[str, list[str]]
    namespace: str
    tenant: str


def token_of(headers: Any) -> str:
    auth = str(headers.get("Authorization") or "")
    if auth.lower().startswith("bearer "):
        return auth[7:].strip()
    return str(headers.get("x-api-key") or "").strip()


class Authority:
    def __init__(self, kube: Kube, policy: Policy, audience: str = "barge", clock: Any = time.monotonic) -> None:
        self.kube = kube
        self.policy = policy
        self.audience = audience
        self.clock = clock
        self._callers: dict[str, tuple[float, Caller]] = {}
        self._allowed: dict[tuple[str, str, str], tuple[float, bool]] = {}

    async def _post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        api = await self.kube.api()
        found: dict[str, Any] = await api.call_api(
            path,
            "POST",
            body=body,
            auth_settings=["BearerToken"],
            header_params={"Content-Type": "application/json", "Accept": "application/json"},
            response_types_map={200: "object", 201: "object"},
            _return_http_data_only=True,
        )
        return found

    async def caller(self, token: str) -> Caller:
        if not token:
            raise Unauthorized("no API key: send a ServiceAccount token as the bearer token (or x-api-key)")
        key = hashlib.sha256(token.encode()).hexdigest()
        now = self.clock()
        hit = self._callers.get(key)
        if hit is not None and hit[0] > now:
            return hit[1]
        review = await self._post(
            "/apis/authentication.k8s.io/v1/tokenreviews",
            {
                "apiVersion": "authentication.k8s.io/v1",
                "kind": "TokenReview",
                "spec": {"token": token, "audiences": [self.audience]},
            },
        )
        status = review.get("status") or {}
        user = status.get("user") or {}
        username = str(user.get("username") or "")
        if not status.get("authenticated") or self.audience not in (status.get("audiences") or []):
            raise Unauthorized(f"the token is not a valid ServiceAccount token for audience {self.audience!r}")
        if not username.startswith(SA_PREFIX) or username.count(":") != 3:
            raise Unauthorized("only ServiceAccount tokens are accepted (the namespace is the caller's)")
        namespace = username.split(":")[2]
        try:
            labels = await self.kube.namespace_labels(namespace)
            tenant = tenant_of(namespace, labels, require_label=self.policy.require_tenant_label)
        except Refused as exc:
            raise Forbidden(str(exc)) from None
        found = Caller(
            username,
            str(user.get("uid") or ""),
            tuple(user.get("groups") or ()),
            {k: list(v) for k, v in (user.get("extra") or {}).items()},
            namespace,
            tenant,
        )
        if len(self._callers) > 10_000:
            self._callers.clear()
        self._callers[key] = (now + CACHE_SECONDS, found)
        return found

    async def allow(self, caller: Caller, verb: str) -> None:
        key = (caller.user, caller.namespace, verb)
        now = self.clock()
        hit = self._allowed.get(key)
        if hit is None or hit[0] <= now:
            review = await self._post(
                "/apis/authorization.k8s.io/v1/subjectaccessreviews",
                {
                    "apiVersion": "authorization.k8s.io/v1",
                    "kind": "SubjectAccessReview",
                    "spec": {
                        "user": caller.user,
                        "uid": caller.uid,
                        "groups": list(caller.groups),
                        "extra": caller.extra,
                        "resourceAttributes": {
                            "namespace": caller.namespace,
                            "verb": verb,
                            "group": GROUP,
                            "resource": RESOURCE,
                        },
                    },
                },
            )
            if len(self._allowed) > 10_000:
                self._allowed.clear()
            hit = (now + CACHE_SECONDS, bool((review.get("status") or {}).get("allowed")))
            self._allowed[key] = hit
        if not hit[1]:
            raise Forbidden(f"{caller.user} may not {verb} llmbatchjobs.barge.dev in namespace {caller.namespace}")


__all__ = ["ApiException", "Authority", "Caller", "Forbidden", "Unauthorized", "token_of"]
