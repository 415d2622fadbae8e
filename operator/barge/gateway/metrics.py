"""The gateway's Prometheus metrics, on a port of their own (`--metrics-port`), never on the callers' port.

Why a port of its own: the callers' port is the door for every tenant's applications; its /metrics would show
each tenant the others' names and traffic. The operator serves its metrics the same way (its own CollectorRegistry
on its own small aiohttp server, operator/metrics.py).

| metric                                   | labels              | meaning                                             |
| ---------------------------------------- | ------------------- | --------------------------------------------------- |
| `barge_gateway_requests_total`           | tenant, route, code | requests answered, by route template and HTTP       |
|                                          |                     | status (tenant "" before authentication)            |
| `barge_gateway_upload_bytes_total`       | tenant              | bytes of input files stored (accepted ones)         |
| `barge_gateway_request_duration_seconds` | route               | time to the response's headers (a download streams  |
|                                          |                     | on after them)                                      |

Labels are bounded: the tenant is the admin's (the namespace's label), the route is the route's template
(`/v1/batches/{id}`, never an id), an unknown path is `unmatched`.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable

from aiohttp import web
from aiohttp.typedefs import Middleware
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Histogram, generate_latest

#: Request keys the handlers set: the authenticated caller's tenant, and the bytes of a stored upload.
TENANT: web.RequestKey[str] = web.RequestKey("barge_gateway_tenant", str)
UPLOADED: web.RequestKey[int] = web.RequestKey("barge_gateway_uploaded", int)
UNMATCHED = "unmatched"
NOT_COUNTED = frozenset({"/healthz"})

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class GatewayMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        r = self.registry
        self.requests = Counter(
            "barge_gateway_requests", "Requests answered by the gateway", ["tenant", "route", "code"], registry=r
        )
        self.upload_bytes = Counter("barge_gateway_upload_bytes", "Bytes of input files stored", ["tenant"], registry=r)
        self.duration = Histogram(
            "barge_gateway_request_duration_seconds",
            "Time to the response's headers",
            ["route"],
            buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60),
            registry=r,
        )

    def middleware(self) -> Middleware:
        @web.middleware
        async def count(request: web.Request, handler: Handler) -> web.StreamResponse:
            resource = request.match_info.route.resource
            route = resource.canonical if resource is not None else UNMATCHED
            if route in NOT_COUNTED:
                return await handler(request)
            started = time.perf_counter()
            code = 500
            try:
                response = await handler(request)
                code = response.status
                return response
            except web.HTTPException as exc:  # aiohttp's own answers: 404 for an unknown path, 405 ...
                code = exc.status
                raise
            finally:
                tenant = request.get(TENANT, "")
                self.requests.labels(tenant, route, str(code)).inc()
                self.duration.labels(route).observe(time.perf_counter() - started)
                if request.get(UPLOADED):
                    self.upload_bytes.labels(tenant).inc(request[UPLOADED])

        return count

    def app(self) -> web.Application:
        """The metrics server's application: GET /metrics."""

        async def metrics(_: web.Request) -> web.Response:
            return web.Response(body=generate_latest(self.registry), headers={"Content-Type": CONTENT_TYPE_LATEST})

        app = web.Application()
        app.add_routes([web.get("/metrics", metrics)])
        return app
