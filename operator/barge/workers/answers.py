"""How a queue worker asks for one message's answer and reads it: spec.workers[].request.responseFormat, maxAttempts
and serviceTier, the same rules a batch job's synchronous path follows (batch/fallback.py, batch/structured.py).

| setting                  | what the worker does                                                                 |
| ------------------------ | ------------------------------------------------------------------------------------ |
| responseFormat           | asks for it ({name, schema}, providers/encoding.py) and checks every answer with      |
|                          | `jsonschema`: a valid one is written with `output_json`; one that is not JSON or      |
|                          | breaks the schema is asked again, up to maxAttempts calls, then written as status     |
|                          | `invalid_output` with `error` (the validation error); every paid answer is counted    |
| serviceTier standard     | every call at the provider's default tier (the default)                              |
| serviceTier flex         | every call carries `service_tier: flex` (OpenAI: batch rates, slower); a flex 429     |
|                          | "resource unavailable" is an error answer: the message is left for redelivery         |
| serviceTier auto         | flex first; a flex 429 "resource unavailable" is asked again at once at standard      |

A provider without a flex tier (anything but OpenAI: `flex_tier`) is asked at standard whatever serviceTier says.
A worker has no deadline, so `auto` cannot weigh one as the batch path does (batch/tier.py): it trades flex's price
for standard's availability one message at a time.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from barge.batch.structured import Checker, output_json
from barge.providers.base import NO_USAGE, BatchProvider, Outcome, Request, ResponseFormat, Result

FLEX, STANDARD, AUTO = "flex", "standard", "auto"
TIERS = (STANDARD, FLEX, AUTO)
#: The error type of OpenAI's flex 429 (no capacity at flex right now; not billed).
FLEX_UNAVAILABLE = "resource_unavailable"
#: What a worker writes as an answer (a record file), rather than leaving the message for redelivery.
ANSWERED = (Outcome.SUCCEEDED, Outcome.REFUSED, Outcome.INVALID_OUTPUT)


@dataclass(frozen=True)
class Asking:
    """One worker's rules for asking and reading (built once from its config's `request`)."""

    response_format: ResponseFormat | None = None
    service_tier: str = STANDARD
    max_attempts: int = 1
    checker: Checker | None = None

    @classmethod
    def from_request(cls, request: dict[str, Any]) -> Asking:
        """From the worker config's `request` (api/pool.py WorkerRequest, dumped by alias)."""
        fmt = request.get("responseFormat")
        tier = str(request.get("serviceTier") or STANDARD)
        if tier not in TIERS:
            raise ValueError(f"request.serviceTier {tier!r}: one of {', '.join(TIERS)}")
        attempts = int(request.get("maxAttempts") or 1)
        if attempts < 1:
            raise ValueError("request.maxAttempts must be at least 1")
        if not isinstance(fmt, dict):
            return cls(service_tier=tier, max_attempts=attempts)
        schema = fmt.get("schema")
        if not isinstance(schema, dict):
            raise ValueError("request.responseFormat.schema must be a JSON Schema object")
        response_format = ResponseFormat(str(fmt.get("name") or "answer"), schema)
        return cls(response_format, tier, attempts, Checker(schema))

    def request(self, request: Request, provider: BatchProvider, *, flex: bool) -> Request:
        """`request` with the response format, at flex when `flex` and the provider has that tier."""
        if self.response_format is not None:
            request = replace(request, response_format=self.response_format)
        if flex and getattr(provider, "flex_tier", False):
            request = replace(request, params={**request.params, "service_tier": FLEX})
        return request

    async def ask(self, provider: BatchProvider, request: Request) -> Result:
        """The message's answer: checked, asked again while it breaks the schema (up to max_attempts), its usage
        that of every answer paid for; an error answer is returned as it came (the caller routes it)."""
        paid = NO_USAGE  # the answers that broke the schema before this one
        result = Result(request.custom_id, Outcome.TRANSIENT)
        for attempt in range(self.max_attempts):
            flex = self.service_tier in (FLEX, AUTO)
            result = await provider.complete(self.request(request, provider, flex=flex))
            if self.service_tier == AUTO and result.error_type == FLEX_UNAVAILABLE:
                result = await provider.complete(self.request(request, provider, flex=False))
            if self.checker is not None:
                result = self.checker.result(result)
            if result.outcome is not Outcome.INVALID_OUTPUT or attempt + 1 == self.max_attempts:
                break
            paid = paid + result.usage
        return result if paid is NO_USAGE else replace(result, usage=paid + result.usage)

    def record_fields(self, result: Result) -> dict[str, Any]:
        """What a record adds for this result: `output_json` of a checked answer, `error` of a broken one, the
        tier it was served at when the provider reports flex."""
        out: dict[str, Any] = {}
        if result.outcome is Outcome.INVALID_OUTPUT:
            out["error"] = result.message
        elif self.checker is not None and result.outcome is Outcome.SUCCEEDED:
            out["output_json"] = output_json(result.text)
        if result.service_tier == FLEX:
            out["service_tier"] = FLEX
        return out
