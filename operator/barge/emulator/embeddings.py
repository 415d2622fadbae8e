"""Embeddings in the emulator: OpenAI's and Azure's `/embeddings` (synchronous and as batch lines) and vLLM's.

Why deterministic: a test reads a job's vectors back from results.jsonl and checks each against `vector` of its
input, so the emulator's vector is a pure function of (model, text, dimensions): unit length, each component
drawn from a SHA-256 counter stream of the text. `base64` answers are the little-endian float32 bytes, as OpenAI
sends them (the `openai` SDK asks for base64 by default and decodes it).
"""

from __future__ import annotations

import base64
import hashlib
import math
import struct
from typing import Any

from aiohttp import web

from barge.emulator.core import Answer, Item, estimate_tokens

#: The length of each model's vector when `dimensions` is not given (text-embedding-3-*, ada-002; else 1536).
DEFAULT_DIMENSIONS = {"text-embedding-3-large": 3072}
FALLBACK_DIMENSIONS = 1536
MAX_DIMENSIONS = 8192
EMBEDDINGS_URLS = ("/v1/embeddings", "/embeddings")
ENCODINGS = ("float", "base64")


def dimensions_of(model: str, dimensions: int | None) -> int:
    return dimensions if dimensions is not None else DEFAULT_DIMENSIONS.get(model, FALLBACK_DIMENSIONS)


def vector(text: str, dimensions: int, model: str = "") -> list[float]:
    """The emulator's embedding of `text`: `dimensions` floats of unit length, the same on every call."""
    seed = hashlib.sha256(f"{model}\x00{text}".encode()).digest()
    raw: list[float] = []
    block = 0
    while len(raw) < dimensions:
        digest = hashlib.sha256(seed + block.to_bytes(4, "little")).digest()
        raw.extend(v / 2**31 - 1.0 for v in struct.unpack("<8I", digest))
        block += 1
    raw = raw[:dimensions]
    norm = math.sqrt(sum(v * v for v in raw)) or 1.0
    return [v / norm for v in raw]


def as_base64(values: list[float]) -> str:
    return base64.b64encode(struct.pack(f"<{len(values)}f", *values)).decode()


def from_base64(text: str) -> list[float]:
    """What a client decodes from a base64 answer: the float32 values (as `vector` rounded to float32)."""
    data = base64.b64decode(text)
    return list(struct.unpack(f"<{len(data) // 4}f", data))


def _inputs(body: dict[str, Any]) -> list[str] | str:
    """The texts of an embeddings body, or why it is refused."""
    value = body.get("input")
    texts = [value] if isinstance(value, str) else value
    if not isinstance(texts, list) or not texts or not all(isinstance(t, str) and t for t in texts):
        return "input: a non-empty string or list of non-empty strings is required"
    return texts


def _problems(body: dict[str, Any]) -> str:
    problems = []
    if not isinstance(body.get("model"), str) or not body.get("model"):
        problems.append("model: field required")
    dims = body.get("dimensions")
    if dims is not None and (isinstance(dims, bool) or not isinstance(dims, int) or not 1 <= dims <= MAX_DIMENSIONS):
        problems.append(f"dimensions: an integer from 1 to {MAX_DIMENSIONS}")
    if body.get("encoding_format", "float") not in ENCODINGS:
        problems.append("encoding_format: float or base64")
    return "; ".join(problems)


def item_from_embeddings(custom_id: str, body: dict[str, Any], line: int = 0) -> Item:
    """One batch line's body (one input) as an Item; problems become `invalid`, as for chat lines."""
    texts = _inputs(body)
    problems = [p for p in (_problems(body), texts if isinstance(texts, str) else "") if p]
    if not isinstance(texts, str) and len(texts) != 1:
        problems.append("input: a batch line carries one input")
    text = texts[0] if not isinstance(texts, str) else ""
    dims = body.get("dimensions")
    return Item(
        custom_id=custom_id,
        model=str(body.get("model") or ""),
        last_user=text,
        input_tokens=estimate_tokens(text),
        max_tokens=1,
        invalid="; ".join(problems),
        line=line,
        embedding=(dims if isinstance(dims, int) else 0, str(body.get("encoding_format") or "float")),
    )


def embedding_json(model: str, texts: list[str], dimensions: int | None, encoding: str) -> dict[str, Any]:
    """OpenAI's embeddings answer for `texts` (one vector each, in order)."""
    dims = dimensions_of(model, dimensions)
    data = []
    for index, text in enumerate(texts):
        values = vector(text, dims, model)
        data.append(
            {"object": "embedding", "index": index, "embedding": as_base64(values) if encoding == "base64" else values}
        )
    tokens = sum(estimate_tokens(t) for t in texts)
    return {
        "object": "list",
        "data": data,
        "model": model,
        "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
    }


def item_answer_json(item: Item, ans: Answer) -> dict[str, Any]:
    """A batch line's answer body for an embeddings Item (an answered one: succeeded, or refused, which an
    embeddings endpoint does not do, so it gets its vector too)."""
    assert item.embedding is not None
    dims, encoding = item.embedding
    return embedding_json(item.model, [item.last_user], dims or None, encoding)


def read_body(body: dict[str, Any]) -> tuple[list[str], int | None, str] | str:
    """A synchronous request's (texts, dimensions, encoding), or why it is refused (a 400)."""
    texts = _inputs(body)
    problems = _problems(body) or (texts if isinstance(texts, str) else "")
    if problems or isinstance(texts, str):
        return problems
    dims = body.get("dimensions")
    return texts, dims if isinstance(dims, int) else None, str(body.get("encoding_format") or "float")


def sync_item(body: dict[str, Any], texts: list[str]) -> Item:
    """The Item a synchronous embeddings call counts against the emulator's quota and faults."""
    joined = "".join(texts)
    return Item("sync", str(body.get("model") or ""), joined, estimate_tokens(joined), 1, embedding=(0, "float"))


def routes(handler: Any) -> list[web.RouteDef]:
    """OpenAI's and Azure's synchronous embeddings paths, served by `handler` (openai_api.embeddings)."""
    return [
        web.post("/v1/embeddings", handler),
        web.post("/openai/embeddings", handler),
        web.post("/openai/deployments/{deployment}/embeddings", handler),
    ]
