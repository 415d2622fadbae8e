"""An engine pool's API key (review 3, M9): made once per pool by the operator, never rotated behind anyone's back.

The vLLM engines require it on /v1 (VLLM_API_KEY from the Secret, k8s/pool.py), and everything Barge sends to
the pool carries it: the operator's client for `type: pool` jobs (operator/targets.py) and the pool's queue
workers (k8s/workers.py). The Secret is created with POST only (never applied or patched: an existing key is
kept), so the operator's RBAC gains `create` on Secrets and nothing that could change a tenant's own Secret.
A Secret of that name the pool does not own is never used: the pool reports a NameConflict instead.
"""

from __future__ import annotations

import secrets
from typing import Protocol

from barge.api.pool import InferencePool
from barge.k8s import pool as builders

KEY_BYTES = 32


class SecretObjects(Protocol):
    async def get(self, api_version: str, kind: str, namespace: str, name: str) -> dict[str, object] | None: ...

    async def create(self, obj: dict[str, object]) -> bool: ...


def new_key() -> str:
    """32 random bytes, URL-safe text (a bearer token fit for a header)."""
    return secrets.token_urlsafe(KEY_BYTES)


async def ensure(objects: SecretObjects, pool: InferencePool) -> str:
    """Create the pool's engine key Secret if it does not exist; "" when it is there and the pool's, else why not."""
    meta = pool.metadata
    name = builders.names(str(meta["name"]))["enginekey"]
    found = await objects.get("v1", "Secret", str(meta["namespace"]), name)
    if found is None:
        await objects.create(builders.build_engine_key(pool, new_key()))  # a 409 (a racing create) keeps that one
        return ""
    found_meta = found.get("metadata")
    owners = found_meta.get("ownerReferences") if isinstance(found_meta, dict) else None
    if not any(isinstance(o, dict) and o.get("uid") == meta["uid"] for o in owners or []):
        return f"Secret {name!r} already exists and was not created by this pool; it is not used as the engine key"
    return ""
