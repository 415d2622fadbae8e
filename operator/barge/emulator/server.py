"""The emulator's HTTP server: routes, API-key checks, provider-shaped errors, state endpoint, runner.

Every answer, including unknown paths and malformed bodies, comes back in the shape of the provider the
path belongs to; a 500 from the emulator itself would be a bug, and is logged as one.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import pickle
import signal
import threading
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from aiohttp import web

from barge.emulator import (
    anthropic_api,
    azure_costs,
    bedrock_api,
    gemini_api,
    mistral_api,
    openai_api,
    openai_compatible_api,
    openai_shapes,
    usage_reports,
    vertex_api,
    vllm,
)
from barge.emulator.core import STORE, SYNC_WINDOW, RateWindow, Store
from barge.emulator.profile import Profile

log = logging.getLogger("barge.emulator")
MAX_BODY = 300 * 1024 * 1024  # above every provider limit, so the limits answer in the provider's words

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def _family(path: str) -> str:
    if path.startswith(("/v1/messages", "/v1/organizations/")):
        return "anthropic"
    if path.startswith(("/v1/", "/openai/", "/groq/", "/together/")):
        return "openai"
    if path.startswith("/mistral/"):
        return "mistral"
    if path.startswith("/bedrock/"):
        return "bedrock"
    if path.startswith("/gemini/"):
        return "gemini"
    if path.startswith("/vertex/"):
        return "vertex"
    return "emulator"


def _error(family: str, status: int, message: str) -> web.Response:
    if family == "anthropic":
        return anthropic_api.error(status if status in anthropic_api.ERROR_TYPES else 400, message)
    if family == "openai":
        return openai_shapes.error(status, message)
    if family == "mistral":
        return mistral_api.error(status, message)
    if family == "bedrock":
        return bedrock_api.error(status, message)
    if family == "gemini":
        return gemini_api.error(status, message)
    if family == "vertex":
        return vertex_api.error(status, message)
    return web.json_response({"error": message}, status=status)


def _api_key(request: web.Request, family: str) -> str | None:
    if family == "anthropic":
        key = request.headers.get("x-api-key")
        if key is None and request.headers.get("authorization", "").startswith("Bearer "):
            key = request.headers["authorization"][7:]
        return key
    if family == "gemini":
        return gemini_api.api_key(request)
    if family == "bedrock":
        return bedrock_api.access_key(request)
    if family == "vertex":
        return vertex_api.access_token(request)
    if request.path.startswith("/openai/") and "api-key" in request.headers:
        return request.headers["api-key"]
    auth = request.headers.get("authorization", "")
    return auth[7:] if auth.startswith("Bearer ") else None


def _unauthorized(family: str) -> web.Response:
    if family == "anthropic":
        return anthropic_api.error(401, "invalid x-api-key")
    if family == "mistral":
        return mistral_api.unauthorized()
    if family == "bedrock":
        return bedrock_api.unauthorized()
    if family == "gemini":
        return gemini_api.unauthorized()
    if family == "vertex":
        return vertex_api.unauthorized()
    return openai_shapes.error(401, "Incorrect API key provided.", code="invalid_api_key")


@web.middleware
async def provider_shape(request: web.Request, handler: Handler) -> web.StreamResponse:
    family = _family(request.path)
    resource = request.match_info.route.resource
    route = f"{request.method} {resource.canonical if resource is not None else request.path}"
    counts = request.app[STORE].requests
    counts[route] = counts.get(route, 0) + 1
    if family != "emulator":
        key = _api_key(request, family)
        if not key or key == "invalid":
            return _unauthorized(family)
    try:
        return await handler(request)
    except web.HTTPException as exc:
        if exc.status == 413:
            return _error(family, 413, "Request exceeds the maximum allowed size")
        return _error(family, exc.status, exc.reason or "error")
    except Exception:
        log.exception("emulator bug while serving %s %s", request.method, request.path)
        return _error(family, 500, "emulator internal error")


async def state(request: web.Request) -> web.Response:
    return web.json_response(request.app[STORE].state())


async def reset(request: web.Request) -> web.Response:
    request.app[STORE].reset()
    return web.json_response({"reset": True})


def make_app(
    profile: Profile,
    store: Store | None = None,
    vllm_model: str | None = None,
    max_num_seqs: int = 16,
    api_key: str | None = None,
) -> web.Application:
    """The provider emulator, or with `vllm_model` a vLLM server serving that model (`api_key`: the key its /v1
    requires; None: VLLM_API_KEY from the environment, as vLLM reads it)."""
    if vllm_model is not None:
        app = web.Application(client_max_size=MAX_BODY)
        app[STORE] = store or Store(profile)
        vllm.install(app, vllm_model, max_num_seqs, api_key)
        app.add_routes([web.get("/_emulator/state", state)])
        return app
    app = web.Application(client_max_size=MAX_BODY, middlewares=[provider_shape])
    app[STORE] = store or Store(profile)
    app[SYNC_WINDOW] = RateWindow(profile.sync.quota.tokens_per_minute, profile.sync.quota.requests_per_minute)
    app.add_routes(anthropic_api.routes())
    app.add_routes(openai_api.routes())
    app.add_routes(openai_compatible_api.routes())
    app.add_routes(mistral_api.routes())
    app.add_routes(bedrock_api.routes())
    app.add_routes(gemini_api.routes())
    app.add_routes(vertex_api.routes())
    app.add_routes(usage_reports.routes())
    azure_costs.install(app)
    app.add_routes([web.get("/_emulator/state", state), web.post("/_emulator/reset", reset)])
    return app


def load_store(path: Path | None, profile: Profile) -> Store:
    if path is not None and path.exists():
        with path.open("rb") as fh:
            store: Store = pickle.load(fh)  # noqa: S301 - our own state file
        store.profile = profile
        return store
    return Store(profile)


def save_store(path: Path | None, store: Store) -> None:
    if path is None:
        return
    tmp = path.with_suffix(".tmp")
    with tmp.open("wb") as fh:
        pickle.dump(store, fh)
    tmp.replace(path)


async def serve(
    host: str,
    port: int,
    profile: Profile,
    state_file: Path | None = None,
    ready: Callable[[int], None] | None = None,
    stop: asyncio.Event | None = None,
    vllm_model: str | None = None,
    max_num_seqs: int = 16,
    api_key: str | None = None,
) -> None:
    """Serve until `stop` is set (or SIGINT/SIGTERM when run as the CLI)."""
    store = load_store(state_file, profile)
    runner = web.AppRunner(make_app(profile, store, vllm_model, max_num_seqs, api_key), access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, host, port)
    await site.start()
    bound = runner.addresses[0][1] if runner.addresses else port
    log.info("barge emulator listening on http://%s:%s", host, bound)
    if ready:
        ready(int(bound))
    stop = stop or asyncio.Event()
    if threading.current_thread() is threading.main_thread():
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            with contextlib.suppress(NotImplementedError):
                loop.add_signal_handler(sig, stop.set)
    try:
        await stop.wait()
    finally:
        save_store(state_file, store)
        await runner.cleanup()


class EmulatorThread:
    """The emulator on a background thread with its own loop: for tests and benchmarks in one process."""

    def __init__(
        self, profile: Profile, host: str = "127.0.0.1", vllm_model: str | None = None, max_num_seqs: int = 16
    ) -> None:
        self.profile = profile
        self.vllm_model = vllm_model
        self.max_num_seqs = max_num_seqs
        self.host = host
        self.port = 0
        self._loop = asyncio.new_event_loop()
        self._stop: asyncio.Event | None = None
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, name="barge-emulator", daemon=True)
        self.store = Store(profile)

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._stop = asyncio.Event()

        def ready(port: int) -> None:
            self.port = port
            self._ready.set()

        try:
            self._loop.run_until_complete(self._serve(ready))
            self._loop.run_until_complete(self._loop.shutdown_default_executor())
        finally:
            self._loop.close()  # its self-pipe and epoll: a test session starts hundreds of emulators

    async def _serve(self, ready: Callable[[int], None]) -> None:
        assert self._stop is not None
        runner = web.AppRunner(make_app(self.profile, self.store, self.vllm_model, self.max_num_seqs), access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, self.host, 0)
        await site.start()
        ready(int(runner.addresses[0][1]))
        try:
            await self._stop.wait()
        finally:
            await runner.cleanup()

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def start(self) -> EmulatorThread:
        self._thread.start()
        if not self._ready.wait(10):
            raise RuntimeError("emulator did not start")
        return self

    def stop(self) -> None:
        if self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)
        if self._thread.is_alive():
            self._thread.join(10)
        elif self._thread.ident is None:  # never started
            self._loop.close()

    def __enter__(self) -> EmulatorThread:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()
