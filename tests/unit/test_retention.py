"""Retention settings: the spec's choice, the operator's defaults from the environment (as the chart sets them),
and the durations of spec.retention.keepPayloadsFor / keepOutputsFor."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from barge.api.batchjob import RetentionSpec
from barge.batch.retention import choose
from barge.config import OperatorConfig
from barge.ledger.lifetime import seconds


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ({}, (True, 14)),
        ({"deleteProviderCopies": False}, (False, 14)),
        ({"outputExpiresAfterDays": 30}, (True, 30)),
    ],
)
def test_the_job_choice_wins_over_the_operator_default(spec: dict[str, object], expected: tuple[bool, int]) -> None:
    assert choose(RetentionSpec.model_validate(spec), True, 14) == expected


def test_operator_default_applies_when_the_job_is_silent() -> None:
    assert choose(RetentionSpec(), False, 20) == (False, 20)


@pytest.mark.parametrize("days", [13, 31])
def test_output_expiry_outside_what_azure_accepts_is_refused(days: int) -> None:
    with pytest.raises(ValidationError):
        RetentionSpec.model_validate({"outputExpiresAfterDays": days})


@pytest.mark.parametrize(("text", "value"), [("0s", 0), ("90m", 5400), ("12h", 43200), ("30d", 2592000)])
def test_durations(text: str, value: int) -> None:
    assert seconds(text) == value
    assert RetentionSpec.model_validate({"keepPayloadsFor": text}).keep_payloads_for == text


@pytest.mark.parametrize("text", ["", "30", "1w", "-1d", "1.5h"])
def test_bad_durations(text: str) -> None:
    with pytest.raises(ValueError, match="duration"):
        seconds(text)
    with pytest.raises(ValidationError):
        RetentionSpec.model_validate({"keepOutputsFor": text})


def test_operator_defaults_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("BARGE_DELETE_PROVIDER_COPIES", "BARGE_OUTPUT_EXPIRES_AFTER_DAYS"):
        monkeypatch.delenv(name, raising=False)
    config = OperatorConfig.from_env()
    assert (config.delete_provider_copies, config.output_expires_after_days) == (True, 14)
    monkeypatch.setenv("BARGE_DELETE_PROVIDER_COPIES", "false")
    monkeypatch.setenv("BARGE_OUTPUT_EXPIRES_AFTER_DAYS", "30")
    config = OperatorConfig.from_env()
    assert (config.delete_provider_copies, config.output_expires_after_days) == (False, 30)
    monkeypatch.setenv("BARGE_OUTPUT_EXPIRES_AFTER_DAYS", "7")
    with pytest.raises(ValueError, match=r"14\.\.30"):
        OperatorConfig.from_env()


def test_operator_purge_settings_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BARGE_LEDGER_PURGE_SECONDS", "600")
    monkeypatch.setenv("BARGE_LEDGER_PURGE_OLDER_THAN", "30d")
    config = OperatorConfig.from_env()
    assert (config.ledger_purge_seconds, config.ledger_purge_older_than) == (600.0, "30d")
    monkeypatch.setenv("BARGE_LEDGER_PURGE_OLDER_THAN", "a month")
    with pytest.raises(ValueError, match="duration"):
        OperatorConfig.from_env()
