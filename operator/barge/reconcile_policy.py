"""The admin's reconciliation settings: the `reconcile` section of the policy file (pure, parsed once).

```yaml
reconcile:
  thresholdUSD: 1            # per provider and UTC day; above it BargeBillingMismatch fires (default 0.01)
  intervalSeconds: 86400     # between comparisons (default daily)
  days: 3                    # complete UTC days compared each time, ending yesterday (default 3)
  providers:
    openai:    {secretRef: {namespace: barge-system, name: openai-admin, key: adminKey}, baseURL: ...}
    anthropic: {secretRef: {namespace: barge-system, name: anthropic-admin}}   # key defaults to adminKey
    azure-openai:                # Azure's bill: Cost Management, read by a service principal (Cost Management Reader)
      secretRef: {namespace: barge-system, name: azure-costs, key: clientSecret}   # key defaults to clientSecret
      tenantId: 00000000-0000-0000-0000-000000000000
      clientId: 11111111-1111-1111-1111-111111111111
      scope: /subscriptions/<id>/resourceGroups/<group of the Azure OpenAI resource>
      # baseURL: https://management.azure.com   loginURL: https://login.microsoftonline.com
    mistral: {}                  # accepted, but reported "not available for mistral: <reason>" (no daily report)
```

The admin key is read from a Secret marked `barge.dev/credential: "true"` (as every Secret Barge reads), named here
by the admin only: a tenant cannot point the operator at it. No providers listed: no reconciliation at all.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import Any

PROVIDERS = ("openai", "anthropic", "azure-openai", "mistral", "gemini")
#: Providers with no daily bill to read (providers/usage_reports.py NOT_AVAILABLE says why): no Secret needed.
NO_REPORT = ("mistral", "gemini")
_NAME = re.compile(r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$")


@dataclass(frozen=True)
class AdminKey:
    """Where one provider's admin key is: a marked Secret's key, and the provider's base URL (None: its own)."""

    provider: str
    namespace: str
    name: str
    key: str = "adminKey"
    base_url: str | None = None
    tenant_id: str = ""
    """azure-openai only, with client_id, scope and login_url: the service principal and the Cost Management scope."""
    client_id: str = ""
    scope: str = ""
    login_url: str | None = None


@dataclass(frozen=True)
class ReconcilePolicy:
    threshold_usd: Decimal = Decimal("0.01")
    """|provider's cost - Barge's| per provider and day above which the day is a mismatch."""
    interval_seconds: float = 86400.0
    days: int = 3
    providers: tuple[AdminKey, ...] = ()


DEFAULT = ReconcilePolicy()


def _closed(raw: Any, where: str, keys: tuple[str, ...]) -> Mapping[str, Any]:
    if raw is None:
        return {}
    if not isinstance(raw, Mapping):
        raise ValueError(f"policy {where} must be a mapping")
    unknown = set(raw) - set(keys)
    if unknown:
        raise ValueError(f"unknown policy {where} key(s): {sorted(unknown)}")
    return raw


def parse(raw: Any) -> ReconcilePolicy:
    data = _closed(raw, "reconcile", ("thresholdUSD", "intervalSeconds", "days", "providers"))
    try:
        threshold = Decimal(str(data.get("thresholdUSD", DEFAULT.threshold_usd)))
    except InvalidOperation:
        raise ValueError("policy reconcile.thresholdUSD must be a number (USD)") from None
    interval = float(data.get("intervalSeconds", DEFAULT.interval_seconds))
    days = int(data.get("days", DEFAULT.days))
    if threshold < 0 or interval <= 0 or not 1 <= days <= 31:
        raise ValueError("policy reconcile: thresholdUSD >= 0, intervalSeconds > 0 and days 1..31")
    keys = []
    for provider, entry in _closed(data.get("providers"), "reconcile.providers", PROVIDERS).items():
        where = f"reconcile.providers.{provider}"
        if provider in NO_REPORT:
            _closed(entry, where, ())
            keys.append(AdminKey(str(provider), "", ""))
            continue
        azure = provider == "azure-openai"
        known = ("secretRef", "baseURL", *(("tenantId", "clientId", "scope", "loginURL") if azure else ()))
        item = _closed(entry, where, known)
        ref = _closed(item.get("secretRef"), f"{where}.secretRef", ("namespace", "name", "key"))
        namespace, name, key = (str(ref.get(k, "")) for k in ("namespace", "name", "key"))
        if not _NAME.match(namespace) or not _NAME.match(name):
            raise ValueError(f"policy {where}.secretRef needs a namespace and a name (DNS names)")
        url = item.get("baseURL")
        extra: dict[str, Any] = {}
        if azure:
            extra = {k: str(item.get(p) or "") for k, p in (("tenant_id", "tenantId"), ("client_id", "clientId"))}
            extra["scope"] = str(item.get("scope") or "")
            if not all(extra.values()) or not extra["scope"].startswith("/subscriptions/"):
                raise ValueError(f"policy {where} needs tenantId, clientId and a scope /subscriptions/<id>[/...]")
            extra["login_url"] = str(item["loginURL"]) if item.get("loginURL") else None
        default_key = "clientSecret" if azure else "adminKey"
        keys.append(AdminKey(str(provider), namespace, name, key or default_key, str(url) if url else None, **extra))
    return ReconcilePolicy(threshold, interval, days, tuple(keys))
