"""The gateway's aiohttp application: the OpenAI routes (server.py), the Anthropic ones (anthropic_api.py), /healthz."""

from __future__ import annotations

import asyncio
import contextlib

from aiohttp import web

from barge.gateway.anthropic_api import MessageBatches
from barge.gateway.metrics import GatewayMetrics
from barge.gateway.server import Gateway, GatewaySettings
from barge.gateway.tls import ServerTLS
from barge.operator.kube import Kube
from barge.policy import Policy


async def healthz(_: web.Request) -> web.Response:
    return web.Response(text="ok")


def make_app(
    kube: Kube,
    policy: Policy,
    settings: GatewaySettings,
    metrics: GatewayMetrics | None = None,
    host: str = "127.0.0.1",
    tls: ServerTLS | None = None,
) -> web.Application:
    """The callers' application; with `settings.metrics_port` it also starts the /metrics server on that port, with
    `tls` it watches the certificate files for a renewal (gateway/tls.py)."""
    gateway = Gateway(kube, policy, settings)
    counted = metrics or GatewayMetrics()
    app = web.Application(client_max_size=settings.max_upload_bytes + (1 << 20), middlewares=[counted.middleware()])
    app.add_routes([web.get("/healthz", healthz), *gateway.routes(), *MessageBatches(gateway).routes()])
    runners: list[web.AppRunner] = []
    watchers: list[asyncio.Task[None]] = []

    async def start_metrics(_: web.Application) -> None:
        if settings.metrics_port:
            runner = web.AppRunner(counted.app(), access_log=None)
            await runner.setup()
            await web.TCPSite(runner, host, settings.metrics_port).start()
            runners.append(runner)
        if tls is not None:
            watchers.append(asyncio.create_task(tls.watch()))

    async def close(_: web.Application) -> None:
        for task in watchers:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        for runner in runners:
            await runner.cleanup()
        await kube.close()

    app.on_startup.append(start_metrics)
    app.on_cleanup.append(close)
    return app


def serve(host: str, port: int, policy: Policy, settings: GatewaySettings, tls: ServerTLS | None = None) -> None:
    """Serve the callers' port, over HTTPS with `tls` (gateway/tls.py); the metrics port stays HTTP."""
    app = make_app(Kube(), policy, settings, host=host, tls=tls)
    web.run_app(app, host=host, port=port, ssl_context=tls.context if tls else None, print=None)
