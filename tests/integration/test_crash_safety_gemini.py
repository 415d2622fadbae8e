"""kill -9 of `barge run` between the Gemini batch's create and the ledger's record (failpoint after-create), then
a rerun, with the real google-genai SDK against the emulator: the Gemini API has no idempotency key on
`batches.create`, so the rerun finds the orphan by its display name (Barge's job tag and shard) and adopts it: one
provider batch per shard, every item exactly once, each answer read back with its usage."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from tests.conftest import Factory, state
from tests.integration.test_crash_safety import N_ITEMS, SHARD, barge_run


def test_kill_9_between_create_and_record_keeps_one_gemini_batch_per_shard(
    start_emulator: Factory, tmp_path: Path
) -> None:
    emu = start_emulator({"batch": {"processingSeconds": 0.3}})
    (tmp_path / "in.jsonl").write_text(
        "".join(json.dumps({"id": f"i{n:03d}", "text": f"text {n}"}) + "\n" for n in range(N_ITEMS))
    )
    manifest = tmp_path / "job.yaml"
    provider = {
        "type": "gemini",
        "model": "gemini-2.5-flash",
        "secretRef": {"name": "k"},
        "baseURL": emu.url + "/gemini",
    }
    manifest.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "barge.dev/v1alpha1",
                "kind": "LLMBatchJob",
                "metadata": {"name": "crash"},
                "spec": {
                    "provider": provider,
                    "input": {"url": "in.jsonl"},
                    "output": {"url": "out/"},
                    "successRatio": "1",
                    "request": {"system": "Answer briefly.", "template": "{{ text }}", "maxTokens": 20},
                },
            }
        )
    )
    ledger = tmp_path / "ledger.db"
    killed = barge_run(manifest, ledger, "after-create")
    assert killed.returncode == -9, killed.stderr
    created = state(emu)["batches"]
    assert len(created) == 1, "the provider created the first shard's batch before the kill"
    assert created[0]["id"].startswith("batches/")
    done = barge_run(manifest, ledger)
    assert done.returncode == 0, done.stderr
    status = json.loads(done.stdout)
    assert status["phase"] == "Succeeded", status
    batches = state(emu)["batches"]
    seen: dict[str, int] = {}
    for b in batches:
        for cid in b["custom_ids"]:
            seen[cid] = seen.get(cid, 0) + 1
    assert len(seen) == N_ITEMS
    assert set(seen.values()) == {1}, "an item went to the provider twice"
    assert len(batches) == N_ITEMS // SHARD, "exactly one provider batch per shard"
    results = [json.loads(x) for x in (tmp_path / "out" / "results.jsonl").read_text().splitlines()]
    assert len(results) == N_ITEMS
    assert {r["status"] for r in results} == {"succeeded"}
    assert all(r["output"] == f"Emulated reply: text {int(r['id'][1:])}" for r in results), results[0]
    assert all(r["via"] == "batch" and r["usage"]["input_tokens"] > 0 for r in results)
