"""One place that maps both SDKs' exceptions to Barge's retry semantics.

Transient -> retried later (server errors, overload, rate limits, timeouts, connection failures);
Invalid   -> never retried (the request itself is wrong);
Fatal     -> stops the whole job (authentication, permission, billing / credit).
"""

from __future__ import annotations

from types import ModuleType

from barge.policy import bounded_error
from barge.providers.base import Outcome, Result


class ProviderError(Exception):
    """Base of the domain errors raised by adapters; the SDK exception is chained as __cause__.

    The message and type are bounded and made printable here: whatever a provider (or a host posing as one)
    answers is repeated in events and failures.jsonl only as a short line, never as its raw body."""

    error_type = "provider_error"

    def __init__(self, message: str, *, error_type: str = "", retry_after: float | None = None) -> None:
        message = bounded_error(message)
        super().__init__(message)
        self.message = message
        if error_type:
            self.error_type = bounded_error(error_type, 64)
        self.retry_after = retry_after


class Transient(ProviderError):
    error_type = "transient"


class Invalid(ProviderError):
    error_type = "invalid_request"


class Fatal(ProviderError):
    error_type = "fatal"


BILLING_WORDS = ("credit balance", "billing", "insufficient_quota", "exceeded your current quota")


def is_billing(message: str) -> bool:
    lowered = message.lower()
    return any(word in lowered for word in BILLING_WORDS)


def retry_after(headers: object) -> float | None:
    """Seconds from a Retry-After (or retry-after-ms) header, when there is one."""
    get = getattr(headers, "get", None)
    if get is None:
        return None
    for name, scale in (("retry-after-ms", 0.001), ("retry-after", 1.0)):
        value = get(name)
        if value:
            try:
                return max(0.0, float(value) * scale)
            except ValueError:
                continue
    return None


def rpc_details(body: object) -> list[dict[str, object]]:
    """The `details` of a google.rpc error body (`{"error": {"code", "status", "details": [...]}}`), as Google's
    APIs answer and Vertex passes on for the Anthropic models it serves."""
    inner = body.get("error", body) if isinstance(body, dict) else None
    found = inner.get("details") if isinstance(inner, dict) else None
    return [d for d in found if isinstance(d, dict)] if isinstance(found, list) else []


def rpc_retry_delay(details: list[dict[str, object]]) -> float | None:
    """Seconds from a google.rpc.RetryInfo detail (`retryDelay: "30s"`): Google sends no Retry-After header."""
    for d in details:
        delay = d.get("retryDelay")
        if str(d.get("@type", "")).endswith("RetryInfo") and isinstance(delay, str) and delay.endswith("s"):
            try:
                return max(0.0, float(delay[:-1]))
            except ValueError:
                return None
    return None


def _body_type(body: object) -> tuple[str, str]:
    """(error type, message) from either provider's error body."""
    if isinstance(body, dict):
        inner = body.get("error", body)
        if isinstance(inner, dict):
            kind = str(inner.get("code") or inner.get("type") or "")
            return kind, str(inner.get("message") or "")
    return "", ""


TRANSIENT_TYPES = frozenset(
    {
        "api_error",
        "overloaded_error",
        "rate_limit_error",
        "timeout_error",
        "server_error",
        "rate_limit_exceeded",
        "token_limit_exceeded",
        "timeout",
        "connection_error",
    }
)
FATAL_TYPES = frozenset(
    {"authentication_error", "permission_error", "billing_error", "invalid_api_key", "insufficient_quota"}
)


def classify(status: int | None, kind: str, message: str) -> type[ProviderError]:
    """Which domain error an HTTP status and/or provider error type means."""
    if kind in FATAL_TYPES or status in (401, 402, 403) or is_billing(f"{kind} {message}"):
        return Fatal
    if kind in TRANSIENT_TYPES or status in (408, 409, 429) or (status is not None and status >= 500):
        return Transient
    return Invalid


def from_sdk(exc: BaseException, sdk: ModuleType) -> ProviderError:
    """Map an exception from `sdk` (the anthropic or openai module: their error classes share names) to a
    domain error; the caller chains it with `from exc`. Taking the module keeps each SDK imported only when used."""
    if isinstance(exc, sdk.APITimeoutError):
        return Transient(f"timeout: {exc}", error_type="timeout")
    if isinstance(exc, sdk.APIConnectionError):
        cause = f" ({exc.__cause__})" if exc.__cause__ else ""  # e.g. the endpoint policy's refusal
        return Transient(f"connection failed: {exc}{cause}", error_type="connection_error")
    if not isinstance(exc, sdk.APIStatusError):
        return Transient(f"unexpected error: {exc!r}", error_type="unknown")
    kind, message = _body_type(exc.body)
    message = message or str(exc)
    kind = kind or f"http_{exc.status_code}"
    cls = classify(exc.status_code, kind, message)
    delay = retry_after(exc.response.headers)
    if delay is None:  # Claude on Vertex: Vertex's quota errors are google.rpc, with a RetryInfo
        delay = rpc_retry_delay(rpc_details(exc.body))
    return cls(f"{kind}: {message}", error_type=kind, retry_after=delay)


def sync_failure(custom_id: str, error: ProviderError, cause: BaseException) -> Result:
    """A synchronous call that failed: a per-request Result, or Fatal raised for the whole job."""
    if isinstance(error, Fatal):
        raise error from cause
    outcome = Outcome.TRANSIENT if isinstance(error, Transient) else Outcome.INVALID
    return Result(custom_id, outcome, error_type=error.error_type, message=error.message, retry_after=error.retry_after)
