"""Where a job's requests go: its provider (the Secret from the job's namespace) or its InferencePool, resolved.

Apart from the daemon (operator/jobs.py): the daemon resolves a target every poll through the caches, and the
delete handler once, fresh from the API server (`fresh`), so that no cancel ever uses a Secret a cache kept.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from barge.api.batchjob import LLMBatchJobSpec
from barge.api.common import ModelPrice
from barge.api.pool import InferencePool
from barge.batch.admission_queue import BatchQuota
from barge.k8s.pool import ENGINE_KEY_FIELD, endpoint, names
from barge.operator import pools
from barge.operator import quota as quota_
from barge.operator.cache import ClientSpec
from barge.operator.kube import NotFound

if TYPE_CHECKING:
    from barge.operator.jobs import Context


@dataclass(frozen=True)
class Target:
    """Where a job's requests go: the adapter, the model, and whether only the sync path exists (engine pools)."""

    provider: ClientSpec
    model: str
    sync_only: bool = False
    concurrency: int = 0
    requests_per_minute: int = 0
    tokens_per_minute: int = 0
    price: ModelPrice | None = None
    """A provider pool's spec.provider.price."""
    deployment: quota_.Where | None = None
    """The provider deployment its batches count against, with a pool's batch quota (operator/quota.py)."""


async def target_for(ctx: Context, namespace: str, spec: LLMBatchJobSpec, *, fresh: bool = False) -> Target:
    """Resolve the provider (and for `type: pool` the InferencePool); NotFound means "wait and retry". `fresh`:
    read the Secret and the pool from the API server, not from the caches."""
    if spec.provider.type != "pool":
        ref = spec.provider.secret_ref
        if ref is None:
            raise NotFound("spec.provider.secretRef is required for this provider")
        secret = await ctx.kube.secret_value(namespace, ref.name, ref.key, fresh=fresh)
        return Target(
            ClientSpec(spec.provider.type, secret, spec.provider.base_url, spec.provider.api_version),
            spec.provider.model,
            deployment=quota_.where(spec.provider.type, spec.provider.base_url, spec.provider.model),
        )
    name = spec.provider.pool_ref.name if spec.provider.pool_ref else ""
    body = None if fresh else ctx.pools.get(namespace, name)
    if body is None:
        body = await ctx.objects.get("barge.dev/v1alpha1", "InferencePool", namespace, name)
    if body is None:
        raise NotFound(f"InferencePool {name!r} not found in namespace {namespace!r}")
    if not pools.is_ready(body):
        raise NotFound(f"InferencePool {name!r} is not Ready")
    pool = InferencePool.model_validate({"metadata": body["metadata"], "spec": body["spec"]})
    quota = pool.spec.quota
    if pool.spec.provider is not None:
        ref = pool.spec.provider.secret_ref
        secret = await ctx.kube.secret_value(namespace, ref.name, ref.key, fresh=fresh)
        provider = pool.spec.provider
        return Target(
            ClientSpec(provider.type, secret, provider.base_url, provider.api_version),
            pool.spec.provider.model,
            price=pool.spec.provider.price,
            deployment=quota_.where(
                provider.type,
                provider.base_url,
                provider.model,
                BatchQuota(quota.enqueued_tokens, quota.max_live_batches),
                name,
            ),
        )
    engine = pool.spec.engine
    assert engine is not None
    url = endpoint(pool, ctx.config.pool_endpoint_template)
    # The engines answer /v1 only with the pool's key (review 3, M9; operator/engine_key.py makes it).
    key = await ctx.kube.secret_value(namespace, names(name)["enginekey"], ENGINE_KEY_FIELD, fresh=fresh)
    ready = int((body.get("status") or {}).get("readyReplicas") or 1)
    # As many requests in flight as the engines batch at once (vLLM's default max_num_seqs is 256), capped.
    concurrency = min(256, max(1, ready) * (engine.args.max_num_seqs or 64))
    return Target(
        ClientSpec("openai", key, url, guarded=False),
        pool.spec.model,
        sync_only=True,
        concurrency=concurrency,
        requests_per_minute=quota.requests_per_minute,
        tokens_per_minute=quota.tokens_per_minute,
    )
