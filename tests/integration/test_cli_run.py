"""`barge plan` and `barge run` as a user runs them: the 6,000-claim example under the example fault profile,
and a file full of bad lines. The emulator runs in the test process with the example's own profile."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import yaml

from barge.cli.demo_data import claims
from barge.emulator.profile import load_profile
from barge.emulator.server import EmulatorThread
from tests.conftest import REPO, state

EXAMPLE = REPO / "examples" / "claims"


def barge(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "BARGE_API_KEY": "k", "BARGE_POLL_SECONDS": "0.5"}
    return subprocess.run(
        [sys.executable, "-m", "barge.cli", *args], env=env, capture_output=True, text=True, timeout=300, cwd=cwd
    )


def example_manifest(tmp_path: Path, url: str, count: int) -> Path:
    (tmp_path / "claims.jsonl").write_bytes(b"".join(line + b"\n" for line in claims(count)))
    doc = yaml.safe_load((EXAMPLE / "claims-local.yaml").read_text())
    doc["spec"]["provider"]["baseURL"] = url
    path = tmp_path / "claims-local.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def test_the_6000_claim_example_succeeds_under_faults(tmp_path: Path) -> None:
    with EmulatorThread(load_profile(EXAMPLE / "emulator-faults.yaml")) as emu:
        path = example_manifest(tmp_path, emu.url, 6000)
        out = barge("run", str(path), "--ledger", str(tmp_path / "ledger.db"), "--json")
        assert out.returncode == 0, out.stderr
        final = json.loads(out.stdout)
        batches = state(emu)["batches"]
    assert final["phase"] == "Succeeded"
    results = (tmp_path / "results" / "results.jsonl").read_text().splitlines()
    failures = (tmp_path / "results" / "failures.jsonl").read_text().splitlines()
    assert len(results) + len(failures) == 6000
    ids = sorted(json.loads(x)["id"] for x in results + failures)
    assert ids == sorted(str(8_800_000 + n) for n in range(6000))
    assert final["counts"]["total"] == 6000
    assert final["counts"]["failed"] == 0
    first_shard = [b for b in batches if len(b["custom_ids"]) == 6000]
    assert len(first_shard) == 1, "the duplicate-create trap in the profile must not duplicate the batch"
    assert float(final["usage"]["costUSD"]) > 0
    assert float(final["usage"]["savedUSD"]) == float(final["usage"]["costUSD"])


def test_plan_prints_shards_costs_and_invalid_lines(tmp_path: Path) -> None:
    path = example_manifest(tmp_path, "http://127.0.0.1:1", 500)
    with (tmp_path / "claims.jsonl").open("ab") as fh:
        fh.write(b"{broken\n")
    out = barge("plan", str(path))
    assert out.returncode == 0, out.stderr
    assert "shard 0: 500 requests" in out.stdout
    assert "line 501: malformed_json" in out.stdout
    assert "$" in out.stdout
    # the job's row of the providers table, with the limits the sharder used
    words = " ".join(out.stdout.split())  # rich wraps at the terminal's width
    assert "provider anthropic: at most 100,000 requests and 256 MB per shard; batch price 0.5 x list" in words
    assert "create idempotent: no" in words


def test_bad_input_file_every_line_accounted(tmp_path: Path) -> None:
    lines = [
        b'{"id": "a", "text": "ok"}',
        b"{nope",
        b'{"text": "no id"}',
        b'{"id": "a", "text": "dup"}',
        b'{"id": {"x": 1}, "text": "object id"}',
        b"",
        b'{"id": "b"}',
        b'{"id": "c", "text": "fine"}\r',
    ]
    (tmp_path / "in.jsonl").write_bytes(b"\xef\xbb\xbf" + b"\n".join(lines) + b"\n")
    with EmulatorThread(load_profile(None)) as emu:
        (tmp_path / "job.yaml").write_text(
            yaml.safe_dump(
                {
                    "apiVersion": "barge.dev/v1alpha1",
                    "kind": "LLMBatchJob",
                    "metadata": {"name": "bad-input"},
                    "spec": {
                        "provider": {
                            "type": "openai",
                            "model": "gpt-4o-mini",
                            "secretRef": {"name": "k"},
                            "baseURL": f"{emu.url}/v1",
                        },
                        "input": {"url": "in.jsonl"},
                        "output": {"url": "out/"},
                        "successRatio": "0.25",
                        "request": {"template": "{{ text }}", "maxTokens": 20},
                    },
                }
            )
        )
        out = barge("run", "job.yaml", "--json", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    ok = [json.loads(x) for x in (tmp_path / "out" / "results.jsonl").read_text().splitlines()]
    bad = [json.loads(x) for x in (tmp_path / "out" / "failures.jsonl").read_text().splitlines()]
    assert sorted(r["id"] for r in ok) == ["a", "c"]
    assert sorted(f["line"] for f in bad) == [2, 3, 4, 5, 6, 7]
    assert {f["error_type"] for f in bad} == {
        "malformed_json",
        "missing_id",
        "duplicate_id",
        "bad_id",
        "empty_line",
        "template_error",
    }
    assert all(f["status"] == "invalid" and f["reason"] for f in bad)


def test_run_takes_the_item_limit_the_operator_takes_from_its_policy(tmp_path: Path) -> None:
    """`barge run --max-items` is the policy's ledger.maxItemsPerJob for a local run: an input one line longer is
    refused whole (exit 3, Admitted=False ItemLimit naming the limit), at the limit it runs."""
    with EmulatorThread(load_profile(EXAMPLE / "emulator-faults.yaml")) as emu:
        path = example_manifest(tmp_path, emu.url, 6)
        over = barge("run", str(path), "--ledger", str(tmp_path / "over.db"), "--json", "--max-items", "5")
        assert over.returncode == 3, over.stderr
        admitted = next(c for c in json.loads(over.stdout)["conditions"] if c["type"] == "Admitted")
        assert admitted["reason"] == "ItemLimit"
        assert "more than 5 lines" in admitted["message"]
        fits = barge("run", str(path), "--ledger", str(tmp_path / "fits.db"), "--json", "--max-items", "6")
        assert fits.returncode == 0, fits.stderr
        assert json.loads(fits.stdout)["counts"]["total"] == 6
    refused = barge("run", str(path), "--ledger", str(tmp_path / "x.db"), "--max-items", "0")
    assert refused.returncode == 2  # typer's usage error: at least 1
