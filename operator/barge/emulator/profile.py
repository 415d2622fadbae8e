"""Pacing and fault profile of the emulator, loaded from YAML (`barge emulator --profile FILE`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

#: schema_violation: a request that asks for a schema (response_format, output_config.format) is answered, and
#: billed, with text that breaks it (emulator/structured.py); other requests succeed as usual.
BATCH_OUTCOMES = ("server_error", "invalid_request", "expired", "refusal", "garbled", "schema_violation")
SYNC_OUTCOMES = ("server_error", "invalid_request", "refusal", "garbled", "schema_violation")


@dataclass(frozen=True)
class Quota:
    """Per-minute limits of the synchronous endpoints; 0 means unlimited."""

    tokens_per_minute: int = 0
    requests_per_minute: int = 0


@dataclass(frozen=True)
class BatchProfile:
    processing_seconds: float = 2.0
    """Seconds from create to ended (OpenAI: validating, in_progress, finalizing inside that span)."""
    outcomes: dict[str, float] = field(default_factory=dict)
    """Probability of each non-success outcome per request; the rest succeed."""
    create_failures_after_accept: int = 0
    """The first N creates store the batch, then answer 500: the duplicate-create trap."""
    cancel_seconds: float = 0.5
    """How long canceling/cancelling lasts before the batch ends with partial results."""
    create_seconds: float = 0.0
    """How long a valid create takes before the batch is stored and answered (a create in flight, widened)."""
    azure_enqueued_token_limit: int = 0
    """Azure: enqueued prompt tokens allowed per deployment across live batches; 0 = unlimited."""
    delete_failures: int = 0
    """The first N deletes (OpenAI/Azure files, Anthropic batches) answer 500 and delete nothing."""
    delete_forbidden: bool = False
    """Every delete answers 403, as for a key that may not delete."""
    reply_chars: int = 200
    """How many of the prompt's characters a batch answer echoes after its prefix (then cut to max_tokens x 4)."""
    reply_repeat: bool = False
    """The prompt is echoed repeated up to replyChars: short prompts get long answers (memory tests of ingestion)."""


@dataclass(frozen=True)
class SyncProfile:
    latency_ms: float = 50.0
    """Latency of every synchronous call."""
    outcomes: dict[str, float] = field(default_factory=dict)
    """Probability of each non-success outcome per call."""
    quota: Quota = field(default_factory=Quota)
    """Beyond it: 429 with Retry-After."""
    flex_latency_ms: float = 500.0
    """OpenAI `service_tier: flex`: the latency of a flex call (emulator/flex.py), instead of latency_ms."""
    flex_unavailable: float = 0.0
    """The share of flex calls answered 429 "resource unavailable" (no Retry-After), drawn from the seed."""


@dataclass(frozen=True)
class Profile:
    seed: int = 42
    """Seeds every random choice, so a run is reproducible."""
    batch: BatchProfile = field(default_factory=BatchProfile)
    sync: SyncProfile = field(default_factory=SyncProfile)
    billing_error: bool = False
    """Every create and sync call fails with the provider's billing/credit error."""
    billing_overcharge_ratio: float = 1.0
    """`billing.overchargeRatio`: the admin usage/cost reports (emulator/usage_reports.py) bill this times the price
    of what was processed (1: exact; 1.1: 10% more, for reconciliation tests)."""


def _outcomes(raw: Any, allowed: tuple[str, ...], where: str) -> dict[str, float]:
    out = {str(k): float(v) for k, v in (raw or {}).items()}
    unknown = sorted(set(out) - set(allowed))
    if unknown:
        raise ValueError(f"{where}.outcomes: unknown outcome(s) {unknown}; known: {list(allowed)}")
    if any(p < 0 for p in out.values()) or sum(out.values()) > 1:
        raise ValueError(f"{where}.outcomes: probabilities must be >= 0 and sum to at most 1")
    return out


def _share(raw: Any, where: str) -> float:
    value = float(raw)
    if not 0 <= value <= 1:
        raise ValueError(f"{where}: a share between 0 and 1, not {value}")
    return value


def parse_profile(data: dict[str, Any] | None) -> Profile:
    """Build a Profile from the YAML shape documented in the README (camelCase keys)."""
    data = data or {}
    batch = data.get("batch") or {}
    sync = data.get("sync") or {}
    quota = sync.get("quota") or {}
    return Profile(
        seed=int(data.get("seed", 42)),
        batch=BatchProfile(
            processing_seconds=float(batch.get("processingSeconds", 2.0)),
            outcomes=_outcomes(batch.get("outcomes"), BATCH_OUTCOMES, "batch"),
            create_failures_after_accept=int(batch.get("createFailuresAfterAccept", 0)),
            cancel_seconds=float(batch.get("cancelSeconds", 0.5)),
            create_seconds=float(batch.get("createSeconds", 0.0)),
            azure_enqueued_token_limit=int(batch.get("azureEnqueuedTokenLimit", 0)),
            delete_failures=int(batch.get("deleteFailures", 0)),
            delete_forbidden=bool(batch.get("deleteForbidden", False)),
            reply_chars=max(0, int(batch.get("replyChars", 200))),
            reply_repeat=bool(batch.get("replyRepeat", False)),
        ),
        sync=SyncProfile(
            latency_ms=float(sync.get("latencyMs", 50.0)),
            outcomes=_outcomes(sync.get("outcomes"), SYNC_OUTCOMES, "sync"),
            quota=Quota(int(quota.get("tokensPerMinute", 0)), int(quota.get("requestsPerMinute", 0))),
            flex_latency_ms=float((sync.get("flex") or {}).get("latencyMs", 500.0)),
            flex_unavailable=_share((sync.get("flex") or {}).get("unavailableRate", 0.0), "sync.flex.unavailableRate"),
        ),
        billing_error=bool(data.get("billingError", False)),
        billing_overcharge_ratio=float((data.get("billing") or {}).get("overchargeRatio", 1.0)),
    )


def load_profile(path: Path | None) -> Profile:
    if path is None:
        return Profile()
    return parse_profile(yaml.safe_load(path.read_text()))
