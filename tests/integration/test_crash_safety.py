"""SIGKILL `barge run` at the three dangerous moments, rerun it, and count: one batch per shard, every item
exactly once, usage counted once. The emulator lives in the test process, so it outlives the killed client."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.conftest import Factory, state

N_ITEMS = 90
SHARD = 30


def manifest(tmp_path: Path, kind: str, url: str) -> Path:
    data = tmp_path / "in.jsonl"
    data.write_text("".join(json.dumps({"id": f"i{n:03d}", "text": f"text {n}"}) + "\n" for n in range(N_ITEMS)))
    path = tmp_path / "job.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "barge.dev/v1alpha1",
                "kind": "LLMBatchJob",
                "metadata": {"name": "crash"},
                "spec": {
                    "provider": {
                        "type": kind,
                        "model": "m-1",
                        "secretRef": {"name": "k"},
                        "baseURL": f"{url}/v1" if kind == "openai" else url,
                    },
                    "input": {"url": "in.jsonl"},
                    "output": {"url": "out/"},
                    "successRatio": "1",
                    "request": {"template": "{{ text }}", "maxTokens": 20},
                },
            }
        )
    )
    return path


def barge_run(path: Path, ledger: Path, failpoint: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "BARGE_API_KEY": "k",
        "BARGE_MAX_SHARD_REQUESTS": str(SHARD),
        "BARGE_POLL_SECONDS": "0.1",
        "BARGE_MIN_BATCH_WINDOW": "0",
    }
    env.pop("BARGE_FAILPOINT", None)
    if failpoint:
        env["BARGE_FAILPOINT"] = failpoint
    return subprocess.run(
        [sys.executable, "-m", "barge.cli", "run", str(path), "--ledger", str(ledger), "--json"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.parametrize("kind", ["anthropic", "openai"])
@pytest.mark.parametrize("failpoint", ["after-intent", "after-create", "mid-ingest"])
def test_sigkill_and_rerun_is_exactly_once(start_emulator: Factory, tmp_path: Path, kind: str, failpoint: str) -> None:
    emu = start_emulator({"batch": {"processingSeconds": 0.3}})
    path = manifest(tmp_path, kind, emu.url)
    ledger = tmp_path / "ledger.db"
    killed = barge_run(path, ledger, failpoint)
    assert killed.returncode == -9, killed.stderr
    done = barge_run(path, ledger)
    assert done.returncode == 0, done.stderr
    final = json.loads(done.stdout)
    assert final["phase"] == "Succeeded"

    batches = state(emu)["batches"]
    seen: dict[str, int] = {}
    for b in batches:
        for cid in b["custom_ids"]:
            seen[cid] = seen.get(cid, 0) + 1
    assert len(seen) == N_ITEMS
    assert set(seen.values()) == {1}, "an item went to the provider twice"
    assert len(batches) == N_ITEMS // SHARD, "exactly one batch per shard"

    results = [json.loads(x) for x in (tmp_path / "out" / "results.jsonl").read_text().splitlines()]
    assert sorted(r["id"] for r in results) == [f"i{n:03d}" for n in range(N_ITEMS)]
    assert not (tmp_path / "out" / "failures.jsonl").read_text()
    assert final["usage"]["outputTokens"] == sum(r["usage"]["output_tokens"] for r in results)
    assert final["usage"]["inputTokens"] == sum(r["usage"]["input_tokens"] for r in results)
    assert final["counts"]["succeeded"] == N_ITEMS


def test_invalid_manifest_exits_2(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "barge.dev/v1alpha1",
                "kind": "LLMBatchJob",
                "metadata": {"name": "bad"},
                "spec": {"provider": {"type": "anthropic"}, "input": {}, "output": {"url": "o/"}},
            }
        )
    )
    out = barge_run(path, tmp_path / "l.db")
    assert out.returncode == 2
    assert "exactly one of spec.input" in out.stderr or "model is required" in out.stderr
