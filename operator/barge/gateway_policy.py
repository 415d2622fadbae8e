"""The admin's model aliases for `barge gateway`: the `gateway` section of the policy file.

Why an admin table: the `model` of a gateway request (`"gpt-4o"`, `"claude-sonnet-4"`, `"openai/gpt-oss-20b"`) is
what an application already sends to a provider; a platform team wants one name for every team without each
team naming its InferencePool after a provider's model, and wants to move that name to another pool (Azure
Global Batch today, a vLLM pool tomorrow) in one place.

| question                                    | answer                                                            |
| ------------------------------------------- | ----------------------------------------------------------------- |
| which pool runs a batch whose model is `m`? | the InferencePool named `m` in the caller's namespace, if there is |
|                                             | one (a team's own pool wins: it chose that name); else the pool   |
|                                             | `gateway.aliases.m.pool`, looked up in the caller's namespace      |
| in which namespace?                         | always the caller's: a job's poolRef is local, so an alias never  |
|                                             | reaches another tenant's pool                                     |
| which tenants see an alias?                 | all, or those in `gateway.aliases.m.tenants`                      |
| neither exists?                             | 400 at create naming what was looked up, never a job that waits   |
| where does a tenant's uploaded file go?     | `gateway.prefixes.<tenant>` + `<namespace>/` if the admin named   |
|                                             | one (it must lie under one of the tenant's storage prefixes: the  |
|                                             | policy is refused at start otherwise), else the tenant's first    |
|                                             | storage prefix + `gateway/<namespace>/`                           |

Pure and parsed once, like barge/policy.py, which holds it as `Policy.gateway`.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
MAX_ALIAS_CHARS = 256


@dataclass(frozen=True)
class Alias:
    pool: str
    """The InferencePool's name, looked up in the caller's namespace."""
    tenants: tuple[str, ...] = ()
    """The tenants that may use the alias; none: every tenant."""


@dataclass(frozen=True)
class GatewayPolicy:
    aliases: tuple[tuple[str, Alias], ...] = ()
    prefixes: tuple[tuple[str, str], ...] = ()
    """Per tenant, the storage prefix of its gateway files (placeholders {tenant}, {namespace}), ending in /."""

    def prefix_for(self, tenant: str, namespace: str) -> str | None:
        """The tenant's gateway prefix with its placeholders filled, None when the admin named none."""
        chosen = dict(self.prefixes).get(tenant)
        return None if chosen is None else chosen.replace("{namespace}", namespace).replace("{tenant}", tenant)

    def candidates(self, tenant: str, model: str) -> tuple[str, ...]:
        """The pool names to look up in the caller's namespace for `model`, in order: the model itself when it can
        be a pool's name (the tenant's own pool), then the admin's alias when it applies to this tenant."""
        found: list[str] = [model] if _NAME.match(model) else []
        entry = dict(self.aliases).get(model)
        if entry is not None and (not entry.tenants or tenant in entry.tenants) and entry.pool not in found:
            found.append(entry.pool)
        return tuple(found)


DEFAULT = GatewayPolicy()


def _alias(name: Any, value: Any) -> tuple[str, Alias]:
    where = f"policy gateway.aliases.{name}"
    if not isinstance(name, str) or not name or len(name) > MAX_ALIAS_CHARS or not name.isprintable():
        raise ValueError(f"policy gateway.aliases: {name!r} is not a model name (1-{MAX_ALIAS_CHARS} characters)")
    entry = {"pool": value} if isinstance(value, str) else value
    if not isinstance(entry, Mapping):
        raise ValueError(f"{where} must be a pool name or {{pool, tenants}}")
    unknown = set(entry) - {"pool", "tenants"}
    if unknown:
        raise ValueError(f"{where}: unknown key(s) {sorted(unknown)} (expected pool and optional tenants)")
    pool = entry.get("pool")
    if not isinstance(pool, str) or not _NAME.match(pool):
        raise ValueError(f"{where}.pool must be an InferencePool name (a DNS label), not {pool!r}")
    tenants = entry.get("tenants") or []
    if not isinstance(tenants, list) or not all(isinstance(t, str) and _NAME.match(t) for t in tenants):
        raise ValueError(f"{where}.tenants must be a list of tenant names (DNS labels)")
    return name, Alias(pool, tuple(tenants))


def _tenant_prefix(tenant: Any, value: Any) -> tuple[str, str]:
    where = f"policy gateway.prefixes.{tenant}"
    if not isinstance(tenant, str) or not _NAME.match(tenant):
        raise ValueError(f"policy gateway.prefixes: {tenant!r} is not a tenant name (a DNS label)")
    if not isinstance(value, str) or "://" not in value or not value.split("://", 1)[1].strip("/"):
        raise ValueError(f"{where} must be a storage prefix such as s3://bucket/gateway/, not {value!r}")
    if any(part in (".", "..") for part in value.split("://", 1)[1].split("/")):
        raise ValueError(f"{where}: {value!r} has a . or .. segment")
    return tenant, value.rstrip("/") + "/"


def check_prefixes(policy: GatewayPolicy, storage_of: Callable[[str], tuple[str, ...]]) -> None:
    """Each gateway.prefixes entry lies under one of its tenant's storage prefixes (`storage_of(tenant)`, placeholders
    as written, {tenant} filled); else a ValueError naming the key, so the operator and the gateway do not start."""
    for tenant, prefix in policy.prefixes:
        allowed = tuple(p.replace("{tenant}", tenant) for p in storage_of(tenant))
        own = prefix.replace("{tenant}", tenant)
        if not any(own.startswith(p.rstrip("/") + "/") for p in allowed):
            raise ValueError(
                f"policy gateway.prefixes.{tenant}: {prefix!r} is not under one of tenant {tenant}'s storage "
                f"prefixes {list(allowed)}"
            )


def parse(data: Mapping[str, Any] | None) -> GatewayPolicy:
    """The `gateway` section; unknown keys stop the operator and the gateway (a typo must not drop an alias)."""
    section = dict(data or {})
    unknown = set(section) - {"aliases", "prefixes"}
    if unknown:
        raise ValueError(f"policy gateway: unknown key(s) {sorted(unknown)}")
    aliases = section.get("aliases") or {}
    if not isinstance(aliases, Mapping):
        raise ValueError("policy gateway.aliases must be a mapping of model name to pool")
    prefixes = section.get("prefixes") or {}
    if not isinstance(prefixes, Mapping):
        raise ValueError("policy gateway.prefixes must be a mapping of tenant name to storage prefix")
    return GatewayPolicy(
        tuple(_alias(k, v) for k, v in aliases.items()), tuple(_tenant_prefix(k, v) for k, v in prefixes.items())
    )
