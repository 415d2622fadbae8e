"""Build an adapter from plain settings (what a manifest and a Secret provide)."""

from __future__ import annotations

from typing import Any

from barge.providers.base import BatchProvider
from barge.providers.guard import Allowed, CappedTransport, guarded_transport, pool_http_client

DEFAULT_AZURE_API_VERSION = "2025-04-01-preview"


def _http_client(sdk: Any, guard: Allowed | None, engine_pool: bool = False) -> Any:
    if engine_pool:
        return pool_http_client(sdk)
    if guard is None:
        return None  # the SDK's own client (local runs)
    return sdk.DefaultAsyncHttpxClient(transport=CappedTransport(guarded_transport(guard)), follow_redirects=False)


def make_provider(
    kind: str,
    api_key: str,
    *,
    base_url: str = "",
    api_version: str = "",
    timeout: float = 600.0,
    sync_retries: int = 2,
    guard: Allowed | None = None,
    engine_pool: bool = False,
) -> BatchProvider:
    """`base_url` is handed to the SDK unchanged (for Azure it is the endpoint). Batch creates never retry;
    `sync_retries` applies to reads and to synchronous calls. With `guard(host, address)` (operator mode) every
    connection is checked against the endpoint policy and redirects are not followed. `engine_pool` (an
    InferencePool's vLLM): the SDK's aiohttp transport behind the same guard, answers capped, no redirects, no
    proxies from the environment (providers.guard.pool_http_client). Without either (local runs) synchronous calls
    use the SDK's aiohttp transport: at 64 calls in flight it costs half the CPU per call of the default httpx one
    (bench/bench_sync.py); the guard is an httpx transport, so guarded calls keep it."""
    if engine_pool and kind != "openai":
        raise ValueError("an engine pool speaks the OpenAI API: kind must be openai")
    # Each SDK is imported only when its provider is used: the anthropic SDK alone costs ~90 MB of RSS.
    if kind == "anthropic":
        import anthropic

        from barge.providers.anthropic_provider import AnthropicProvider

        return AnthropicProvider(
            anthropic.AsyncAnthropic(
                api_key=api_key,
                base_url=base_url or None,
                timeout=timeout,
                max_retries=sync_retries,
                http_client=_http_client(anthropic, guard),
            ),
            aiohttp_sync=guard is None,
        )
    import openai

    from barge.providers.openai_provider import OpenAIProvider

    if kind == "openai":
        return OpenAIProvider(
            openai.AsyncOpenAI(
                api_key=api_key,
                base_url=base_url or None,
                timeout=timeout,
                max_retries=sync_retries,
                http_client=_http_client(openai, guard, engine_pool),
            ),
            aiohttp_sync=guard is None and not engine_pool,  # a pool's client is aiohttp already
        )
    if kind == "openai-compatible":
        if not base_url:
            raise ValueError("openai-compatible needs provider.baseURL: the service's OpenAI-compatible /v1 URL")
        return OpenAIProvider(
            openai.AsyncOpenAI(
                api_key=api_key,
                base_url=base_url,
                timeout=timeout,
                max_retries=sync_retries,
                http_client=_http_client(openai, guard),
            ),
            compatible=True,
            aiohttp_sync=guard is None,
        )
    if kind == "mistral":
        from barge.providers.mistral_provider import make_mistral

        return make_mistral(api_key, base_url=base_url, timeout=timeout, sync_retries=sync_retries, guard=guard)
    if kind == "gemini":
        from barge.providers.gemini_provider import make_gemini

        return make_gemini(api_key, base_url=base_url, timeout=timeout, sync_retries=sync_retries, guard=guard)
    if kind == "bedrock":  # api_key: the Secret's JSON (keys, region, role ARN, S3 prefixes)
        from barge.providers.bedrock_provider import make_bedrock

        return make_bedrock(api_key, base_url=base_url, timeout=timeout, sync_retries=sync_retries, guard=guard)
    if kind == "vertex":  # api_key: the Secret's JSON (service account key, project, location, GCS prefix)
        from barge.providers.vertex_provider import make_vertex

        return make_vertex(api_key, base_url=base_url, timeout=timeout, sync_retries=sync_retries, guard=guard)
    if kind == "azure-openai":
        if not base_url:
            raise ValueError("azure-openai needs provider.baseURL: the resource endpoint")
        return OpenAIProvider(
            openai.AsyncAzureOpenAI(
                api_key=api_key,
                azure_endpoint=base_url,
                api_version=api_version or DEFAULT_AZURE_API_VERSION,
                timeout=timeout,
                max_retries=sync_retries,
                http_client=_http_client(openai, guard),
            ),
            azure=True,
            aiohttp_sync=guard is None,
        )
    raise ValueError(
        f"unknown provider type {kind!r}: expected anthropic, openai, azure-openai, openai-compatible, mistral, "
        "gemini, bedrock or vertex"
    )
