"""How a request travels in each provider's batch file, without importing any SDK.

Why apart from the adapters: the planner process (batch/planner.py) measures every request's encoded size to
cut shards by bytes; importing an SDK there would cost seconds per job. The adapters encode with these same
functions, so the measured size is the sent size. Barge's keys always win over `spec.request.params`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

import orjson

from barge.api.batchjob import RESERVED_PARAMS
from barge.providers.base import Request
from barge.providers.chat_convert import Unconvertible, to_anthropic

CACHE_TTL = "1h"  # a shared system prefix outlives the default 5 minutes inside a long batch


def _body(request: Request) -> tuple[dict[str, Any], int]:
    """A passthrough request's body (batch/passthrough.py stored it with its cap under max_tokens) and its cap."""
    body = orjson.loads(request.user)
    return body, min(int(body.pop("max_tokens", request.max_tokens)), request.max_tokens)


def _no_embeddings(request: Request, provider: str) -> None:
    """Admission refuses such a job (api/batchjob.py); a line that gets here anyway is invalid, never sent."""
    if request.endpoint in ("embeddings", "responses"):
        raise Unconvertible(f"{provider} has no {request.endpoint} endpoint (spec.request.endpoint {request.endpoint})")


def embeddings_body(request: Request) -> dict[str, Any]:
    """OpenAI's embeddings body (Azure and vLLM alike): one input, the rendered text."""
    out = {k: v for k, v in request.params.items() if k not in RESERVED_PARAMS}  # Barge's keys always win
    out.update({"model": request.model, "input": request.user})
    if request.dimensions is not None:
        out["dimensions"] = request.dimensions
    if request.encoding_format is not None:
        out["encoding_format"] = request.encoding_format
    return out


def responses_body(request: Request) -> dict[str, Any]:
    """OpenAI's Responses API body: the rendered template as `input`, the system prompt as `instructions`,
    maxTokens as `max_output_tokens` and a response format as `text.format` (json_schema, strict)."""
    out = {k: v for k, v in request.params.items() if k not in RESERVED_PARAMS}  # Barge's keys always win
    out.update({"model": request.model, "input": request.user, "max_output_tokens": request.max_tokens})
    if request.system:
        out["instructions"] = request.system
    if request.response_format is not None:
        fmt = request.response_format
        text = out.get("text")
        out["text"] = {
            **(text if isinstance(text, dict) else {}),
            "format": {"type": "json_schema", "name": fmt.name, "schema": fmt.schema, "strict": True},
        }
    return out


def anthropic_params(request: Request) -> dict[str, Any]:
    _no_embeddings(request, "Anthropic")
    if request.passthrough:
        body, cap = _body(request)
        return to_anthropic(body, request.model, cap)  # Unconvertible: the line is invalid (batch/plan.py)
    system: Any = request.system
    if request.system and request.cache_system:
        system = [{"type": "text", "text": request.system, "cache_control": {"type": "ephemeral", "ttl": CACHE_TTL}}]
    body = {k: v for k, v in request.params.items() if k not in RESERVED_PARAMS}  # Barge's keys always win
    body.update(
        {
            "model": request.model,
            "max_tokens": request.max_tokens,
            "messages": [{"role": "user", "content": request.user}],
        }
    )
    if request.system:
        body["system"] = system
    if request.response_format is not None:  # structured outputs (the batch create call carries the beta flag)
        config = body.get("output_config")
        body["output_config"] = {
            **(config if isinstance(config, dict) else {}),
            "format": {"type": "json_schema", "schema": request.response_format.schema},
        }
    return body


def openai_body(request: Request) -> dict[str, Any]:
    if request.endpoint == "embeddings":
        return embeddings_body(request)
    if request.endpoint == "responses":
        return responses_body(request)
    if request.passthrough:
        body, cap = _body(request)
        return {**body, "model": request.model, "max_completion_tokens": cap}
    messages = []
    if request.system:
        messages.append({"role": "system", "content": request.system})  # OpenAI caches long prefixes itself
    messages.append({"role": "user", "content": request.user})
    out = {k: v for k, v in request.params.items() if k not in RESERVED_PARAMS}  # Barge's keys always win
    out.update({"model": request.model, "messages": messages, "max_completion_tokens": request.max_tokens})
    if request.response_format is not None:  # OpenAI, Azure and vLLM alike
        fmt = request.response_format
        out["response_format"] = {
            "type": "json_schema",
            "json_schema": {"name": fmt.name, "schema": fmt.schema, "strict": True},
        }
    return out


