"""The real `anthropic` SDK against the emulator: every status, field and outcome Barge relies on."""

from __future__ import annotations

from typing import Any

import anthropic
import pytest

from barge.emulator import anthropic_api
from barge.emulator.core import REPLY_PREFIX
from barge.emulator.server import EmulatorThread
from tests.conftest import Factory, state, wait_until


def client(emu: EmulatorThread, key: str = "sk-test", retries: int = 0) -> anthropic.Anthropic:
    return anthropic.Anthropic(api_key=key, base_url=emu.url, max_retries=retries)


def req(custom_id: str, text: str, **params: Any) -> dict[str, Any]:
    body = {"model": "claude-sonnet-4-6", "max_tokens": 200, "messages": [{"role": "user", "content": text}]}
    body.update(params)
    return {"custom_id": custom_id, "params": body}


def ended(c: anthropic.Anthropic, batch_id: str) -> Any:
    return wait_until(lambda: (b := c.messages.batches.retrieve(batch_id)).processing_status == "ended" and b)


def test_batch_lifecycle_fields_and_unordered_results(emulator: EmulatorThread) -> None:
    c = client(emulator)
    requests = [req(f"item-{n:03d}", f"claim number {n} about a broken window") for n in range(60)]
    batch = c.messages.batches.create(requests=requests)  # type: ignore[arg-type]
    assert batch.id.startswith("msgbatch_")
    assert batch.type == "message_batch"
    assert batch.processing_status == "in_progress"
    assert batch.request_counts.processing == 60
    assert batch.request_counts.succeeded == 0  # stays 0 until the batch ends
    assert batch.results_url is None
    assert batch.ended_at is None
    assert (batch.expires_at - batch.created_at).total_seconds() == pytest.approx(24 * 3600, abs=1)
    with pytest.raises(anthropic.AnthropicError):
        list(c.messages.batches.results(batch.id))  # no results_url before the end

    done = ended(c, batch.id)
    assert done.request_counts.processing == 0
    assert done.request_counts.succeeded == 60
    assert done.ended_at is not None
    assert done.results_url == f"{emulator.url}/v1/messages/batches/{batch.id}/results"

    results = list(c.messages.batches.results(batch.id))
    ids = [r.custom_id for r in results]
    assert sorted(ids) == [r["custom_id"] for r in requests]
    assert ids != sorted(ids), "results must not come back in submission order"
    for r in results:
        assert r.result.type == "succeeded"
        n = int(r.custom_id.split("-")[1])
        assert r.result.message.content[0].text == f"{REPLY_PREFIX}claim number {n} about a broken window"
        assert r.result.message.usage.input_tokens > 0
        assert r.result.message.usage.output_tokens > 0


def test_every_outcome_type(start_emulator: Factory) -> None:
    emu = start_emulator(
        {"batch": {"outcomes": {"server_error": 0.2, "invalid_request": 0.2, "expired": 0.2, "refusal": 0.2}}}
    )
    c = client(emu)
    requests = [req(f"r{n}", f"text {n}") for n in range(200)]
    requests.append(
        {
            "custom_id": "no-max-tokens",
            "params": {"model": "m", "messages": [{"role": "user", "content": "x"}], "system": "s"},
        }
    )
    batch = c.messages.batches.create(requests=requests)  # type: ignore[arg-type]
    done = ended(c, batch.id)
    results = {r.custom_id: r.result for r in c.messages.batches.results(batch.id)}
    assert len(results) == 201
    kinds: dict[str, int] = {}
    for result in results.values():
        key = result.type
        if result.type == "succeeded" and result.message.stop_reason == "refusal":
            key = "refusal"
        elif result.type == "errored":
            key = result.error.error.type
        kinds[key] = kinds.get(key, 0) + 1
    assert set(kinds) == {"succeeded", "refusal", "api_error", "invalid_request_error", "expired"}
    assert results["no-max-tokens"].type == "errored"  # params are validated asynchronously
    assert results["no-max-tokens"].error.error.type == "invalid_request_error"  # type: ignore[union-attr]
    counts = done.request_counts
    assert counts.succeeded == kinds["succeeded"] + kinds["refusal"]
    assert counts.errored == kinds["api_error"] + kinds["invalid_request_error"]
    assert counts.expired == kinds["expired"]


def test_cancel_mid_flight_keeps_partial_results(start_emulator: Factory) -> None:
    emu = start_emulator({"batch": {"processingSeconds": 2.0, "cancelSeconds": 0.2}})
    c = client(emu)
    batch = c.messages.batches.create(requests=[req(f"c{n}", "t") for n in range(100)])  # type: ignore[arg-type]
    wait_until(lambda: emu.store.clock() - emu.store.batches[batch.id].created_at > 1.0)
    canceling = c.messages.batches.cancel(batch.id)
    assert canceling.processing_status == "canceling"
    assert canceling.cancel_initiated_at is not None
    done = ended(c, batch.id)
    counts = done.request_counts
    assert counts.canceled > 0
    assert counts.succeeded > 0
    assert counts.canceled + counts.succeeded == 100
    types = [r.result.type for r in c.messages.batches.results(batch.id)]
    assert types.count("canceled") == counts.canceled


