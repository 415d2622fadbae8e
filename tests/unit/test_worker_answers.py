"""workers/answers.py, the pure parts: a worker config's request read into its asking rules (a bad one refused at
start-up, naming the key), what each call carries, and what a record adds for each result."""

from __future__ import annotations

from typing import Any

import pytest

from barge.api.pool import WorkerRequest
from barge.providers import Outcome, Request
from barge.providers.base import Result, Usage
from barge.workers.answers import Asking

SCHEMA = {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]}


class _Provider:
    def __init__(self, flex_tier: bool) -> None:
        self.flex_tier = flex_tier


def test_the_pool_api_dumps_what_the_worker_reads() -> None:
    spec = WorkerRequest.model_validate(
        {"responseFormat": {"name": "v", "schema": SCHEMA}, "maxAttempts": 3, "serviceTier": "auto"}
    )
    asking = Asking.from_request(spec.model_dump(by_alias=True))
    assert asking.response_format is not None
    assert asking.response_format.schema == SCHEMA
    assert (asking.max_attempts, asking.service_tier) == (3, "auto")
    plain = Asking.from_request(WorkerRequest().model_dump(by_alias=True))
    assert (plain.response_format, plain.checker, plain.max_attempts, plain.service_tier) == (None, None, 1, "standard")


@pytest.mark.parametrize(
    ("request_cfg", "reason"),
    [
        ({"serviceTier": "cheap"}, "request.serviceTier 'cheap'"),
        ({"maxAttempts": -1}, "maxAttempts must be at least 1"),
        ({"responseFormat": {"name": "v", "schema": "object"}}, "schema must be a JSON Schema object"),
    ],
)
def test_a_bad_request_config_is_refused_at_start_up(request_cfg: dict[str, Any], reason: str) -> None:
    with pytest.raises(ValueError, match=reason):
        Asking.from_request(request_cfg)


def test_flex_is_asked_only_of_a_provider_with_that_tier() -> None:
    asking = Asking.from_request({"serviceTier": "flex", "responseFormat": {"name": "v", "schema": SCHEMA}})
    base = Request("c", "m", "text", 10, params={"temperature": 0})
    openai_like = asking.request(base, _Provider(flex_tier=True), flex=True)  # type: ignore[arg-type]
    assert openai_like.params == {"temperature": 0, "service_tier": "flex"}
    assert openai_like.response_format is not None
    other = asking.request(base, _Provider(flex_tier=False), flex=True)  # type: ignore[arg-type]
    assert other.params == {"temperature": 0}
    assert asking.request(base, _Provider(flex_tier=True), flex=False).params == {"temperature": 0}  # type: ignore[arg-type]


def test_record_fields_of_each_result() -> None:
    checked = Asking.from_request({"responseFormat": {"name": "v", "schema": SCHEMA}})
    ok = Result("c", Outcome.SUCCEEDED, '{"ok": true}', Usage(1, 1), service_tier="flex")
    assert checked.record_fields(ok) == {"output_json": {"ok": True}, "service_tier": "flex"}
    broken = Result("c", Outcome.INVALID_OUTPUT, "nope", Usage(1, 1), "invalid_output", "the answer is not JSON")
    assert checked.record_fields(broken) == {"error": "the answer is not JSON"}
    assert Asking().record_fields(Result("c", Outcome.SUCCEEDED, "free text", service_tier="default")) == {}
