"""Azure's bill for the Azure OpenAI batches this emulator processed: Entra ID's token endpoint and Cost
Management's query, in their shapes (providers/azure_costs.py reads them).

| route                                                                           | answer                       |
| ------------------------------------------------------------------------------- | ---------------------------- |
| POST /azure/login/{tenant}/oauth2/v2.0/token                                    | a bearer token for any       |
|                                                                                 | client_credentials grant     |
| POST /azure/management/{scope}/providers/Microsoft.CostManagement/query         | columns Cost, UsageDate,     |
|                                                                                 | Currency; one row per day    |

Give `<emulator>/azure/login` as the login URL and `<emulator>/azure/management` as the management URL. The cost
is every request of the ended Azure batches (face `/openai/...`), priced as emulator/usage_reports.py prices them
(the batch rate of the shipped table times `billing.overchargeRatio`), on the day each batch ended, in USD; only a
query filtered to ResourceType microsoft.cognitiveservices/accounts (or unfiltered) sees them. A client secret
`invalid` is refused (AADSTS7000215), a query without an issued token is 401, as Azure answers.
"""

from __future__ import annotations

import secrets
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

from aiohttp import web

from barge.emulator.core import STORE
from barge.emulator.usage_reports import _cost, _processed

TOKENS = web.AppKey("azure_tokens", set[str])  # the bearer tokens issued
RESOURCE_TYPE = "microsoft.cognitiveservices/accounts"


def _azure_error(status: int, code: str, message: str) -> web.Response:
    return web.json_response({"error": {"code": code, "message": message}}, status=status)


async def token(request: web.Request) -> web.Response:
    form = await request.post()
    if form.get("grant_type") != "client_credentials" or not form.get("client_id"):
        return web.json_response(
            {"error": "invalid_request", "error_description": "AADSTS900144: grant_type and client_id are required"},
            status=400,
        )
    if not form.get("client_secret") or form.get("client_secret") == "invalid":
        return web.json_response(
            {"error": "invalid_client", "error_description": "AADSTS7000215: Invalid client secret provided."},
            status=401,
        )
    issued = secrets.token_hex(16)
    request.app[TOKENS].add(issued)
    return web.json_response({"token_type": "Bearer", "expires_in": 3599, "access_token": issued})


def _day(text: str) -> int:
    value = datetime.fromisoformat(text.replace("Z", "+00:00"))
    value = value if value.tzinfo else value.replace(tzinfo=UTC)
    return int(value.timestamp() // 86400) * 86400


def _sees_openai(dataset: dict[str, Any]) -> bool:
    dims = (dataset.get("filter") or {}).get("dimensions")
    if not dims:
        return True
    return dims.get("name") == "ResourceType" and RESOURCE_TYPE in [str(v).lower() for v in dims.get("values", [])]


async def query(request: web.Request) -> web.Response:
    auth = request.headers.get("authorization", "")
    if not auth.startswith("Bearer ") or auth[7:] not in request.app[TOKENS]:
        return _azure_error(401, "AuthenticationFailed", "Authentication failed.")
    if request.query.get("api-version") is None:
        return _azure_error(400, "MissingApiVersionParameter", "The api-version query parameter is required.")
    try:
        body = await request.json()
        period, dataset = body["timePeriod"], body["dataset"]
        lo, hi = _day(period["from"]), _day(period["to"])
    except (ValueError, KeyError, TypeError) as exc:
        return _azure_error(400, "BadRequest", f"Invalid query definition: {exc}")
    if body.get("timeframe") != "Custom" or dataset.get("granularity") != "Daily" or hi < lo:
        return _azure_error(400, "BadRequest", "only a Custom timeframe with Daily granularity is emulated")
    store = request.app[STORE]
    costs: dict[int, Decimal] = {}
    if _sees_openai(dataset):
        for (day, model, batch), counts in _processed(store, ("azure",)).items():
            if lo <= day <= hi:
                costs[day] = costs.get(day, Decimal(0)) + _cost(store, model, counts, batch)
    rows = [[float(c), int(datetime.fromtimestamp(d, UTC).strftime("%Y%m%d")), "USD"] for d, c in sorted(costs.items())]
    scope = request.match_info["scope"]
    return web.json_response(
        {
            "id": f"/{scope}/providers/Microsoft.CostManagement/query/{secrets.token_hex(8)}",
            "name": secrets.token_hex(8),
            "type": "Microsoft.CostManagement/query",
            "properties": {
                "nextLink": None,
                "columns": [
                    {"name": "Cost", "type": "Number"},
                    {"name": "UsageDate", "type": "Number"},
                    {"name": "Currency", "type": "String"},
                ],
                "rows": rows,
            },
        }
    )


def install(app: web.Application) -> None:
    app[TOKENS] = set()
    app.add_routes(
        [
            web.post("/azure/login/{tenant}/oauth2/v2.0/token", token),
            web.post("/azure/management/{scope:.+}/providers/Microsoft.CostManagement/query", query),
        ]
    )
