"""The gateway's pure parts: the job -> batch status table, the LLMBatchJob it builds, the upload's line check."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import orjson
import pytest

from barge.api.batchjob import LLMBatchJob
from barge.gateway import anthropic_api, batches
from barge.gateway.anthropic_api import convert, result_line
from barge.gateway.files import Check, TooLarge
from barge.gateway.server import HttpError


def job(phase: str | None, *, cancelled: bool = False, deadline: bool = False, **counts: int) -> dict[str, Any]:
    record = {"created_at": 100, "cancelled_at": 150} if cancelled else {"created_at": 100}
    status: dict[str, Any] = {"counts": counts}
    if phase:
        status["phase"] = phase
    if deadline:
        status["conditions"] = [{"type": "DeadlineExceeded", "status": "True"}]
    return {
        "metadata": {"name": "gw-" + "a" * 24, "annotations": {batches.ANNOTATION: orjson.dumps(record).decode()}},
        "status": status,
    }


STATUS = [
    (job(None), "validating"),
    (job("Pending"), "validating"),
    (job("Queued", total=3, pending=3), "in_progress"),
    (job("Running", total=3, submitted=2, succeeded=1), "in_progress"),
    (job("Running", total=3, succeeded=3), "finalizing"),
    (job("Succeeded", total=3, succeeded=3), "completed"),
    (job("Failed", total=3, failed=3), "failed"),
    (job("Failed", deadline=True, total=3, failed=3), "expired"),
    (job("Running", cancelled=True, total=3, submitted=3), "cancelling"),
    (job("Suspended", cancelled=True, total=3, submitted=3), "cancelled"),
    (job("Succeeded", cancelled=True, total=3, succeeded=3), "cancelled"),
]


@pytest.mark.parametrize(("obj", "expected"), STATUS)
def test_status_table(obj: dict[str, Any], expected: str) -> None:
    assert batches.status_of(obj) == expected


def test_batch_object_counts_and_files() -> None:
    done = batches.batch_object(job("Succeeded", total=5, succeeded=3, refused=1, invalid=1))
    assert done["request_counts"] == {"total": 5, "completed": 4, "failed": 1}
    assert done["output_file_id"] == "batch_" + "a" * 24 + "-output"
    assert done["error_file_id"] == "batch_" + "a" * 24 + "-errors"
    running = batches.batch_object(job("Running", total=5, submitted=5))
    assert running["output_file_id"] is None
    assert running["error_file_id"] is None


def test_ids_that_are_not_the_gateways_name_no_job() -> None:
    assert batches.job_name("batch_" + "0" * 24) == "gw-" + "0" * 24
    for bad in ("batch_../../x", "batch_" + "A" * 24, "gw-" + "0" * 24, "batch_" + "0" * 25, ""):
        assert batches.job_name(bad) is None


def test_the_built_job_is_a_valid_passthrough_llmbatchjob() -> None:
    built = batches.build_job(
        "batch_" + "b" * 24,
        "team-a",
        pool="gpt-fast",
        input_url="file:///data/acme/gateway/team-a/files/file-x.jsonl",
        output_url="file:///data/acme/gateway/team-a/batches/x/",
        max_tokens=256,
        endpoint="/v1/chat/completions",
        input_file_id="file-x",
        metadata={"k": "v"},
        now=datetime(2026, 12, 1, tzinfo=UTC),
    )
    parsed = LLMBatchJob.model_validate(built)
    assert parsed.spec.request.mode == "passthrough"
    assert parsed.spec.request.max_tokens == 256
    assert parsed.spec.provider.pool_ref is not None
    assert parsed.spec.provider.pool_ref.name == "gpt-fast"
    assert parsed.spec.input.id_field == "custom_id"
    assert built["metadata"]["labels"][batches.LABEL] == "openai"
    assert batches.record_of(built)["metadata"] == {"k": "v"}


def good(cid: str, model: str = "m", **body: Any) -> bytes:
    line = {"custom_id": cid, "method": "POST", "url": "/v1/chat/completions", "body": {"model": model, **body}}
    return orjson.dumps(line)


def test_the_upload_check_names_each_bad_line() -> None:
    check = Check(max_lines=100)
    for raw in (
        good("a", max_tokens=50),
        good("a"),
        b"[1]",
        b"",
        good("b", model="other"),
        orjson.dumps({"custom_id": "c", "method": "GET", "url": "/v1/chat/completions", "body": {}}),
        orjson.dumps({"custom_id": "d", "method": "POST", "url": "/v1/embeddings", "body": {"model": "m"}}),
        good("e", max_completion_tokens=80),
    ):
        check.line(raw)
    assert [n for n, _ in check.errors] == [2, 3, 4, 5, 6, 7]
    assert check.model == "m"
    assert check.max_tokens == 80


def test_the_upload_check_stops_past_the_line_limit() -> None:
    check = Check(max_lines=2)
    check.line(good("a"))
    check.line(good("b"))
    with pytest.raises(TooLarge):
        check.line(good("c"))


# --- the Anthropic face (gateway/anthropic_api.py) ----------------------------------------------------------------
def test_anthropic_batch_object_by_state() -> None:
    running = anthropic_api.batch_object(job("Running", total=4, submitted=3, succeeded=1))
    assert running["processing_status"] == "in_progress"
    assert running["request_counts"] == {"processing": 3, "succeeded": 1, "errored": 0, "canceled": 0, "expired": 0}
    assert running["results_url"] is None
    cancelled = anthropic_api.batch_object(job("Suspended", cancelled=True, total=4, succeeded=1, invalid=1))
    assert cancelled["processing_status"] == "ended"
    assert cancelled["request_counts"] == {"processing": 0, "succeeded": 1, "errored": 1, "canceled": 2, "expired": 0}
    assert cancelled["results_url"] == f"/v1/messages/batches/{cancelled['id']}/results"
    assert cancelled["id"].startswith("msgbatch_")
    expired = anthropic_api.batch_object(job("Failed", deadline=True, total=3, succeeded=1))
    assert expired["request_counts"]["expired"] == 2


def test_anthropic_result_lines() -> None:
    ok = result_line({"id": "a", "status": "succeeded", "output": "hi", "usage": {"input_tokens": 3}}, "m")
    assert ok["result"]["type"] == "succeeded"
    assert ok["result"]["message"]["content"] == [{"type": "text", "text": "hi"}]
    assert ok["result"]["message"]["usage"]["input_tokens"] == 3
    refused = result_line({"id": "b", "status": "refused", "output": "no"}, "m")
    assert refused["result"]["message"]["stop_reason"] == "refusal"
    bad = result_line({"id": "c", "status": "invalid", "reason": "bad body"}, "m")
    assert bad["result"] == {
        "type": "errored",
        "error": {"type": "error", "error": {"type": "invalid_request_error", "message": "bad body"}},
    }


def test_anthropic_convert_takes_one_alias_and_the_largest_cap() -> None:
    params = {"model": "pool-a", "max_tokens": 10, "messages": [{"role": "user", "content": "x"}]}
    lines, model, cap = convert(
        [{"custom_id": "1", "params": params}, {"custom_id": "2", "params": {**params, "max_tokens": 30}}]
    )
    assert (model, cap) == ("pool-a", 30)
    assert orjson.loads(lines[1])["body"] == {
        "model": "pool-a",
        "messages": [{"role": "user", "content": "x"}],
        "max_tokens": 30,
    }
    with pytest.raises(HttpError, match=r"requests\[0\]: params.max_tokens"):
        convert([{"custom_id": "1", "params": {**params, "max_tokens": 0}}])
