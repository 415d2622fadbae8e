"""Azure OpenAI's own bill, for reconciliation: the Cost Management Query API over plain HTTP (usage_reports.py).

Azure OpenAI has no usage or cost report of its own (its resource keys cannot read spend): what Azure invoices is
in Cost Management, read with a service principal (a Cost Management Reader on the scope), so

| step  | call                                                                                                   |
| ----- | ------------------------------------------------------------------------------------------------------ |
| token | POST {loginURL}/{tenantId}/oauth2/v2.0/token (client_credentials, scope {managementURL}/.default)      |
| query | POST {managementURL}/{scope}/providers/Microsoft.CostManagement/query?api-version=2023-11-01            |
|       | type ActualCost, timeframe Custom, granularity Daily, Sum of Cost, filtered to ResourceType            |
|       | microsoft.cognitiveservices/accounts (Azure OpenAI resources); every page (properties.nextLink)        |

The answer is a table (`properties.columns` names, `properties.rows`): Cost, UsageDate (yyyymmdd) and Currency are
read by name, never by position. Rows in another currency than USD are refused (Barge's ledger is in USD), not
converted. Cost Management gives meter quantities, not tokens, so the provider's token count stays 0 here. No SDK
of this project has the call (the openai SDK reaches the data plane only), hence httpx2, which the SDKs bring.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

import httpx2

API_VERSION = "2023-11-01"
MANAGEMENT_URL = "https://management.azure.com"
LOGIN_URL = "https://login.microsoftonline.com"
RESOURCE_TYPE = "microsoft.cognitiveservices/accounts"
PAGES = 100  # a few days of one scope is one page; never loop on a broken nextLink


@dataclass(frozen=True)
class AzureScope:
    """Where Azure's bill is read: the service principal (the secret is apart) and the Cost Management scope."""

    tenant_id: str
    client_id: str
    scope: str
    """/subscriptions/<id> or /subscriptions/<id>/resourceGroups/<name> (the resource group of the Azure OpenAI
    resource makes the bill that resource's and its neighbours' of the same type only)."""
    management_url: str = MANAGEMENT_URL
    login_url: str = LOGIN_URL


class AzureCostError(RuntimeError):
    """Azure answered with an error or an answer Barge cannot read (message from Azure's error body)."""


def _iso(when: float) -> str:
    return datetime.fromtimestamp(when, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _error(answer: httpx2.Response) -> AzureCostError:
    try:
        body = answer.json()
        detail = body.get("error") if isinstance(body, dict) else None
        text = detail.get("message") or detail.get("code") if isinstance(detail, dict) else None
        text = text or (body.get("error_description") if isinstance(body, dict) else None)
    except (ValueError, AttributeError):
        text = None
    return AzureCostError(f"HTTP {answer.status_code}: {text or answer.text[:200]}")


def token(http: httpx2.Client, where: AzureScope, secret: str) -> str:
    answer = http.post(
        f"{where.login_url.rstrip('/')}/{where.tenant_id}/oauth2/v2.0/token",
        data={
            "grant_type": "client_credentials",
            "client_id": where.client_id,
            "client_secret": secret,
            "scope": f"{where.management_url.rstrip('/')}/.default",
        },
    )
    if answer.status_code != 200:
        raise _error(answer)
    value = answer.json().get("access_token")
    if not isinstance(value, str) or not value:
        raise AzureCostError("the token endpoint answered without an access_token")
    return value


def query_body(start: float, end: float) -> dict[str, Any]:
    return {
        "type": "ActualCost",
        "timeframe": "Custom",
        "timePeriod": {"from": _iso(start), "to": _iso(end - 1)},  # Azure's "to" is inclusive
        "dataset": {
            "granularity": "Daily",
            "aggregation": {"totalCost": {"name": "Cost", "function": "Sum"}},
            "filter": {"dimensions": {"name": "ResourceType", "operator": "In", "values": [RESOURCE_TYPE]}},
        },
    }


def daily_costs(http: httpx2.Client, where: AzureScope, bearer: str, start: float, end: float) -> dict[str, Decimal]:
    """Day (YYYY-MM-DD) -> USD Azure will invoice for the scope's Azure OpenAI resources, every page read."""
    scope = "/" + where.scope.strip("/")
    url: str | None = (
        f"{where.management_url.rstrip('/')}{scope}/providers/Microsoft.CostManagement/query?api-version={API_VERSION}"
    )
    body = json.dumps(query_body(start, end))
    days: dict[str, Decimal] = {}
    for _ in range(PAGES):
        if not url:
            return days
        answer = http.post(
            url, content=body, headers={"Authorization": f"Bearer {bearer}", "Content-Type": "application/json"}
        )
        if answer.status_code != 200:
            raise _error(answer)
        props = answer.json().get("properties") or {}
        names = [str(c.get("name", "")) for c in props.get("columns") or []]
        try:
            cost, date, currency = (names.index(n) for n in ("Cost", "UsageDate", "Currency"))
        except ValueError:
            raise AzureCostError(f"the cost query answered columns {names}, not Cost, UsageDate and Currency") from None
        for row in props.get("rows") or []:
            if str(row[currency]).upper() != "USD":
                raise AzureCostError(f"the scope is billed in {row[currency]}, not USD: Barge does not convert")
            text = str(int(row[date]))
            day = f"{text[:4]}-{text[4:6]}-{text[6:8]}"
            days[day] = days.get(day, Decimal(0)) + Decimal(str(row[cost]))
        url = props.get("nextLink") or None
    raise AzureCostError(f"the cost query had more than {PAGES} pages")


def fetch(where: AzureScope, secret: str, start: float, end: float) -> dict[str, Decimal]:
    with httpx2.Client(timeout=60.0, follow_redirects=False) as http:
        return daily_costs(http, where, token(http, where, secret), start, end)
