"""Bounded text: every message Barge copies from somewhere it does not control is cut to a size with a marker.

Why: a proxy's 40 KB HTML error page copied whole into `status.message` and a condition's message (the CRD caps
it at 32,768) made the status patch itself fail, so the job showed nothing at all. Messages that reach the
status, a condition or an event go through `bound`, which keeps the head (where the reason usually is), says
how much was dropped, and never returns more than `limit` characters.
"""

from __future__ import annotations

#: Longest message Barge writes into a condition, `status.message` or an event (well under the CRD's 32,768).
MESSAGE_LIMIT = 1024


def bound(text: str, limit: int = MESSAGE_LIMIT) -> str:
    """`text` unchanged when short, else its head and a marker, `limit` characters at most in total."""
    text = text.encode("utf-8", "backslashreplace").decode("utf-8")  # lone surrogates cannot be serialised
    if len(text) <= limit:
        return text
    marker = f" ...[truncated {len(text)} chars]"
    return text[: max(0, limit - len(marker))] + marker
