"""A spec.request.endpoint responses job end to end in-process: Barge's OpenAI adapter (the real `openai` SDK)
against the emulator, a real ledger, results.jsonl and failures.jsonl as a user reads them.

- Batch: every shard is a `/v1/responses` batch; a responseFormat job whose answers break the schema half the time
  has the broken ones retried up to retry.maxAttempts, then failed as invalid_output with the validation error,
  the valid ones written with `output_json`; usage and cost at the batch rate.
- Tool calls: a forced function call's arguments are read back from results.jsonl as chat's `tool_calls`.
- The synchronous fallback (a deadline too near for a batch): client.responses.create at the flex tier, each answer
  priced at the tier it reports; structured answers checked there too.
- `barge run` of a responses job on Azure is refused at admission naming why, nothing sent or written.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import yaml

from barge.batch import prices
from barge.batch.job import EngineSettings
from barge.batch.runner import JobRunner
from barge.emulator import flex
from barge.ledger import Ledger
from tests.conftest import Factory
from tests.contract.test_structured_tools import EXPECTED, SCHEMA
from tests.integration.test_cli_run import barge
from tests.integration.test_engine import FAST, make_job, outputs, provider_for, run_to_end
from tests.integration.test_flex_fallback import usage_of
from tests.integration.test_structured_job import submissions

FORMAT = {"name": "claim", "schema": SCHEMA}
NEAR = EngineSettings(min_batch_window=3600)  # the deadline is inside it: straight to the synchronous path
TOOL = {
    "type": "function",
    "name": "lookup",
    "parameters": {"type": "object", "properties": {"code": {"type": "string", "minLength": 2}}, "required": ["code"]},
}


async def test_broken_responses_are_retried_then_failed(start_emulator: Factory, tmp_path: Path) -> None:
    emu = start_emulator({"batch": {"outcomes": {"schema_violation": 0.5}}})
    request = {"endpoint": "responses", "system": "Classify.", "maxTokens": 200, "responseFormat": FORMAT}
    job = make_job(tmp_path, "openai", 40, request=request, retry={"maxAttempts": 3})
    table = prices.load()
    runner = JobRunner(job, provider_for("openai", emu.url), Ledger(str(tmp_path / "ledger.db")), table, FAST)
    snap = await run_to_end(runner)
    assert {b.endpoint for b in emu.store.batches.values()} == {"/v1/responses"}
    assert all(i.schema == SCHEMA for b in emu.store.batches.values() for i in b.items)  # text.format was sent
    ok, bad = outputs(tmp_path)
    assert len(ok) + len(bad) == 40
    assert ok, "with half the answers broken, some items must pass"
    assert bad, "and some fail after 3 attempts"
    for line in ok:
        assert line["status"] == "succeeded"
        assert line["output_json"] == EXPECTED
        assert line["via"] == "batch"
    for failure in bad:
        assert failure["error_type"] == "invalid_output"
        assert "the answer breaks the schema" in failure["reason"]
        assert "(after 3 attempts)" in failure["reason"]
    by_id = {cid.split("-")[0]: n for cid, n in submissions(emu).items()}
    assert {by_id[f["id"]] for f in bad} == {3}, "a failed item was asked exactly retry.maxAttempts times"
    assert snap.counts["invalidOutput"] == len(bad)
    billed = [ans for batch in emu.store.batches.values() for _, ans in batch.answers()]
    assert snap.usage["inputTokens"] == sum(ans.input_tokens for ans in billed)
    assert snap.usage["outputTokens"] == sum(ans.output_tokens for ans in billed)
    ok_usage = usage_of(ok)
    assert prices.money(table.cost(job.model, ok_usage, batch=True)) <= snap.usage["costUSD"]


async def test_a_forced_function_call_is_kept_in_results_jsonl(start_emulator: Factory, tmp_path: Path) -> None:
    emu = start_emulator()
    params = {"tools": [TOOL], "tool_choice": {"type": "function", "name": "lookup"}}
    request = {"endpoint": "responses", "template": "{{ text }}", "maxTokens": 100, "params": params}
    job = make_job(tmp_path, "openai", 5, request=request)
    runner = JobRunner(job, provider_for("openai", emu.url), Ledger(str(tmp_path / "ledger.db")), prices.load(), FAST)
    snap = await run_to_end(runner)
    assert snap.phase == "Succeeded"
    ok, bad = outputs(tmp_path)
    assert bad == []
    assert len(ok) == 5
    for line in ok:
        assert line["finish_reason"] == "tool_calls"
        (call,) = line["tool_calls"]
        assert call["function"]["name"] == "lookup"
        assert json.loads(call["function"]["arguments"]) == {"code": "xx"}
        assert line["output"] == ""


async def test_the_synchronous_fallback_calls_responses_at_flex(start_emulator: Factory, tmp_path: Path) -> None:
    emu = start_emulator({"sync": {"latencyMs": 2, "flex": {"latencyMs": 5}}})
    deadline = (datetime.now(UTC) + timedelta(minutes=5)).isoformat()
    request = {"endpoint": "responses", "system": "Classify.", "maxTokens": 200, "responseFormat": FORMAT}
    job = make_job(tmp_path, "openai", 6, request=request, deadline=deadline, fallback={"serviceTier": "flex"})
    table = prices.load()
    runner = JobRunner(job, provider_for("openai", emu.url), Ledger(str(tmp_path / "ledger.db")), table, NEAR)
    snap = await run_to_end(runner)
    assert snap.phase == "Succeeded", snap.message
    assert emu.store.batches == {}, "nothing went through a batch"
    ok, bad = outputs(tmp_path)
    assert bad == []
    assert len(ok) == 6
    assert {r["via"] for r in ok} == {"flex"}  # each answer reported service_tier flex
    assert all(r["output_json"] == EXPECTED for r in ok)
    assert flex.unavailable_count(emu.store) == 0
    assert snap.usage["costUSD"] == prices.money(table.cost(job.model, usage_of(ok), batch=True))


def test_barge_run_refuses_a_responses_job_on_azure(tmp_path: Path) -> None:
    (tmp_path / "in.jsonl").write_text('{"id": "a", "text": "x"}\n')
    doc = {
        "apiVersion": "barge.dev/v1alpha1",
        "kind": "LLMBatchJob",
        "metadata": {"name": "resp-azure"},
        "spec": {
            "provider": {
                "type": "azure-openai",
                "model": "d",
                "secretRef": {"name": "k"},
                "baseURL": "http://127.0.0.1:1",
            },
            "input": {"url": "in.jsonl"},
            "output": {"url": "out/"},
            "request": {"endpoint": "responses"},
        },
    }
    (tmp_path / "job.yaml").write_text(yaml.safe_dump(doc))
    out = barge("run", str(tmp_path / "job.yaml"), "--json", cwd=tmp_path)
    assert out.returncode == 2
    said = " ".join(out.stderr.split())
    assert "spec.request.endpoint responses is not offered by azure-openai" in said
    assert "Azure OpenAI Global Batch takes /chat/completions and /embeddings lines" in said
    assert not (tmp_path / "out").exists()
