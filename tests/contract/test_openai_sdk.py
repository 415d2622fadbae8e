"""The real `openai` SDK (OpenAI and AzureOpenAI clients) against the emulator."""

from __future__ import annotations

import io
import json
from typing import Any

import openai
import pytest

from barge.emulator.core import REPLY_PREFIX
from barge.emulator.server import EmulatorThread
from tests.conftest import Factory, state, wait_until

ENDED = {"completed", "failed", "expired", "cancelled"}


def oai(emu: EmulatorThread, key: str = "sk-test", retries: int = 0) -> openai.OpenAI:
    return openai.OpenAI(api_key=key, base_url=f"{emu.url}/v1", max_retries=retries)


def azure(emu: EmulatorThread, key: str = "azure-key") -> openai.AzureOpenAI:
    return openai.AzureOpenAI(api_key=key, azure_endpoint=emu.url, api_version="2025-04-01-preview", max_retries=0)


def line(
    custom_id: str, text: str, model: str = "gpt-4o-mini", url: str = "/v1/chat/completions", **body: Any
) -> dict[str, Any]:
    payload = {"model": model, "messages": [{"role": "user", "content": text}], "max_completion_tokens": 100}
    payload.update(body)
    return {"custom_id": custom_id, "method": "POST", "url": url, "body": payload}


def upload(c: openai.OpenAI, lines: list[dict[str, Any]] | bytes) -> str:
    data = lines if isinstance(lines, bytes) else "".join(json.dumps(x) + "\n" for x in lines).encode()
    return c.files.create(file=("in.jsonl", io.BytesIO(data)), purpose="batch").id


def submit(
    c: openai.OpenAI, lines: list[dict[str, Any]] | bytes, endpoint: str = "/v1/chat/completions", **kw: Any
) -> Any:
    return c.batches.create(
        input_file_id=upload(c, lines),
        endpoint=endpoint,  # type: ignore[arg-type]
        completion_window="24h",
        **kw,
    )


def finished(c: openai.OpenAI, batch_id: str) -> Any:
    return wait_until(lambda: (b := c.batches.retrieve(batch_id)).status in ENDED and b)


def read_lines(c: openai.OpenAI, file_id: str | None) -> list[dict[str, Any]]:
    if not file_id:
        return []
    with c.files.with_streaming_response.content(file_id) as resp:
        return [json.loads(x) for x in resp.iter_lines() if x]


def test_batch_lifecycle_statuses_and_files(start_emulator: Factory) -> None:
    emu = start_emulator({"batch": {"processingSeconds": 1.5}})
    c = oai(emu)
    lines = [line(f"q-{n:03d}", f"question {n}") for n in range(80)]
    batch = submit(c, lines, metadata={"barge_job": "ns/job", "barge_shard": "0"})
    assert batch.status == "validating"
    assert batch.metadata == {"barge_job": "ns/job", "barge_shard": "0"}
    assert batch.output_file_id is None
    seen = {batch.status}
    while batch.status not in ENDED:
        batch = c.batches.retrieve(batch.id)
        seen.add(batch.status)
    assert {"validating", "in_progress", "finalizing", "completed"} <= seen
    assert batch.request_counts.total == 80
    assert batch.request_counts.completed == 80
    assert batch.completed_at is not None
    assert batch.error_file_id is None  # OpenAI: no error file when nothing failed
    out = read_lines(c, batch.output_file_id)
    ids = [x["custom_id"] for x in out]
    assert sorted(ids) == [x["custom_id"] for x in lines]
    assert ids != sorted(ids)
    for x in out:
        n = int(x["custom_id"].split("-")[1])
        assert x["error"] is None
        assert x["response"]["status_code"] == 200
        assert x["response"]["body"]["choices"][0]["message"]["content"] == f"{REPLY_PREFIX}question {n}"
        assert x["response"]["body"]["usage"]["prompt_tokens"] > 0