def mistral_body(request: Request) -> dict[str, Any]:
    """Mistral's chat completions body: OpenAI's (messages, response_format) with `max_tokens`, the name Mistral
    has for it. It keeps `model`: the adapter reads a batch job's model from its first line."""
    _no_embeddings(request, "Mistral")
    body = openai_body(request)
    body["max_tokens"] = body.pop("max_completion_tokens", request.max_tokens)
    return body


def encode_mistral(request: Request) -> bytes:
    """One line of a Mistral batch input file: `{"custom_id", "body"}` (the job names the endpoint)."""
    return orjson.dumps({"custom_id": request.custom_id, "body": mistral_body(request)})


def encode_anthropic(request: Request) -> bytes:
    return orjson.dumps({"custom_id": request.custom_id, "params": anthropic_params(request)})


def openai_encoder(url: str) -> Callable[[Request], bytes]:
    """Lines of a batch to `url` (chat completions); an embeddings request's line goes to the embeddings URL of
    the same API (the batch's endpoint is its lines' URL: openai_provider.create_batch)."""
    embeddings_url = AZURE_EMBEDDINGS_URL if url == AZURE_URL else OPENAI_EMBEDDINGS_URL
    urls = {"embeddings": embeddings_url, "responses": RESPONSES_URL}

    def encode(request: Request) -> bytes:
        if request.endpoint == "responses" and url == AZURE_URL:  # refused at admission (api/batchjob.py)
            raise Unconvertible("Azure OpenAI Global Batch has no /v1/responses lines (spec.request.endpoint)")
        to = urls.get(request.endpoint, url)
        line = {"custom_id": request.custom_id, "method": "POST", "url": to, "body": openai_body(request)}
        return orjson.dumps(line)

    return encode


_MARK = "\x00barge-mark\x00"


def line_encoder(encode: Callable[[Request], bytes], template: Request) -> Callable[[str, str], bytes]:
    """`(custom_id, user) -> encode(template with them)`, byte for byte, built once per job from the bytes that are
    the same in every request (a few times faster than building and encoding a dict per request). Falls back to
    `encode` itself unless a probe encodes exactly alike both ways (an encoder that is not orjson's, say)."""

    def slow(custom_id: str, user: str) -> bytes:
        return encode(replace(template, custom_id=custom_id, user=user))

    if template.passthrough:  # `user` is a body in JSON, not a string placed in a fixed frame
        return slow
    try:
        parts = slow(_MARK, _MARK).split(orjson.dumps(_MARK))
    except Unconvertible:  # no such request for this provider (embeddings on Anthropic): each line says so
        return slow
    if len(parts) != 3:
        return slow
    head, middle, tail = parts
    dumps = orjson.dumps

    def fast(custom_id: str, user: str) -> bytes:
        return b"".join((head, dumps(custom_id), middle, dumps(user), tail))

    probe = ("id-1", 'caf\u00e9 \u2028 "quoted" \\ \n\t\x01 \U0001f600 </script>')
    return fast if fast(*probe) == slow(*probe) else slow


def encoder(kind: str) -> Callable[[Request], bytes]:
    """The batch encoding of `kind` (anthropic, openai, azure-openai, openai-compatible, mistral)."""
    if kind == "anthropic":
        return encode_anthropic
    if kind in ("openai", "azure-openai", "openai-compatible"):
        return openai_encoder(AZURE_URL if kind == "azure-openai" else OPENAI_URL)
    if kind == "mistral":
        return encode_mistral
    if kind == "bedrock":
        from barge.providers.bedrock_encoding import encode_bedrock  # it imports this module

        return encode_bedrock
    if kind == "gemini":
        from barge.providers.gemini_encoding import encode_gemini  # it imports this module's neighbours

        return encode_gemini
    if kind == "vertex":
        from barge.providers.vertex_provider import encode_vertex

        return encode_vertex
    raise ValueError(f"unknown provider type {kind!r}")


OPENAI_URL, AZURE_URL = "/v1/chat/completions", "/chat/completions"
OPENAI_EMBEDDINGS_URL, AZURE_EMBEDDINGS_URL = "/v1/embeddings", "/embeddings"
RESPONSES_URL = "/v1/responses"
#: OpenAI takes at most 50,000 embedding inputs in one batch: Barge sends one input per request, so the 50,000
#: requests of an OpenAI shard (OpenAIProvider.max_requests) are that limit.
MAX_EMBEDDING_INPUTS = 50_000
