"""The admin's word on what counts between tenants in quota-aware admission: shared quotas and priority bounds.

Why the admin's: a pool's `spec.quota` and a job's `spec.priority` are written by a tenant, and any tenant may
name any allowed endpoint and model. Trusted across tenants, one tenant's pool declaring `enqueuedTokens: 1` on
another tenant's Azure deployment cut that tenant's shards to one item each (review 3, H4), and `priority: 1000`
put one tenant's stream of jobs ahead of every other tenant's (M1). So:

| question                                        | answer                                                      |
| ----------------------------------------------- | ----------------------------------------------------------- |
| which jobs share a deployment's quota queue?    | a deployment listed in `admission.sharedDeployments`: every |
|                                                 | tenant's jobs on it, one queue; any other: one queue per    |
|                                                 | tenant (what another tenant declares or has live on it does |
|                                                 | not count)                                                  |
| whose quota applies?                            | listed: the admin's figures (pools' own are ignored);       |
|                                                 | otherwise the strictest among the tenant's own pools        |
| how far does spec.priority reach?               | up to `admission.maxPriority` (default 0), or the tenant's   |
|                                                 | `admission.tenants.<t>.maxPriority`, between tenants; in    |
|                                                 | full among the tenant's own jobs                            |

The two ways the review offered for H4 were an admin-declared quota for shared deployments, or the strictest
declaration applied only within a tenant; this is both, each where it fits: an admin who knows that two teams
share one Azure resource says so once (and only then do their jobs wait for each other), and everything else is
a tenant's own business, which its own declarations can tighten for itself alone. A tenant cannot prove which
deployment is its own (any labelled key of its own makes a pool Ready), so no tenant's declaration may speak for
another's jobs.

Pure and parsed once, like barge/policy.py, which holds it as `Policy.admission`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

#: spec.priority's range (api/batchjob.py).
PRIORITY_MIN, PRIORITY_MAX = -1000, 1000
_TENANT = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")


@dataclass(frozen=True)
class SharedDeployment:
    """A provider deployment several tenants use, with its real batch quota."""

    provider: str
    """Provider type (azure-openai, openai, anthropic)."""
    base_url: str
    model: str
    """The model, or the Azure deployment name."""
    enqueued_tokens: int = 0
    max_live_batches: int = 0

    def matches(self, provider: str, base_url: str, model: str) -> bool:
        return (self.provider, self.base_url.rstrip("/"), self.model) == (provider, base_url.rstrip("/"), model)


@dataclass(frozen=True)
class AdmissionPolicy:
    max_priority: int = 0
    """The highest spec.priority that counts between tenants (a higher one orders only the tenant's own jobs)."""
    tenant_max_priority: tuple[tuple[str, int], ...] = ()
    """(tenant, its own bound) for the tenants the admin trusts further (or less)."""
    shared: tuple[SharedDeployment, ...] = field(default=())
    """Deployments whose quota queue is shared by every tenant, with the admin's quota."""

    def priority_bound(self, tenant: str) -> int:
        return dict(self.tenant_max_priority).get(tenant, self.max_priority)

    def shared_for(self, provider: str, base_url: str, model: str) -> SharedDeployment | None:
        return next((s for s in self.shared if s.matches(provider, base_url, model)), None)


#: The policy without an `admission` section: no shared deployment, priority counts up to 0 between tenants.
DEFAULT = AdmissionPolicy()


def _priority(value: Any, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not PRIORITY_MIN <= value <= PRIORITY_MAX:
        raise ValueError(f"policy {where} must be an integer from {PRIORITY_MIN} to {PRIORITY_MAX}")
    return value


def _count(entry: Mapping[str, Any], key: str, where: str) -> int:
    value = entry.get(key, 0)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"policy {where}.{key} must be a non-negative integer")
    return value


def parse(data: Mapping[str, Any] | None) -> AdmissionPolicy:
    """The `admission` section of the admin's policy file (README, Multi-tenancy and security)."""
    data = dict(data or {})
    unknown = set(data) - {"maxPriority", "tenants", "sharedDeployments"}
    if unknown:
        raise ValueError(f"unknown policy admission key(s): {sorted(unknown)}")
    bound = _priority(data.get("maxPriority", 0), "admission.maxPriority")
    tenants = []
    for tenant, entry in dict(data.get("tenants") or {}).items():
        if not _TENANT.match(str(tenant)) or not isinstance(entry, Mapping) or set(entry) - {"maxPriority"}:
            raise ValueError(f"policy admission.tenants.{tenant}: expected a DNS label with only maxPriority")
        tenants.append((str(tenant), _priority(entry.get("maxPriority", bound), f"admission.tenants.{tenant}")))
    shared = []
    for n, entry in enumerate(data.get("sharedDeployments") or []):
        where = f"admission.sharedDeployments[{n}]"
        keys = {"provider", "baseURL", "model", "enqueuedTokens", "maxLiveBatches"}
        if not isinstance(entry, Mapping) or set(entry) - keys:
            raise ValueError(f"policy {where}: expected {sorted(keys)}")
        if not all(isinstance(entry.get(k), str) and entry.get(k) for k in ("provider", "baseURL", "model")):
            raise ValueError(f"policy {where}: provider, baseURL and model are required strings")
        shared.append(
            SharedDeployment(
                entry["provider"],
                entry["baseURL"],
                entry["model"],
                _count(entry, "enqueuedTokens", where),
                _count(entry, "maxLiveBatches", where),
            )
        )
    return AdmissionPolicy(bound, tuple(tenants), tuple(shared))