def test_outcome_lines_have_the_real_shapes(start_emulator: Factory) -> None:
    emu = start_emulator(
        {"batch": {"outcomes": {"server_error": 0.2, "invalid_request": 0.2, "expired": 0.2, "refusal": 0.2}}}
    )
    c = oai(emu)
    batch = finished(c, submit(c, [line(f"o{n}", "t") for n in range(200)]).id)
    assert batch.status == "expired"  # some requests did not finish inside the window
    out, err = read_lines(c, batch.output_file_id), read_lines(c, batch.error_file_id)
    assert len(out) + len(err) == 200
    assert batch.request_counts.completed == len(out)
    assert batch.request_counts.failed == len(err)
    finish = {x["response"]["body"]["choices"][0]["finish_reason"] for x in out}
    assert finish == {"stop", "content_filter"}
    four_hundreds = [x for x in err if x["response"] and x["response"]["status_code"] == 400]
    assert four_hundreds
    assert all(x["error"] is None for x in four_hundreds)  # the 400 line shape: error null, real error in body
    assert all(x["response"]["body"]["error"]["type"] == "invalid_request_error" for x in four_hundreds)
    assert any(x["response"] and x["response"]["status_code"] == 500 for x in err)
    expired = [x for x in err if x["error"] and x["error"]["code"] == "batch_expired"]
    assert expired
    assert all(x["response"] is None for x in expired)


def test_cancel_mid_flight_partial_output(start_emulator: Factory) -> None:
    emu = start_emulator({"batch": {"processingSeconds": 2.0, "cancelSeconds": 0.3}})
    c = oai(emu)
    batch = submit(c, [line(f"k{n}", "t") for n in range(100)])
    wait_until(lambda: c.batches.retrieve(batch.id).status == "in_progress")
    wait_until(lambda: emu.store.clock() - emu.store.batches[batch.id].created_at > 1.0)
    assert c.batches.cancel(batch.id).status == "cancelling"
    done = finished(c, batch.id)
    assert done.status == "cancelled"
    assert done.cancelled_at is not None
    out, err = read_lines(c, done.output_file_id), read_lines(c, done.error_file_id)
    assert out
    assert err
    assert len(out) + len(err) == 100
    assert {x["error"]["code"] for x in err} == {"batch_cancelled"}
    with pytest.raises(openai.BadRequestError, match="Cannot cancel"):
        c.batches.cancel(batch.id)


@pytest.mark.parametrize(
    ("lines", "code"),
    [
        ([line("a", "x"), line("a", "y")], "duplicate_custom_id"),
        ([line("a", "x"), line("b", "y", model="gpt-4o")], "model_mismatch"),
        ([line("bad id", "x")], "invalid_custom_id"),
        ([line("a", "x", stream=True)], "invalid_request"),
        ([line("a", "x", url="/v1/embeddings")], "url_mismatch"),
        (b'{"custom_id": "a", not json}\n', "invalid_json_line"),
    ],
    ids=["duplicate", "two-models", "bad-custom-id", "stream", "url", "bad-json"],
)
def test_file_validation_fails_the_batch(emulator: EmulatorThread, lines: Any, code: str) -> None:
    c = oai(emulator)
    done = finished(c, submit(c, lines).id)
    assert done.status == "failed"
    assert done.failed_at is not None
    assert code in {e.code for e in done.errors.data}


def test_too_many_lines(emulator: EmulatorThread) -> None:
    c = oai(emulator)
    data = b"".join(json.dumps(line(f"n{n}", "x")).encode() + b"\n" for n in range(50_001))
    done = finished(
        c,
        submit(c, data).id,
    )
    assert done.status == "failed"
    assert done.errors.data[0].code == "too_many_tasks"


