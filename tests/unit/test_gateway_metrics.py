"""The gateway's metrics (gateway/metrics.py): its middleware on a real aiohttp app, scraped from its own server."""

from __future__ import annotations

from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer
from prometheus_client.parser import text_string_to_metric_families

from barge.gateway.metrics import TENANT, UPLOADED, GatewayMetrics


def _app(metrics: GatewayMetrics) -> web.Application:
    async def upload(request: web.Request) -> web.Response:
        request[TENANT] = request.headers["X-Tenant"]
        request[UPLOADED] = 1234
        return web.json_response({"id": "file-1"})

    async def batch(request: web.Request) -> web.Response:
        if "X-Tenant" not in request.headers:
            return web.json_response({"error": "no token"}, status=401)  # as Gateway.wrap answers a refusal
        request[TENANT] = request.headers["X-Tenant"]
        return web.json_response({"id": request.match_info["id"]})

    async def broken(request: web.Request) -> web.Response:
        request[TENANT] = "acme"
        raise RuntimeError("boom")

    async def healthz(_: web.Request) -> web.Response:
        return web.Response(text="ok")

    app = web.Application(middlewares=[metrics.middleware()])
    app.add_routes(
        [
            web.post("/v1/files", upload),
            web.get("/v1/batches/{id}", batch),
            web.get("/v1/broken", broken),
            web.get("/healthz", healthz),
        ]
    )
    return app


async def _scrape(metrics: GatewayMetrics) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    async with TestClient(TestServer(metrics.app())) as scraper:
        answer = await scraper.get("/metrics")
        assert answer.status == 200
        text = await answer.text()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


async def test_requests_by_tenant_route_and_code_upload_bytes_and_durations() -> None:
    metrics = GatewayMetrics()
    async with TestClient(TestServer(_app(metrics))) as client:
        for tenant in ("acme", "acme", "globex"):
            assert (await client.post("/v1/files", headers={"X-Tenant": tenant})).status == 200
        assert (await client.get("/v1/batches/batch_abc", headers={"X-Tenant": "acme"})).status == 200
        assert (await client.get("/v1/batches/batch_def", headers={"X-Tenant": "acme"})).status == 200
        assert (await client.get("/v1/batches/batch_abc")).status == 401
        assert (await client.get("/v1/no/such/path")).status == 404
        assert (await client.get("/v1/broken")).status == 500
        assert (await client.get("/healthz")).status == 200
    seen = await _scrape(metrics)

    def requests(tenant: str, route: str, code: str) -> float:
        key = ("barge_gateway_requests_total", (("code", code), ("route", route), ("tenant", tenant)))
        return seen.get(key, 0.0)

    assert requests("acme", "/v1/files", "200") == 2
    assert requests("globex", "/v1/files", "200") == 1
    assert requests("acme", "/v1/batches/{id}", "200") == 2  # the route's template, never the id
    assert requests("", "/v1/batches/{id}", "401") == 1  # refused before anyone was known
    assert requests("", "unmatched", "404") == 1
    assert requests("acme", "/v1/broken", "500") == 1
    assert not [k for k in seen if k[0] == "barge_gateway_requests_total" and ("route", "/healthz") in k[1]]
    assert seen[("barge_gateway_upload_bytes_total", (("tenant", "acme"),))] == 2468
    assert seen[("barge_gateway_upload_bytes_total", (("tenant", "globex"),))] == 1234
    count = ("barge_gateway_request_duration_seconds_count", (("route", "/v1/batches/{id}"),))
    assert seen[count] == 3
