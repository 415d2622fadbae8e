"""The emulator's batch answers echo `batch.replyChars` of the prompt (200 by default), cut to max_tokens x 4: the
ingestion benchmark asks for ~2 KB outputs with it (bench_ingest.py)."""

from __future__ import annotations

import pytest

from barge.emulator.core import REPLY_PREFIX, Item, Store
from barge.emulator.profile import parse_profile

PROMPT = "".join(chr(ord("a") + n % 26) for n in range(3000))


def replies(profile: dict[str, object], max_tokens: int) -> list[tuple[str, str]]:
    """(prompt, answer text) of each request of one batch."""
    store = Store(parse_profile(profile))
    items = [Item(f"c{n}", "m", f"{n} {PROMPT}", 10, max_tokens) for n in range(3)]
    return [(item.last_user, answer.text) for item, answer in store.new_batch("anthropic", items).answers()]


def test_answers_echo_200_prompt_characters_by_default() -> None:
    for prompt, text in replies({}, 4096):
        assert text == REPLY_PREFIX + prompt[:200]


@pytest.mark.parametrize(("chars", "max_tokens"), [(2000, 4096), (2000, 100), (0, 4096)])
def test_reply_chars_sets_the_echo_and_max_tokens_still_cuts_it(chars: int, max_tokens: int) -> None:
    for prompt, text in replies({"batch": {"replyChars": chars}}, max_tokens):
        assert text == (REPLY_PREFIX + prompt[:chars])[: max_tokens * 4]
        assert len(text) == min(len(REPLY_PREFIX) + chars, max_tokens * 4)
