"""Checked structured outputs and kept tool calls, end to end in-process: real SDK adapters against the emulator,
a real ledger, results.jsonl and failures.jsonl as a user reads them.

- A job with spec.request.responseFormat whose answers break the schema half the time (the emulator's
  schema_violation fault): broken answers are retried up to retry.maxAttempts, then failed with the validation
  error; valid ones carry `output_json`; the counts say how many broke it.
- A tool-forcing job (tools + tool_choice in spec.request.params): the call's arguments are read back from
  results.jsonl, on Anthropic, OpenAI, Azure and an engine pool (the synchronous path against `--vllm`).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from barge.batch import prices
from barge.batch.job import EngineSettings
from barge.batch.runner import JobRunner
from barge.emulator.profile import parse_profile
from barge.emulator.server import EmulatorThread
from barge.ledger import Ledger
from barge.providers import make_provider
from tests.conftest import Factory, state
from tests.contract.test_structured_tools import EXPECTED, SCHEMA, TOOL_SCHEMA, tool_params
from tests.integration.test_engine import FAST, make_job, outputs, provider_for, run_to_end

KINDS = ["anthropic", "openai", "azure-openai"]
FORMAT = {"name": "claim", "schema": SCHEMA}


def submissions(emu: EmulatorThread) -> dict[str, int]:
    out: dict[str, int] = {}
    for batch in state(emu)["batches"]:
        for cid in batch["custom_ids"]:
            out[cid] = out.get(cid, 0) + 1
    return out


@pytest.mark.parametrize("kind", KINDS)
async def test_broken_outputs_are_retried_then_failed(
    start_emulator: Factory, tmp_path: Path, kind: str, ledger_url: str
) -> None:
    emu = start_emulator({"batch": {"outcomes": {"schema_violation": 0.5}}})
    request = {"system": "Classify.", "template": "{{ text }}", "maxTokens": 200, "responseFormat": FORMAT}
    job = make_job(tmp_path, kind, 60, request=request, retry={"maxAttempts": 3})
    runner = JobRunner(job, provider_for(kind, emu.url), Ledger(ledger_url), prices.load(), FAST)
    snap = await run_to_end(runner)
    ok, bad = outputs(tmp_path)
    assert len(ok) + len(bad) == 60
    assert ok, "with half the answers broken, some items must pass"
    assert bad, "and some fail after 3 attempts"
    for line in ok:
        assert line["status"] == "succeeded"
        assert line["output_json"] == EXPECTED
        assert json.loads(line["output"]) == EXPECTED
    sent = submissions(emu)
    for failure in bad:
        assert failure["status"] == "failed"
        assert failure["error_type"] == "invalid_output"
        assert "the answer breaks the schema" in failure["reason"]
        assert "(after 3 attempts)" in failure["reason"]
    by_id = {cid.split("-")[0]: n for cid, n in sent.items()}
    assert {by_id[f["id"]] for f in bad} == {3}, "a failed item was asked exactly retry.maxAttempts times"
    assert max(sent.values()) <= 3
    assert any(by_id[r["id"]] > 1 for r in ok), "some items did better on a later try"
    assert snap.counts["invalidOutput"] == len(bad)
    assert snap.counts["failed"] == len(bad)
    # every answer was paid for, the broken ones too (retried or failed): the job counts what the provider billed
    billed = [ans for batch in emu.store.batches.values() for _, ans in batch.answers()]
    assert snap.usage["outputTokens"] == sum(ans.output_tokens for ans in billed)
    assert snap.usage["inputTokens"] == sum(ans.input_tokens for ans in billed)
    assert snap.usage["outputTokens"] > sum(r["usage"]["output_tokens"] for r in ok)
    assert snap.phase in ("Succeeded", "Failed")


async def test_broken_outputs_on_the_synchronous_path_fail_after_the_tries(
    start_emulator: Factory, tmp_path: Path
) -> None:
    emu = start_emulator({"sync": {"outcomes": {"schema_violation": 1.0}}})
    request = {"system": "Classify.", "template": "{{ text }}", "maxTokens": 200, "responseFormat": FORMAT}
    job = make_job(tmp_path, "openai", 4, request=request)
    ledger = Ledger(str(tmp_path / "ledger.db"))
    runner = JobRunner(job, provider_for("openai", emu.url), ledger, prices.load(), FAST, sync_only=True)
    snap = await run_to_end(runner)
    ok, bad = outputs(tmp_path)
    assert ok == []
    assert [f["error_type"] for f in bad] == ["invalid_output"] * 4
    assert emu.store.sync_requests == 4 * FAST.sync_tries  # every try asked again, none past them
    assert snap.counts["invalidOutput"] == 4
    assert snap.usage["outputTokens"] > 0, "the broken answers were paid for"
    per_answer = snap.usage["outputTokens"] // emu.store.sync_requests  # the emulator's answers are alike
    assert snap.usage["outputTokens"] == per_answer * 4 * FAST.sync_tries, "every try's answer is counted"


def _arguments(line: dict[str, Any], kind: str) -> Any:
    if kind == "anthropic":
        assert line["stop_reason"] == "tool_use"
        (block,) = [b for b in line["content"] if b["type"] == "tool_use"]
        return block["input"]
    assert line["finish_reason"] == "tool_calls"
    (call,) = line["tool_calls"]
    return json.loads(call["function"]["arguments"])


@pytest.mark.parametrize("kind", KINDS)
async def test_tool_call_arguments_are_in_results_jsonl(start_emulator: Factory, tmp_path: Path, kind: str) -> None:
    emu = start_emulator()
    request = {"template": "{{ text }}", "maxTokens": 100, "params": tool_params(kind)}
    runner = JobRunner(
        make_job(tmp_path, kind, 5, request=request),
        provider_for(kind, emu.url),
        Ledger(str(tmp_path / "ledger.db")),
        prices.load(),
        FAST,
    )
    snap = await run_to_end(runner)
    assert snap.phase == "Succeeded"
    ok, bad = outputs(tmp_path)
    assert bad == []
    assert len(ok) == 5
    for line in ok:
        assert _arguments(line, kind) == {"city": "xxx", "days": 1}
        assert "output_json" not in line  # no responseFormat asked for


async def test_tool_call_arguments_from_an_engine_pool(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An engine pool's path: every item synchronous through the OpenAI adapter against vLLM (`--vllm`)."""
    monkeypatch.delenv("VLLM_API_KEY", raising=False)
    with EmulatorThread(parse_profile({"sync": {"latencyMs": 1}}), vllm_model="gpt-4o-mini") as emu:
        request = {"template": "{{ text }}", "maxTokens": 100, "params": tool_params("openai")}
        provider = make_provider("openai", "k", base_url=f"{emu.url}/v1", sync_retries=0)
        ledger = Ledger(str(tmp_path / "ledger.db"))
        job = make_job(tmp_path, "openai", 5, request=request)
        runner = JobRunner(job, provider, ledger, prices.load(), EngineSettings(min_batch_window=0), sync_only=True)
        snap = await run_to_end(runner)
    assert snap.phase == "Succeeded"
    ok, _ = outputs(tmp_path)
    assert len(ok) == 5
    assert all(line["via"] == "sync" for line in ok)
    for line in ok:
        assert _arguments(line, "openai") == {"city": "xxx", "days": 1}
    assert TOOL_SCHEMA["required"] == ["city", "days"]