def test_list_files_and_errors(emulator: EmulatorThread) -> None:
    c = oai(emulator)
    ids = [submit(c, [line("l", "x")]).id for _ in range(5)]
    page = c.batches.list(limit=2)
    assert [b.id for b in page.data] == ids[::-1][:2]
    assert page.has_more is True
    assert [b.id for b in c.batches.list(limit=2)] == ids[::-1]
    with pytest.raises(openai.NotFoundError):
        c.batches.retrieve("batch_nope")
    with pytest.raises(openai.BadRequestError):
        c.batches.create(input_file_id="file-nope", endpoint="/v1/chat/completions", completion_window="24h")
    with pytest.raises(openai.BadRequestError, match="metadata"):
        submit(c, [line("m", "x")], metadata={f"k{n}": "v" for n in range(17)})
    file_id = upload(c, [line("f", "x")])
    assert c.files.retrieve(file_id).purpose == "batch"
    assert c.files.delete(file_id).deleted is True
    with pytest.raises(openai.NotFoundError):
        c.files.content(file_id)
    with pytest.raises(openai.AuthenticationError):
        oai(emulator, key="invalid").batches.list()


def test_sync_chat_rate_limit_and_content_filter(start_emulator: Factory) -> None:
    emu = start_emulator({"sync": {"quota": {"tokensPerMinute": 150}}})
    c = oai(emu)
    done = c.chat.completions.create(
        model="gpt-4o-mini", max_completion_tokens=50, messages=[{"role": "user", "content": "hi"}]
    )
    assert done.choices[0].message.content == f"{REPLY_PREFIX}hi"
    assert done.usage is not None
    with pytest.raises(openai.RateLimitError) as err:
        c.chat.completions.create(
            model="gpt-4o-mini", max_completion_tokens=100, messages=[{"role": "user", "content": "again"}]
        )
    assert float(err.value.response.headers["retry-after"]) >= 1
    filtering = start_emulator({"sync": {"outcomes": {"refusal": 1.0}}})
    blocked = oai(filtering).chat.completions.create(model="m", messages=[{"role": "user", "content": "x"}])
    assert blocked.choices[0].finish_reason == "content_filter"


def test_duplicate_create_trap(start_emulator: Factory) -> None:
    emu = start_emulator({"batch": {"createFailuresAfterAccept": 1}})
    with pytest.raises(openai.InternalServerError):
        submit(oai(emu, retries=0), [line("t", "x")])
    assert len(state(emu)["batches"]) == 1


def test_azure_global_batch(start_emulator: Factory) -> None:
    emu = start_emulator({"batch": {"azureEnqueuedTokenLimit": 50}})
    c = azure(emu)
    lines = [line(f"z{n}", "short", model="gpt-4o-mini-batch", url="/chat/completions") for n in range(3)]
    batch = submit(c, lines, endpoint="/chat/completions")
    assert batch.status == "validating"
    assert batch.request_counts.total is None  # Azure may answer nulls while validating
    done = finished(c, batch.id)
    assert done.status == "completed"
    assert done.error_file_id  # Azure points at an error file even when it is empty
    assert read_lines(c, done.error_file_id) == []
    assert len(read_lines(c, done.output_file_id)) == 3
    mixed = finished(
        c,
        submit(
            c,
            [lines[0], line("z9", "x", model="other-deployment", url="/chat/completions")],
            endpoint="/chat/completions",
        ).id,
    )
    assert mixed.status == "failed"
    assert mixed.errors.data[0].code == "model_mismatch"
    big = [
        line(f"y{n}", "a much longer prompt " * 20, model="gpt-4o-mini-batch", url="/chat/completions")
        for n in range(2)
    ]
    over = finished(c, submit(c, big, endpoint="/chat/completions").id)
    assert over.status == "failed"
    assert over.errors.data[0].code == "token_limit_exceeded"
    chat = c.chat.completions.create(model="gpt-4o-mini-batch", messages=[{"role": "user", "content": "dep"}])
    assert chat.choices[0].message.content == f"{REPLY_PREFIX}dep"
    assert chat.model == "gpt-4o-mini-batch"
    with pytest.raises(openai.AuthenticationError):
        azure(emu, key="invalid").batches.list()
    assert {b["provider"] for b in state(emu)["batches"]} == {"azure"}
