"""`barge emulator --vllm`: a stand-in for a vLLM OpenAI-compatible server (no GPU, no model).

Continuous batching is modelled as what a client can observe: at most `max_num_seqs` requests run at once,
the rest wait; `/metrics` reports vllm:num_requests_running and vllm:num_requests_waiting as they are, so
autoscaling on waiting requests can be exercised. /health answers at once, /v1/models lists the served model.

With an API key (VLLM_API_KEY, as vLLM reads it, or `install(api_key=...)`), every /v1 route answers 401 unless
the request carries `Authorization: Bearer <key>`; /health and /metrics stay open, as in vLLM's own middleware.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import os
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web

from barge.emulator import embeddings as emb
from barge.emulator import openai_shapes
from barge.emulator.core import STORE, answer, answer_response, item_from_messages

VLLM: web.AppKey[VllmState] = web.AppKey("vllm", object)  # type: ignore[arg-type]


class VllmState:
    def __init__(self, model: str, max_num_seqs: int) -> None:
        self.model = model
        self.slots = asyncio.Semaphore(max_num_seqs)
        self.running = 0
        self.waiting = 0
        self.served = 0


async def health(_: web.Request) -> web.Response:
    return web.Response(text="")


async def models(request: web.Request) -> web.Response:
    model = request.app[VLLM].model
    return web.json_response(
        {
            "object": "list",
            "data": [
                {"id": model, "object": "model", "created": 0, "owned_by": "vllm", "root": model, "max_model_len": 8192}
            ],
        }
    )


async def metrics(request: web.Request) -> web.Response:
    vllm = request.app[VLLM]
    label = f'model_name="{vllm.model}"'
    text = (
        "# HELP vllm:num_requests_running Number of requests in model execution batches.\n"
        "# TYPE vllm:num_requests_running gauge\n"
        f"vllm:num_requests_running{{{label}}} {float(vllm.running)}\n"
        "# HELP vllm:num_requests_waiting Number of requests waiting to be processed.\n"
        "# TYPE vllm:num_requests_waiting gauge\n"
        f"vllm:num_requests_waiting{{{label}}} {float(vllm.waiting)}\n"
        "# HELP vllm:request_success_total Count of successfully processed requests.\n"
        "# TYPE vllm:request_success_total counter\n"
        f"vllm:request_success_total{{{label}}} {float(vllm.served)}\n"
    )
    return web.Response(text=text, content_type="text/plain")


async def _body(request: web.Request, model: str) -> dict[str, Any] | web.Response:
    """The request's JSON object for the served `model`, or the error vLLM answers (chat and embeddings alike)."""
    try:
        body = json.loads(await request.read())
    except (json.JSONDecodeError, UnicodeDecodeError):
        return openai_shapes.error(400, "We could not parse the JSON body of your request.")
    if not isinstance(body, dict):
        return openai_shapes.error(400, "The body must be a JSON object.")
    if body.get("model") != model:
        return openai_shapes.error(404, f"The model `{body.get('model')}` does not exist.", type_="NotFoundError")
    return body


async def chat(request: web.Request) -> web.Response:
    vllm = request.app[VLLM]
    store = request.app[STORE]
    body = await _body(request, vllm.model)
    if isinstance(body, web.Response):
        return body
    item = item_from_messages("vllm", body)
    if item.invalid:
        return openai_shapes.error(400, item.invalid)
    vllm.waiting += 1
    async with vllm.slots:
        vllm.waiting -= 1
        vllm.running += 1
        try:
            await asyncio.sleep(store.profile.sync.latency_ms / 1000)
        finally:
            vllm.running -= 1
    outcome = store.sync_outcome()
    if outcome == "server_error":
        return openai_shapes.error(500, "engine error", type_="InternalServerError")
    vllm.served += 1
    ans = answer(item, outcome, cache_hit=False)
    return answer_response(
        openai_shapes.completion_json(item, ans, f"chatcmpl-vllm-{vllm.served}", store.clock()), ans, vllm.served
    )


async def embeddings(request: web.Request) -> web.Response:
    """vLLM's OpenAI /v1/embeddings (an embedding model served with --task embed): one vector per input, from
    emulator/embeddings.py, through the same slots as chat."""
    vllm = request.app[VLLM]
    store = request.app[STORE]
    body = await _body(request, vllm.model)
    if isinstance(body, web.Response):
        return body
    asked = emb.read_body(body)
    if isinstance(asked, str):
        return openai_shapes.error(400, asked)
    vllm.waiting += 1
    async with vllm.slots:
        vllm.waiting -= 1
        vllm.running += 1
        try:
            await asyncio.sleep(store.profile.sync.latency_ms / 1000)
        finally:
            vllm.running -= 1
    if store.sync_outcome() == "server_error":
        return openai_shapes.error(500, "engine error", type_="InternalServerError")
    vllm.served += 1
    return web.json_response(emb.embedding_json(vllm.model, *asked))


def key_check(api_key: str) -> Callable[..., Awaitable[web.StreamResponse]]:
    """vLLM's AuthenticationMiddleware: /v1 paths need the bearer key (compared in constant time)."""
    wanted = f"Bearer {api_key}".encode()

    @web.middleware
    async def check(
        request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
    ) -> web.StreamResponse:
        if request.path.startswith("/v1") and not hmac.compare_digest(
            request.headers.get("Authorization", "").encode(), wanted
        ):
            return web.json_response({"error": "Unauthorized"}, status=401)
        return await handler(request)

    return check


def install(app: web.Application, model: str, max_num_seqs: int, api_key: str | None = None) -> None:
    """Routes of a vLLM server on `app` (before it starts); `api_key` None: VLLM_API_KEY from the environment."""
    key = os.environ.get("VLLM_API_KEY", "") if api_key is None else api_key
    if key:
        app.middlewares.append(key_check(key))
    app[VLLM] = VllmState(model, max_num_seqs)
    app.add_routes(
        [
            web.get("/health", health),
            web.get("/v1/models", models),
            web.get("/metrics", metrics),
            web.post("/v1/chat/completions", chat),
            web.post("/v1/embeddings", embeddings),
        ]
    )
