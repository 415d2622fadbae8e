"""Contract tests: the providers' real SDKs against `barge.emulator`, in-process on a background thread."""

from __future__ import annotations

import json
import time
import urllib.request
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from barge.emulator.profile import Profile, parse_profile
from barge.emulator.server import EmulatorThread

Factory = Callable[..., EmulatorThread]


@pytest.fixture
def start_emulator() -> Iterator[Factory]:
    """Start an emulator with a profile given as the YAML-shaped dict (processing 0.4 s unless said)."""
    running: list[EmulatorThread] = []

    def start(profile: dict[str, Any] | None = None) -> EmulatorThread:
        data = {"batch": {"processingSeconds": 0.4}, "sync": {"latencyMs": 1}}
        for key, value in (profile or {}).items():
            data[key] = {**data.get(key, {}), **value} if isinstance(value, dict) else value
        emu = EmulatorThread(parse_profile(data)).start()
        running.append(emu)
        return emu

    yield start
    for emu in running:
        emu.stop()


@pytest.fixture
def emulator(start_emulator: Factory) -> EmulatorThread:
    return start_emulator()


def state(emu: EmulatorThread) -> dict[str, Any]:
    with urllib.request.urlopen(f"{emu.url}/_emulator/state", timeout=5) as resp:  # noqa: S310 - loopback
        return json.loads(resp.read())  # type: ignore[no-any-return]


def wait_until(predicate: Callable[[], Any], timeout: float = 10.0) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError("condition not met in time")
        time.sleep(0.05)


__all__ = ["Profile", "state", "wait_until"]
