"""kill -9 of `barge run` between the provider's create and the ledger's record (failpoint after-create), then a
rerun, through the provider types openai-compatible and mistral against the emulator: one provider batch per
shard, every item exactly once (test_crash_safety.py does the same for anthropic and openai)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from tests.conftest import Factory, state
from tests.integration.test_crash_safety import N_ITEMS, SHARD, barge_run

TYPES = {"openai-compatible": ("/together/v1", "llama-3.1-8b-instant"), "mistral": ("/mistral", "mistral-small-latest")}


@pytest.mark.parametrize("kind", sorted(TYPES))
def test_kill_9_between_create_and_record_keeps_one_batch_per_shard(
    start_emulator: Factory, tmp_path: Path, kind: str
) -> None:
    emu = start_emulator({"batch": {"processingSeconds": 0.3}})
    path, model = TYPES[kind]
    (tmp_path / "in.jsonl").write_text(
        "".join(json.dumps({"id": f"i{n:03d}", "text": f"text {n}"}) + "\n" for n in range(N_ITEMS))
    )
    manifest = tmp_path / "job.yaml"
    manifest.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "barge.dev/v1alpha1",
                "kind": "LLMBatchJob",
                "metadata": {"name": "crash"},
                "spec": {
                    "provider": {"type": kind, "model": model, "secretRef": {"name": "k"}, "baseURL": emu.url + path},
                    "input": {"url": "in.jsonl"},
                    "output": {"url": "out/"},
                    "successRatio": "1",
                    "request": {"template": "{{ text }}", "maxTokens": 20},
                },
            }
        )
    )
    ledger = tmp_path / "ledger.db"
    killed = barge_run(manifest, ledger, "after-create")
    assert killed.returncode == -9, killed.stderr
    assert len(state(emu)["batches"]) == 1, "the provider created the first shard's batch before the kill"
    done = barge_run(manifest, ledger)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["phase"] == "Succeeded"
    batches = state(emu)["batches"]
    seen: dict[str, int] = {}
    for b in batches:
        for cid in b["custom_ids"]:
            seen[cid] = seen.get(cid, 0) + 1
    assert len(seen) == N_ITEMS
    assert set(seen.values()) == {1}, "an item went to the provider twice"
    assert len(batches) == N_ITEMS // SHARD, "exactly one provider batch per shard"
    results = (tmp_path / "out" / "results.jsonl").read_text().splitlines()
    assert len(results) == N_ITEMS
