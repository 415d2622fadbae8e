"""The gateway's aiohttp application: the OpenAI routes (server.py), the Anthropic ones (anthropic_api.py), /healthz."""

from __future__ import annotations

from aiohttp import web

from barge.gateway.anthropic_api import MessageBatches
from barge.gateway.server import Gateway, GatewaySettings
from barge.operator.kube import Kube
from barge.policy import Policy


async def healthz(_: web.Request) -> web.Response:
    return web.Response(text="ok")


def make_app(kube: Kube, policy: Policy, settings: GatewaySettings) -> web.Application:
    gateway = Gateway(kube, policy, settings)
    app = web.Application(client_max_size=settings.max_upload_bytes + (1 << 20))
    app.add_routes([web.get("/healthz", healthz), *gateway.routes(), *MessageBatches(gateway).routes()])

    async def close(_: web.Application) -> None:
        await kube.close()

    app.on_cleanup.append(close)
    return app


def serve(host: str, port: int, policy: Policy, settings: GatewaySettings) -> None:
    web.run_app(make_app(Kube(), policy, settings), host=host, port=port, print=None)
