"""Admission of an LLMBatchJob against the admin's tenancy policy, before any byte is read or sent.

The questions are answered by barge.policy (pure); this module only fetches what they need from the cluster
(the namespace's labels, the referenced Secrets' labels and values, DNS) and hands back what the job may
use: its tenant and one storage policy each for input and output, carrying that tenant's prefixes and the
credentials from its own Secrets. A `Refused` from here becomes `Admitted=False` with the policy's name.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import Callable
from dataclasses import dataclass
from urllib.parse import urlsplit

from barge.api.batchjob import LLMBatchJobSpec
from barge.api.common import LocalObjectRef
from barge.api.pool import InferencePool
from barge.k8s.workers import WorkerTenancy
from barge.netguard import AddressCheck
from barge.operator.bedrock_admission import check_bedrock
from barge.operator.cache import TTL_SECONDS, TTLCache
from barge.operator.kube import Kube, NotFound
from barge.operator.vertex_admission import check_vertex
from barge.policy import (
    Policy,
    Refused,
    check_command,
    check_credentials,
    check_endpoint,
    check_extra_flags,
    check_image,
    check_placement,
    check_retention,
    check_storage,
    endpoint_host,
    tenant_of,
)
from barge.storage import StorageError, StoragePolicy, credential_endpoints, credential_options


@dataclass(frozen=True)
class Admission:
    """What an admitted job may use."""

    tenant: str
    input: StoragePolicy
    output: StoragePolicy


def guard(policy: Policy) -> Callable[[str, str], bool]:
    """The connect-time check handed to provider clients: may a connection to host go to this address? (The same
    check storage connections make: barge.netguard.)"""
    return AddressCheck(policy)


def resolve(host: str) -> list[str]:
    """Every address `host` resolves to (blocking; run in a thread)."""
    return sorted({str(info[4][0]) for info in socket.getaddrinfo(host, None, proto=socket.IPPROTO_TCP)})


#: What each host resolved to, kept TTL_SECONDS like Secrets: every step of every job admits its job again, and
#: a DNS lookup per step was a thread hop per poll on Kopf's loop. A host that changes its addresses meanwhile is
#: still checked at connect time (`guard`), on every connection. Failed lookups are not kept.
ADDRESSES: TTLCache[str, list[str]] = TTLCache(TTL_SECONDS)


async def check_base_url(policy: Policy, provider: str, base_url: str) -> None:
    check_endpoint(policy, provider, base_url)  # what needs no DNS first: a refused URL is never resolved
    host = endpoint_host(base_url)
    if not host:
        return
    try:
        addresses = await ADDRESSES.get(host, lambda: asyncio.to_thread(resolve, host))
    except OSError as exc:
        failed = exc

        def known(_host: str) -> list[str]:
            raise failed

    else:

        def known(_host: str) -> list[str]:
            return addresses

    check_endpoint(policy, provider, base_url, known)


async def tenant(kube: Kube, namespace: str, spec_tenant: str = "", policy: Policy | None = None) -> str:
    labels = await kube.namespace_labels(namespace)
    return tenant_of(namespace, labels, spec_tenant, require_label=policy is not None and policy.require_tenant_label)


async def _storage(
    kube: Kube, policy: Policy, namespace: str, prefixes: tuple[str, ...], url: str, ref: LocalObjectRef | None
) -> StoragePolicy:
    check_storage(url, prefixes)
    check_credentials(policy, url, ref is not None)
    if ref is None:
        return StoragePolicy(prefixes=prefixes, addresses=AddressCheck(policy))
    secret = await kube.secret_data(namespace, ref.name)
    try:
        options = credential_options(urlsplit(url).scheme.lower(), secret)
    except StorageError as exc:
        raise Refused("CredentialPolicy", f"Secret {ref.name!r}: {exc}") from None
    for endpoint in credential_endpoints(options):  # an endpoint in a Secret is an SSRF target like a baseURL
        await check_base_url(policy, "storage", endpoint)
    return StoragePolicy(prefixes=prefixes, options=options, addresses=AddressCheck(policy))


async def admit(kube: Kube, policy: Policy, namespace: str, spec: LLMBatchJobSpec) -> Admission:
    """The job's tenant and storage, or `Refused` naming the first policy it breaks."""
    team = await tenant(kube, namespace, spec.tenant, policy)
    check_retention(policy, spec.retention.keep_payloads_for, spec.retention.keep_outputs_for)
    prefixes = policy.prefixes_for(namespace, team)
    if spec.provider.type != "pool":
        await check_base_url(policy, spec.provider.type, spec.provider.base_url)
    await check_bedrock(kube, policy, namespace, spec, prefixes, check_base_url, team)  # its Secret's S3 and role
    await check_vertex(kube, policy, namespace, spec, prefixes, check_base_url)  # its Secret's GCS and endpoints
    if spec.input.url is not None:
        input_storage = await _storage(
            kube, policy, namespace, prefixes, spec.input.url, spec.input.credentials_secret_ref
        )
    else:
        input_storage = StoragePolicy(prefixes=prefixes, addresses=AddressCheck(policy))
    output = await _storage(kube, policy, namespace, prefixes, spec.output.url, spec.output.credentials_secret_ref)
    return Admission(team, input_storage, output)


async def admit_pool(kube: Kube, policy: Policy, pool: InferencePool) -> WorkerTenancy:
    """An InferencePool's image, flags, endpoint and Secrets against the policy; what its workers may use."""
    namespace = str(pool.metadata["namespace"])
    team = await tenant(kube, namespace, policy=policy)
    mounted = []  # Secrets only pods read (as env): a missing one makes the pod wait, as Kubernetes does
    if pool.spec.engine is not None:
        check_image(policy, pool.spec.engine.image)
        check_extra_flags(policy, pool.spec.engine.args.extra)
        check_command(policy, pool.spec.engine.command)
        check_placement(policy, pool.spec.engine.node_selector, pool.spec.engine.tolerations)
        mounted.append(pool.spec.engine.hf_token_secret_ref)
    if pool.spec.provider is not None:
        await check_base_url(policy, pool.spec.provider.type, pool.spec.provider.base_url)
        await kube.secret_data(namespace, pool.spec.provider.secret_ref.name)  # NotFound, or Refused if unmarked
    mounted += [w.queue.auth_secret_ref for w in pool.spec.workers]
    for ref in mounted:
        if ref is not None:
            with contextlib.suppress(NotFound):
                await kube.secret_data(namespace, ref.name)  # Refused if it exists without the credential label
    return WorkerTenancy(team, policy.prefixes_for(namespace, team), policy.max_payload_bytes)


async def tenant_or_namespace(kube: Kube, namespace: str) -> str:
    """The tenant for metering a job whose step failed; the namespace name when even that cannot be read."""
    try:
        return await tenant(kube, namespace)
    except Exception:  # the cluster may be what is failing: still meter somewhere, never to another team
        return namespace
