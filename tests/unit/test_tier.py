"""spec.fallback.serviceTier: the auto rule (batch/tier.py), table-tested."""

from __future__ import annotations

import pytest

from barge.batch.tier import FLEX, STANDARD, TierChooser, use_flex


@pytest.mark.parametrize(
    ("setting", "remaining", "pending", "concurrency", "flex_seconds", "expected"),
    [
        ("standard", 10_000.0, 10, 8, 1.0, False),  # the default: never flex
        ("flex", -5.0, 10, 8, 100.0, True),  # flex always, past the deadline too
        ("auto", None, 10_000, 1, 100.0, True),  # no deadline: all the time in the world
        ("auto", 100.0, 16, 8, 10.0, True),  # 2 waves x 10 s x margin 2 = 40 s < 100 s
        ("auto", 40.0, 16, 8, 10.0, False),  # exactly the estimate: no room left
        ("auto", 41.0, 16, 8, 10.0, True),
        ("auto", 41.0, 17, 8, 10.0, False),  # a third wave
        ("auto", 0.5, 0, 8, 10.0, True),  # nothing pending
        ("auto", -1.0, 1, 8, 0.1, False),  # the deadline has passed
        ("auto", 100.0, 10, 0, 1.0, True),  # a concurrency of 0 counts as 1: 10 x 1 x 2 = 20 s
        ("bogus", 100.0, 1, 1, 0.0, False),  # an unknown word is standard
    ],
)
def test_auto_rule(
    setting: str, remaining: float | None, pending: int, concurrency: int, flex_seconds: float, expected: bool
) -> None:
    assert use_flex(setting, remaining, pending, concurrency, flex_seconds) is expected


def test_auto_drops_to_standard_for_good_once_flex_is_measured_slow() -> None:
    now = [0.0]
    chooser = TierChooser("auto", 30.0, 10, 2, clock=lambda: now[0], prior=1.0)  # 5 waves x 1 s x 2 = 10 s < 30
    assert chooser.tier() == FLEX
    now[0] = 4.0
    chooser.done(4.0, flex=True)  # pace 2.5 s: 5 waves x 2.5 x 2 = 25 s < 26 s left
    assert chooser.tier() == FLEX
    now[0] = 10.0
    chooser.done(6.0, flex=True)  # pace 4.25 s: 4 waves x 4.25 x 2 = 34 s > 20 s left
    assert chooser.tier() == STANDARD
    chooser.done(0.1, flex=False)
    for _ in range(7):
        chooser.done(0.1, flex=False)  # nothing pending: the rule alone would say flex again
    assert chooser.tier() == STANDARD


def test_standard_answers_do_not_change_the_flex_pace() -> None:
    chooser = TierChooser("auto", None, 3, 1, prior=5.0)
    chooser.done(0.01, flex=False)
    assert chooser.pace == 5.0
    assert chooser.pending == 2
    assert chooser.tier() == FLEX
