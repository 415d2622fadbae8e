"""How a request travels to the Gemini API, without importing its SDK (the planner measures shards with it).

A batch input line is `{"key": custom_id, "request": GenerateContentRequest}` in the API's JSON (camelCase, as the
Files API stores the file verbatim): `contents` holds the user turn, `systemInstruction` the system prompt,
`generationConfig` the job's params with Barge's `maxOutputTokens` (and, for spec.request.responseFormat,
`responseMimeType: application/json` with `responseJsonSchema`). The request also names its `model`
(`models/...`: a field of GenerateContentRequest): the adapter reads the batch's model from the first line, as
`batches.create` takes it apart. A passthrough body (OpenAI chat shape) has its text messages moved over; what has
no Gemini equal makes the line invalid (Unconvertible).
"""

from __future__ import annotations

from typing import Any

import orjson

from barge.api.batchjob import RESERVED_PARAMS
from barge.providers.base import Request
from barge.providers.chat_convert import Unconvertible

#: Barge's keys in generationConfig: the job's params never override them.
OWN_CONFIG = ("maxOutputTokens", "max_output_tokens", "responseMimeType", "responseJsonSchema", "candidateCount")


def model_name(model: str) -> str:
    """`gemini-2.5-flash` as the API's resource name `models/gemini-2.5-flash` (tuned models keep theirs)."""
    return model if model.startswith(("models/", "tunedModels/")) else f"models/{model}"


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list) and all(isinstance(p, dict) and p.get("type") == "text" for p in content):
        return "".join(str(p.get("text", "")) for p in content)
    raise Unconvertible("Gemini lines take text messages only (an image or audio part has no encoding here)")


def _turns(request: Request) -> tuple[str, list[dict[str, Any]], dict[str, Any], int]:
    """(system text, contents, extra generationConfig, max tokens) of a request."""
    if not request.passthrough:
        params = {k: v for k, v in request.params.items() if k not in RESERVED_PARAMS}
        return request.system, [{"role": "user", "parts": [{"text": request.user}]}], params, request.max_tokens
    body = orjson.loads(request.user)
    cap = min(int(body.pop("max_tokens", request.max_tokens)), request.max_tokens)
    system, contents = [], []
    for message in body.pop("messages", None) or []:
        role = message.get("role") if isinstance(message, dict) else None
        if role in ("system", "developer"):
            system.append(_text(message.get("content")))
        elif role in ("user", "assistant"):
            contents.append(
                {"role": "model" if role == "assistant" else "user", "parts": [{"text": _text(message.get("content"))}]}
            )
        else:
            raise Unconvertible(f"a message of role {role!r} has no Gemini equal")
    for key in ("tools", "tool_choice", "response_format", "n", "logprobs"):
        if key in body:
            raise Unconvertible(f"passthrough key {key!r} is not converted for Gemini")
    body.pop("model", None)
    return "\n\n".join(system), contents, body, cap


def gemini_request(request: Request) -> dict[str, Any]:
    """The GenerateContentRequest of `request` (API JSON)."""
    if request.endpoint in ("embeddings", "responses"):
        raise Unconvertible(f"Gemini batches take generateContent requests (spec.request.endpoint {request.endpoint})")
    system, contents, params, cap = _turns(request)
    config = {k: v for k, v in params.items() if k not in OWN_CONFIG}
    config["maxOutputTokens"] = cap
    if request.response_format is not None:
        config["responseMimeType"] = "application/json"
        config["responseJsonSchema"] = request.response_format.schema
    out: dict[str, Any] = {"model": model_name(request.model), "contents": contents, "generationConfig": config}
    if system:
        out["systemInstruction"] = {"parts": [{"text": system}]}
    return out


def encode_gemini(request: Request) -> bytes:
    """One line of a Gemini batch input file."""
    return orjson.dumps({"key": request.custom_id, "request": gemini_request(request)})
