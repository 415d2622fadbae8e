"""How a request travels to Amazon Bedrock, without importing boto3 (the planner measures sizes with it).

A batch record is `{"recordId", "modelInput"}` (Bedrock's batch-inference JSONL, modelInvocationType InvokeModel);
for an Anthropic Claude model `modelInput` is the Anthropic Messages body Barge sends Anthropic, without `model`
(the job names it) and with `anthropic_version: bedrock-2023-05-31`; the synchronous fallback sends the same body to
bedrock-runtime InvokeModel. Every other model (Nova, Llama, Mistral ... on Bedrock) gets a Converse body
(`messages`, `system`, `inferenceConfig`), its job modelInvocationType Converse and its fallback the Converse call.
"""

from __future__ import annotations

from typing import Any

import orjson

from barge.providers.base import Request
from barge.providers.chat_convert import Unconvertible
from barge.providers.encoding import anthropic_params

ANTHROPIC_VERSION = "bedrock-2023-05-31"
#: Model ids (or cross-region inference profiles) of Anthropic's models on Bedrock.
CLAUDE_PREFIXES = ("anthropic.", "us.anthropic.", "eu.anthropic.", "apac.anthropic.", "global.anthropic.")


def is_claude(model: str) -> bool:
    return model.startswith(CLAUDE_PREFIXES) or (":inference-profile/" in model and ".anthropic." in model)


def _blocks(body: dict[str, Any]) -> list[dict[str, Any]]:
    """The content blocks of the system prompt and the messages (where cache_control can be)."""
    found = [b for b in body.get("system") or [] if isinstance(b, dict)] if isinstance(body.get("system"), list) else []
    for message in body.get("messages") or []:
        content = message.get("content") if isinstance(message, dict) else None
        if isinstance(content, list):
            found += [b for b in content if isinstance(b, dict)]
    return found


def model_input(request: Request, *, batch: bool = True) -> dict[str, Any]:
    """The InvokeModel body. Prompt caching: a batch record carries no cache_control (Bedrock's batch reads no prompt
    cache [3P], and a marker could only fail a record); a synchronous call keeps the markers with Bedrock's default
    5-minute TTL (the 1 h `ttl` Barge asks of Anthropic is not sent: whether each Bedrock model takes it is not
    known here)."""
    if not is_claude(request.model):
        return converse_input(request)
    body = anthropic_params(request)
    body.pop("model", None)
    for block in _blocks(body):
        marker = block.get("cache_control")
        if batch:
            block.pop("cache_control", None)
        elif isinstance(marker, dict):
            block["cache_control"] = {k: v for k, v in marker.items() if k != "ttl"}
    return {"anthropic_version": ANTHROPIC_VERSION, **body}


#: spec.request.params a Converse record takes (inferenceConfig's fields, by Barge's OpenAI-style names).
CONVERSE_PARAMS = {"temperature": "temperature", "top_p": "topP", "stop": "stopSequences"}


def converse_input(request: Request) -> dict[str, Any]:
    """A Converse body (modelInvocationType Converse): every other model family on Bedrock (Nova, Llama, Mistral
    ...) speaks it. Passthrough bodies, responseFormat and embeddings are Anthropic's or OpenAI's shapes: refused."""
    if request.endpoint != "chat" or request.passthrough or request.response_format is not None:
        raise Unconvertible(
            f"bedrock: {request.model!r} is sent in Bedrock's Converse format, which Barge fills from system, "
            "template and maxTokens only (no passthrough, responseFormat or embeddings; those need a Claude model)"
        )
    config: dict[str, Any] = {"maxTokens": request.max_tokens}
    config |= {name: request.params[key] for key, name in CONVERSE_PARAMS.items() if key in request.params}
    body: dict[str, Any] = {"messages": [{"role": "user", "content": [{"text": request.user}]}]}
    if request.system:
        body["system"] = [{"text": request.system}]
    body["inferenceConfig"] = config
    return body


#: Appended to each encoded record: the model is the job's (modelId), not the record's, and BedrockProvider reads
#: it from the first line and strips it from every line before the upload (Bedrock's records hold two keys).
MODEL_KEY = b',"modelId":'


def encode_bedrock(request: Request) -> bytes:
    """One record of a Bedrock batch input file, with the model appended (see MODEL_KEY)."""
    record = orjson.dumps({"recordId": request.custom_id, "modelInput": model_input(request)})
    return record[:-1] + MODEL_KEY + orjson.dumps(request.model) + b"}"
