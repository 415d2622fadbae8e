"""Peering settings: an explicit priority is taken as is; `auto` gives every replica its own, inside the range
Kopf and every Kubernetes client read, above a hand-run operator's default 0."""

from __future__ import annotations

import pytest

from barge.config import PRIORITY_MAX, OperatorConfig, peering_priority


def test_explicit_priorities_are_taken_as_given() -> None:
    assert peering_priority("7") == 7
    assert peering_priority(" -3 ") == -3
    with pytest.raises(ValueError, match="invalid literal"):
        peering_priority("high")


def test_auto_priorities_differ_for_the_same_pod_name(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("POD_NAME", "barge-7d9c5b6f4-x2x7k")
    drawn = {peering_priority("auto") for _ in range(200)}
    assert len(drawn) == 200
    assert all(1 <= p <= PRIORITY_MAX for p in drawn)
    assert peering_priority("AUTO") > 0


def test_environment_reaches_the_config(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BARGE_PEERING_PRIORITY", "auto")
    monkeypatch.setenv("BARGE_PEERING_LIFETIME", "12")
    config = OperatorConfig.from_env(peering="barge")
    assert config.peering_priority > 0
    assert config.peering_lifetime == 12
    assert OperatorConfig.from_env(peering_priority=5).peering_priority == 5
    monkeypatch.setenv("BARGE_PEERING_LIFETIME", "1")
    with pytest.raises(ValueError, match="lifetime"):
        OperatorConfig.from_env()
