"""The Kopf settings the operator runs with (operator/main.py::kopf_settings)."""

from __future__ import annotations

import pytest

from barge.config import OperatorConfig
from barge.operator.main import kopf_settings


def test_a_deleted_resource_whose_timer_is_mid_run_is_rechecked_within_seconds() -> None:
    """Kopf re-checks a deleted resource's timer/daemon that did not exit at once only every
    `background.cancellation_polling` seconds (60 by default): a pool deleted while its reconcile timer awaited the
    API server stayed for a minute after the reconcile ended (seen in full-suite runs of
    tests/e2e/test_controller_manager.py). Barge polls every few seconds."""
    settings = kopf_settings(OperatorConfig.from_env())
    assert settings.background.cancellation_polling <= 5


def test_the_peering_lifetime_comes_from_the_config(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BARGE_PEERING_LIFETIME", "17")
    assert kopf_settings(OperatorConfig.from_env()).peering.lifetime == 17
