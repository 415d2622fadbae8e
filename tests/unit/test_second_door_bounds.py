"""The second door's memory is bounded (operator/second_door.py): job credentials beyond MAX_CREDENTIALS are
forgotten least recently used first, announced foreign ids beyond MAX_REPORTED oldest first; an engine pool's own
vLLM is never scanned."""

from __future__ import annotations

import pytest

from barge.operator import second_door
from barge.operator.cache import ClientSpec


def nothing(reason: str, message: str, kind: str) -> None:
    return None


def test_credentials_are_forgotten_least_recently_used_first(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(second_door, "MAX_CREDENTIALS", 3)
    doors = second_door.Doors()
    specs = [ClientSpec("openai", f"key-{i}") for i in range(4)]
    for spec in specs[:3]:
        doors.saw(spec, "t", "ns/job", nothing)
    doors.saw(specs[0], "t", "ns/job2", nothing)  # used again: now the most recent
    doors.saw(specs[3], "t", "ns/job3", nothing)
    assert list(doors.seen) == [specs[2], specs[0], specs[3]]
    assert doors.seen[specs[0]]["t"][0] == "ns/job2"


def test_announced_ids_are_trimmed_oldest_first(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(second_door, "MAX_REPORTED", 3)
    doors = second_door.Doors()
    doors.announced(["a", "b", "c"])
    doors.announced(["a"])  # seen again: kept as the newest
    doors.announced(["d"])
    assert list(doors.reported) == ["c", "a", "d"]


def test_an_engine_pools_vllm_is_not_a_door() -> None:
    doors = second_door.Doors()
    doors.saw(ClientSpec("openai", "engine-key", "http://pool", guarded=False), "t", "ns/job", nothing)
    assert doors.seen == {}
