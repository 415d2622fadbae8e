"""Passthrough requests (spec.request.mode: passthrough): an item's `body` is the chat body, checked, not rendered.

What Barge still owns, and why: the model (spec.provider.model or the pool's: the body's `model` is dropped, the
admin routes it), the output cap (spec.request.maxTokens prices and budgets the job, so a body may only lower it),
and the item's name (custom_id comes from spec.customId). Keys that would multiply the cost or break the result
format (`n` above 1, `stream`) make the line invalid with the key named, never a silent drop. The payload stored in
the ledger is the checked body as compact JSON with its cap under `max_tokens`; the encoders
(providers/encoding.py) give it the provider's shape.
"""

from __future__ import annotations

from typing import Any

import orjson

from barge.api.batchjob import PASSTHROUGH_RESERVED
from barge.batch.render import ItemError, check_text

BODY_FIELD = "body"
_CAPS = ("max_tokens", "max_completion_tokens")
#: Values of a reserved key that change nothing, so a body may carry them (OpenAI's own examples set n: 1).
_HARMLESS: dict[str, tuple[Any, ...]] = {"n": (1,), "stream": (False,)}


def body_payload(fields: dict[str, Any], max_tokens: int) -> str:
    """The ledger payload of one passthrough item, or ItemError naming what is wrong with its body."""
    body = fields.get(BODY_FIELD)
    if not isinstance(body, dict):
        got = "missing" if body is None else f"a {type(body).__name__}"
        raise ItemError(f"passthrough line needs a JSON object in {BODY_FIELD!r} (got {got})", "bad_body")
    for key in PASSTHROUGH_RESERVED:
        if key in body and not any(body[key] == v and type(body[key]) is type(v) for v in _HARMLESS.get(key, ())):
            raise ItemError(
                f"body.{key} is reserved: Barge sets it (custom_id comes from spec.customId; n and stream would "
                "multiply the cost or break the result format)",
                "reserved_key",
            )
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise ItemError("body.messages must be a non-empty list", "bad_body")
    out = {k: v for k, v in body.items() if k not in ("model", "n", "stream", *_CAPS)}
    cap = max_tokens
    for key in _CAPS:
        if key in body:
            value = body[key]
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ItemError(f"body.{key} must be a positive integer", "bad_body")
            if value > max_tokens:
                raise ItemError(
                    f"body.{key} is {value}, over the job's spec.request.maxTokens {max_tokens} (which prices it)",
                    "max_tokens_over_cap",
                )
            cap = min(cap, value)
    out["max_tokens"] = cap
    try:
        text = orjson.dumps(out).decode()
    except TypeError as exc:  # an integer beyond 64 bits
        raise ItemError(f"body cannot be sent: {exc}", "bad_body") from exc
    check_text(text, "body")
    return text
