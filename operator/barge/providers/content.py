"""An answer's full content, kept beside its text in the one `output` column the ledger has.

Why: a tool call's arguments, a thinking block or a `max_tokens` stop are part of the answer; keeping only the
text blocks dropped them from results.jsonl without a word. Most answers are one text block that ended normally:
those are stored as their bare text, as before (ingestion's hot path builds nothing more). Any other answer is
stored as `MARK` + one JSON object `{"text", "content" | "tool_calls", "stop_reason" | "finish_reason"}`, and
outputs.result_lines writes its keys beside `output`. A bare text that happens to begin with `MARK` is packed too,
so the two forms never mix up. What is kept is bounded by the answer itself: a result line is at most
jsonl.MAX_LINE, a synchronous answer at most netguard.MAX_ANSWER.

No SDK here: batch/outputs.py and the workers read packed outputs.
"""

from __future__ import annotations

from typing import Any

import orjson

#: Starts a packed output (U+0001 and a tag: no model text begins so, and one that does is packed, see above).
MARK = "\x01barge-content:"
#: The stop reasons of an ordinary answer: a text answer that stopped so is stored bare (a tuple: an untrusted
#: answer's stop reason may be a list, which no set can be asked about).
ORDINARY_STOPS = ("end_turn", "stop", None)
#: The keys a packed output may add to a result line (anything else in it is not written out).
KEYS = ("content", "tool_calls", "stop_reason", "finish_reason", "embedding")


def pack(text: str, extra: dict[str, Any]) -> str:
    """`text` as stored, with `extra` (the keys of KEYS whose value is not None) kept beside it."""
    kept = {k: v for k, v in extra.items() if k in KEYS and v is not None}
    if not kept and not text.startswith(MARK):
        return text
    return MARK + orjson.dumps({"text": text, **kept}).decode()


def unpack(stored: str) -> tuple[str, dict[str, Any]]:
    """(text, the kept keys) of a stored output; a bare text keeps nothing."""
    if not stored.startswith(MARK):
        return stored, {}
    try:
        packed = orjson.loads(stored[len(MARK) :])
    except orjson.JSONDecodeError:  # not written by `pack` (cannot happen short of a hand-edited ledger)
        return stored, {}
    if not isinstance(packed, dict):
        return stored, {}
    text = packed.get("text")
    return (text if isinstance(text, str) else ""), {k: packed[k] for k in KEYS if k in packed}


def anthropic_text(content: list[Any]) -> str:
    """The text blocks of an Anthropic answer, joined."""
    return "".join(b.get("text", "") for b in content if isinstance(b, dict) and b.get("type") == "text")


def anthropic_output(content: list[Any], stop_reason: Any) -> str:
    """An Anthropic message's stored output: its text, and every block when there is more than one text block
    or when it stopped for another reason than end_turn (tool_use, max_tokens, refusal, pause_turn ...)."""
    text = anthropic_text(content)
    plain = all(isinstance(b, dict) and b.get("type") == "text" for b in content) and len(content) <= 1
    if plain and stop_reason in ORDINARY_STOPS:
        return pack(text, {})
    return pack(text, {"content": content, "stop_reason": stop_reason})


def openai_output(message: dict[str, Any], finish_reason: Any) -> str:
    """An OpenAI chat choice's stored output: its text, and its tool calls and finish reason unless it is a text
    answer that stopped normally."""
    content = message.get("content")
    text = content if isinstance(content, str) else str(message.get("refusal") or "")
    calls = message.get("tool_calls") or None
    if calls is None and finish_reason in ORDINARY_STOPS:
        return pack(text, {})
    return pack(text, {"tool_calls": calls, "finish_reason": finish_reason})


def embedding_output(vector: list[Any] | str) -> str:
    """An embeddings answer's stored output: no text, the vector (a list of floats, or base64 float32) kept."""
    return pack("", {"embedding": vector})
