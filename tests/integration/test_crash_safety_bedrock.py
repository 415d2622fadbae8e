"""kill -9 of `barge run` between Bedrock's CreateModelInvocationJob and the ledger's record (failpoint
after-create), then a rerun, with the real boto3 against `barge emulator`'s /bedrock endpoints and the records in
moto's S3 server: the orphan job is adopted by its name (job tag and shard), one model invocation job per shard,
every item once (test_crash_safety_providers.py does the same for openai-compatible and mistral)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from barge.emulator import bedrock_api
from tests.conftest import Factory, state
from tests.contract.bedrock_case import s3_endpoint, secret
from tests.integration.test_crash_safety import N_ITEMS, SHARD

MODEL = "anthropic.claude-haiku-4-5-20251001-v1:0"


def barge_run(path: Path, ledger: Path, key: str, failpoint: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "BARGE_BEDROCK_SECRET": key,  # barge run reads it for type bedrock when BARGE_API_KEY is unset
        "BARGE_MAX_SHARD_REQUESTS": str(SHARD),
        "BARGE_POLL_SECONDS": "0.1",
        "BARGE_MIN_BATCH_WINDOW": "0",
    }
    for name in ("BARGE_FAILPOINT", "BARGE_API_KEY"):
        env.pop(name, None)
    if failpoint:
        env["BARGE_FAILPOINT"] = failpoint
    return subprocess.run(
        [sys.executable, "-m", "barge.cli", "run", str(path), "--ledger", str(ledger), "--json"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_kill_9_between_create_and_record_keeps_one_job_per_shard(
    start_emulator: Factory, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(bedrock_api.S3_ENV, s3_endpoint())  # the emulator (this process) reads and writes moto's S3
    monkeypatch.setenv(bedrock_api.MIN_RECORDS_ENV, str(SHARD))  # the account's minimum: a shard is just enough
    emu = start_emulator({"batch": {"processingSeconds": 0.3}})
    (tmp_path / "in.jsonl").write_text(
        "".join(json.dumps({"id": f"i{n:03d}", "text": f"text {n}"}) + "\n" for n in range(N_ITEMS))
    )
    manifest = tmp_path / "job.yaml"
    provider = {"type": "bedrock", "model": MODEL, "secretRef": {"name": "aws"}, "baseURL": emu.url + "/bedrock"}
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
                    "request": {"template": "{{ text }}", "maxTokens": 20},
                },
            }
        )
    )
    key = secret(min_records=SHARD, prefix=tmp_path.name)
    ledger = tmp_path / "ledger.db"
    killed = barge_run(manifest, ledger, key, "after-create")
    assert killed.returncode == -9, killed.stderr
    assert len(state(emu)["batches"]) == 1, "Bedrock created the first shard's job before the kill"
    done = barge_run(manifest, ledger, key)
    assert done.returncode == 0, done.stderr
    snap = json.loads(done.stdout)
    assert snap["phase"] == "Succeeded"
    batches = state(emu)["batches"]
    seen: dict[str, int] = {}
    for b in batches:
        for cid in b["custom_ids"]:
            seen[cid] = seen.get(cid, 0) + 1
    assert len(seen) == N_ITEMS
    assert set(seen.values()) == {1}, "an item went to Bedrock twice"
    assert len(batches) == N_ITEMS // SHARD, "exactly one model invocation job per shard"
    results = [json.loads(x) for x in (tmp_path / "out" / "results.jsonl").read_text().splitlines()]
    assert len(results) == N_ITEMS
    assert {r["status"] for r in results} == {"succeeded"}
    assert float(snap["usage"]["costUSD"]) > 0, "priced from the table: Bedrock's batch rate"
