"""providers/azure_costs.py against answers Cost Management really gives that the emulator does not: columns in
another order (read by name), a second page behind properties.nextLink (every page read), a scope billed in EUR
(refused, never converted), a table without a Cost column (refused by name). A small aiohttp server on 127.0.0.1
answers in Azure's shape."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from decimal import Decimal
from typing import Any

import httpx2
import pytest
from aiohttp import web

from barge.providers import azure_costs

PAGES: dict[str, dict[str, Any]] = {}


async def query(request: web.Request) -> web.Response:
    assert request.headers["authorization"] == "Bearer tok"
    body = await request.json()
    assert body["dataset"]["granularity"] == "Daily"
    return web.json_response({"properties": PAGES[request.query.get("page", "1")]})


@pytest.fixture
async def server() -> AsyncIterator[str]:
    app = web.Application()
    app.add_routes([web.post("/{scope:.+}/providers/Microsoft.CostManagement/query", query)])
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    yield f"http://127.0.0.1:{port}"
    await runner.cleanup()


def read(url: str) -> dict[str, Decimal]:
    where = azure_costs.AzureScope("t", "c", "/subscriptions/s", management_url=url)
    with httpx2.Client() as http:
        return azure_costs.daily_costs(http, where, "tok", 1_764_460_800, 1_764_633_600)


async def test_columns_by_name_and_every_page(server: str) -> None:
    columns = [{"name": n, "type": "x"} for n in ("UsageDate", "Currency", "Cost")]
    PAGES["1"] = {
        "columns": columns,
        "rows": [[20261130, "USD", 1.25]],
        "nextLink": f"{server}/subscriptions/s/providers/Microsoft.CostManagement/query?page=2",
    }
    PAGES["2"] = {"columns": columns, "rows": [[20261130, "USD", 0.5], [20261201, "USD", 2]], "nextLink": None}
    assert await asyncio.to_thread(read, server) == {"2026-11-30": Decimal("1.75"), "2026-12-01": Decimal("2")}


@pytest.mark.parametrize(
    ("page", "message"),
    [
        (
            {"columns": [{"name": n} for n in ("Cost", "UsageDate", "Currency")], "rows": [[3, 20261130, "EUR"]]},
            "billed in EUR, not USD",
        ),
        ({"columns": [{"name": n} for n in ("PreTaxCost", "UsageDate", "Currency")], "rows": []}, "not Cost"),
    ],
)
async def test_what_barge_cannot_compare_is_refused(server: str, page: dict[str, Any], message: str) -> None:
    PAGES["1"] = page
    with pytest.raises(azure_costs.AzureCostError, match=message):
        await asyncio.to_thread(read, server)
