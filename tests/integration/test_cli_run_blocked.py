"""`barge run` and `barge plan` on jobs that cannot go on without a person (issue 28, the newcomer's rough edges).

Before: a budgeted job on a model with no price printed `Pending: 0/0 done, 0 in flight ...` forever, a template
that never compiles did the same, and a job whose every item failed alike ended "0/20 with a result, 20 invalid,
0 failed" with the reason only in failures.jsonl. Each `barge run` here is bounded by a subprocess timeout: a run
that loops instead of stopping fails the test.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from barge.emulator.profile import load_profile
from barge.emulator.server import EmulatorThread

NEEDS_A_PERSON = 3


@pytest.fixture
def emu() -> Iterator[EmulatorThread]:
    with EmulatorThread(load_profile(None)) as running:
        yield running


def barge(*args: str, cwd: Path, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "BARGE_API_KEY": "k", "BARGE_POLL_SECONDS": "0.2"}
    env.pop("BARGE_PRICES", None)
    try:
        return subprocess.run(
            [sys.executable, "-m", "barge.cli", *args],
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout,
            cwd=cwd,
        )
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"`barge {' '.join(args)}` was still running after {timeout:g} s; stderr: {exc.stderr!r:.2000}")


def job(tmp_path: Path, url: str, *, items: int = 20, **spec: Any) -> str:
    (tmp_path / "in.jsonl").write_text("".join(json.dumps({"id": f"i{n}", "n": n}) + "\n" for n in range(items)))
    body: dict[str, Any] = {
        "provider": {"type": "openai", "model": "gpt-4o-mini", "secretRef": {"name": "k"}, "baseURL": f"{url}/v1"},
        "input": {"url": "in.jsonl"},
        "output": {"url": "out/"},
        "request": {"template": "item {{ n }}", "maxTokens": 20},
    }
    for key, value in spec.items():
        body[key] = {**body.get(key, {}), **value} if isinstance(value, dict) else value
    doc = {"apiVersion": "barge.dev/v1alpha1", "kind": "LLMBatchJob", "metadata": {"name": "j"}, "spec": body}
    (tmp_path / "job.yaml").write_text(yaml.safe_dump(doc))
    return "job.yaml"


def test_run_stops_when_a_budgeted_model_has_no_price(tmp_path: Path, emu: EmulatorThread) -> None:
    path = job(tmp_path, emu.url, provider={"model": "gpt-nobody-prices-this"}, budget={"maxCostUSD": "5"})
    out = barge("run", path, cwd=tmp_path)
    assert out.returncode == NEEDS_A_PERSON, out.stderr
    assert "PriceMissing" in out.stderr
    assert "spec.budget.price" in out.stderr
    assert "gpt-nobody-prices-this" in out.stderr


def test_run_json_stops_too_with_the_condition_in_the_object(tmp_path: Path, emu: EmulatorThread) -> None:
    path = job(tmp_path, emu.url, provider={"model": "gpt-nobody-prices-this"}, budget={"maxCostUSD": "5"})
    out = barge("run", path, "--json", cwd=tmp_path)
    assert out.returncode == NEEDS_A_PERSON, out.stderr
    final = json.loads(out.stdout)
    admitted = next(c for c in final["conditions"] if c["type"] == "Admitted")
    assert (admitted["status"], admitted["reason"]) == ("False", "PriceMissing")


def test_run_stops_when_the_template_never_compiles(tmp_path: Path, emu: EmulatorThread) -> None:
    path = job(tmp_path, emu.url, request={"template": "item {{ n "})
    out = barge("run", path, cwd=tmp_path)
    assert out.returncode == NEEDS_A_PERSON, out.stderr
    assert "TemplateError" in out.stderr
    assert "does not compile" in out.stderr


def test_run_summary_names_the_most_frequent_invalid_reason(tmp_path: Path, emu: EmulatorThread) -> None:
    path = job(tmp_path, emu.url, request={"template": "{{ n / 0 }}"})
    out = barge("run", path, "--json", cwd=tmp_path)
    assert out.returncode == 1, out.stderr
    final = json.loads(out.stdout)
    assert final["phase"] == "Failed"
    assert "20 invalid (template_error: template failed: ZeroDivisionError: division by zero x20)" in final["message"]


def test_plan_suggests_the_per_job_price_beside_the_price_table(tmp_path: Path, emu: EmulatorThread) -> None:
    path = job(tmp_path, emu.url, provider={"model": "gpt-nobody-prices-this"}, budget={"maxCostUSD": "5"})
    out = barge("plan", path, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    text = " ".join(out.stdout.split())  # rich wraps long lines
    assert "spec.budget.price" in text
    assert "BARGE_PRICES" in text
    assert "not admitted" in text


def test_run_without_an_api_key_or_on_a_pool_says_what_is_missing(tmp_path: Path, emu: EmulatorThread) -> None:
    """Operator-less runs have no Secret and no pool: each is an exit naming what to do (these held before)."""
    path = job(tmp_path, emu.url)
    env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY")}
    no_key = subprocess.run(
        [sys.executable, "-m", "barge.cli", "run", path],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
    )
    assert no_key.returncode != 0
    assert "BARGE_API_KEY" in no_key.stderr
    assert "OPENAI_API_KEY" in no_key.stderr
    pooled = job(tmp_path, emu.url, provider={"type": "pool", "poolRef": {"name": "gpu"}})
    on_pool = barge("run", pooled, cwd=tmp_path)
    assert on_pool.returncode != 0
    assert "needs the operator" in on_pool.stderr