def test_delete_only_after_end(emulator: EmulatorThread) -> None:
    c = client(emulator)
    batch = c.messages.batches.create(requests=[req("d1", "t")])  # type: ignore[arg-type]
    with pytest.raises(anthropic.BadRequestError):
        c.messages.batches.delete(batch.id)
    ended(c, batch.id)
    deleted = c.messages.batches.delete(batch.id)
    assert deleted.type == "message_batch_deleted"
    with pytest.raises(anthropic.NotFoundError):
        c.messages.batches.retrieve(batch.id)
    with pytest.raises(anthropic.NotFoundError):
        c.messages.batches.retrieve("msgbatch_doesnotexist")


def test_list_is_newest_first_and_paginates(emulator: EmulatorThread) -> None:
    c = client(emulator)
    created = [c.messages.batches.create(requests=[req(f"l{n}", "t")]).id for n in range(7)]  # type: ignore[list-item]
    page = c.messages.batches.list(limit=3)
    assert [b.id for b in page.data] == created[::-1][:3]
    assert page.has_more is True
    assert [b.id for b in c.messages.batches.list(limit=3)] == created[::-1]  # auto-pagination with after_id
    before = c.messages.batches.list(limit=2, before_id=created[2])
    assert [b.id for b in before.data] == [created[4], created[3]]
    with pytest.raises(anthropic.BadRequestError):
        c.messages.batches.list(limit=1001)


@pytest.mark.parametrize(
    ("requests", "needle"),
    [
        ([req("same", "a"), req("same", "b")], "duplicate custom_id"),
        ([req("has space", "a")], "custom_id"),
        ([req("x" * 65, "a")], "custom_id"),
        ([req("s1", "a", stream=True)], "stream"),
        ([], "non-empty"),
    ],
    ids=["duplicate-id", "bad-chars", "too-long-id", "stream", "empty"],
)
def test_create_rejections_are_real_sdk_errors(emulator: EmulatorThread, requests: list[Any], needle: str) -> None:
    with pytest.raises(anthropic.BadRequestError) as err:
        client(emulator).messages.batches.create(requests=requests)
    assert needle in str(err.value)
    assert state(emulator)["batches"] == []


def test_limits_count_and_bytes(emulator: EmulatorThread, monkeypatch: pytest.MonkeyPatch) -> None:
    c = client(emulator)
    too_many = [{"custom_id": f"i{n}", "params": {}} for n in range(anthropic_api.MAX_REQUESTS + 1)]
    with pytest.raises(anthropic.BadRequestError, match="at most 100000"):
        c.messages.batches.create(requests=too_many)  # type: ignore[arg-type]
    monkeypatch.setattr(anthropic_api, "MAX_BYTES", 2_000)  # the 256 MB rule, at a size a test can send
    with pytest.raises(anthropic.APIStatusError) as err:
        c.messages.batches.create(requests=[req(f"b{n}", "y" * 100) for n in range(30)])  # type: ignore[arg-type]
    assert err.value.status_code == 413
    assert err.value.body["error"]["type"] == "request_too_large"  # type: ignore[index]


def test_malformed_body_is_a_provider_error_not_a_crash(emulator: EmulatorThread) -> None:
    c = client(emulator)
    with pytest.raises(anthropic.BadRequestError, match="not valid JSON"):
        c.post(
            "/v1/messages/batches",
            cast_to=object,
            content=b"{not json",
            options={"headers": {"Content-Type": "application/json"}},
        )
    with pytest.raises(anthropic.NotFoundError):
        c.messages.batches.cancel("msgbatch_unknown")


def test_sync_messages_refusal_and_rate_limit(start_emulator: Factory) -> None:
    emu = start_emulator({"sync": {"quota": {"requestsPerMinute": 2}}})
    c = client(emu)
    message = c.messages.create(
        model="claude-haiku-4-5", max_tokens=100, messages=[{"role": "user", "content": "hello there"}]
    )
    assert message.content[0].text == f"{REPLY_PREFIX}hello there"  # type: ignore[union-attr]
    assert message.stop_reason == "end_turn"
    short = c.messages.create(model="m", max_tokens=2, messages=[{"role": "user", "content": "x"}])
    assert short.stop_reason == "max_tokens"  # the reply is cut at max_tokens, as the real API does
    with pytest.raises(anthropic.RateLimitError) as err:
        c.messages.create(model="m", max_tokens=10, messages=[{"role": "user", "content": "three"}])
    assert int(err.value.response.headers["retry-after"]) >= 1
    assert state(emu)["rate_limited"] == 1
    refusing = start_emulator({"sync": {"outcomes": {"refusal": 1.0}}})
    refused = client(refusing).messages.create(model="m", max_tokens=10, messages=[{"role": "user", "content": "x"}])
    assert refused.stop_reason == "refusal"


def test_invalid_key_is_authentication_error(emulator: EmulatorThread) -> None:
    with pytest.raises(anthropic.AuthenticationError):
        client(emulator, key="invalid").messages.batches.list()


def test_duplicate_create_trap_is_observable(start_emulator: Factory) -> None:
    emu = start_emulator({"batch": {"createFailuresAfterAccept": 1}})
    with pytest.raises(anthropic.InternalServerError):
        client(emu, retries=0).messages.batches.create(requests=[req("t1", "x")])  # type: ignore[list-item]
    assert len(state(emu)["batches"]) == 1  # the 500 came after the batch was stored
    trap = start_emulator({"batch": {"createFailuresAfterAccept": 1}})
    client(trap, retries=2).messages.batches.create(requests=[req("t1", "x")])  # type: ignore[list-item]
    stored = state(trap)["batches"]
    assert len(stored) == 2, "the SDK's own retry made a duplicate batch: why Barge creates with retries off"
    assert stored[0]["custom_ids"] == stored[1]["custom_ids"] == ["t1"]
