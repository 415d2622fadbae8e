"""Which finished jobs a restarted operator hands to the second-door scan (operator/second_door_finished.py): only
those that ended within the scan's window, each once, and the memory of them bounded. (The whole path, with a real
operator restart and a real event, is tests/e2e/test_second_door_pool_e2e.py.)"""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

from barge.operator import second_door_finished as finished
from barge.operator.second_door import Doors

NOW = 1_800_000_000.0


def body(completed: Any) -> dict[str, Any]:
    return {"metadata": {"namespace": "n"}, "spec": {}, "status": {"phase": "Succeeded", "completedAt": completed}}


def ctx() -> Any:
    return SimpleNamespace(doors=Doors(), config=SimpleNamespace(second_door_window=86400.0, policy=None), kube=None)


def test_ended_at_reads_rfc3339_and_refuses_the_rest() -> None:
    assert finished.ended_at({"completedAt": "2027-01-15T08:00:00Z"}) == NOW
    assert finished.ended_at({"completedAt": "2027-01-15T09:00:00+01:00"}) == NOW
    assert finished.ended_at({"completedAt": "yesterday"}) is None
    assert finished.ended_at({"completedAt": 17}) is None
    assert finished.ended_at(None) is None


def test_a_job_that_ended_before_the_window_is_not_scanned_and_each_key_is_looked_at_once() -> None:
    c = ctx()
    old = "2027-01-13T00:00:00Z"  # two days and more before NOW
    assert not asyncio.run(finished.remember(c, body(old), "n/old/u1", print, NOW))
    assert "n/old/u1" in c.doors.finished
    assert c.doors.seen == {}
    assert not asyncio.run(finished.remember(c, body("not a time"), "n/bad/u2", print, NOW))
    # once looked at, a key is not resolved again (a terminal job's every later event)
    c.doors.finished["n/recent/u3"] = None
    assert not asyncio.run(finished.remember(c, body("2027-01-15T07:00:00Z"), "n/recent/u3", print, NOW))


def test_the_memory_of_finished_keys_is_bounded(monkeypatch: Any) -> None:
    monkeypatch.setattr(finished, "MAX_REMEMBERED", 3)
    c = ctx()
    for n in range(5):
        asyncio.run(finished.remember(c, body(None), f"n/j{n}/u", print, NOW))
    assert list(c.doors.finished) == ["n/j2/u", "n/j3/u", "n/j4/u"]
