"""Reconciliation (#31.4) as an admin runs it: small jobs through `barge run` on Anthropic's and OpenAI's batch APIs
against the emulator, then `barge report reconcile` against the emulator's admin usage and cost reports. When the
emulator bills what it processed the difference is 0 for both providers; told to bill 10% more
(`billing.overchargeRatio: 1.1`) the table shows that difference, the CSV carries it and the command exits 1."""

from __future__ import annotations

import csv
import io
import os
import time
from decimal import Decimal
from pathlib import Path

import yaml
from typer.testing import CliRunner

from barge.cli.demo_data import claims
from barge.cli.main import app
from barge.emulator.profile import parse_profile
from barge.emulator.server import EmulatorThread
from tests.integration.test_cli_run import barge

DAY = 86400


def manifest(tmp_path: Path, name: str, provider: str, model: str, url: str, count: int) -> Path:
    folder = tmp_path / name
    folder.mkdir()
    (folder / "claims.jsonl").write_bytes(b"".join(line + b"\n" for line in claims(count)))
    doc = {
        "apiVersion": "barge.dev/v1alpha1",
        "kind": "LLMBatchJob",
        "metadata": {"name": name, "namespace": "claims"},
        "spec": {
            "tenant": "claims-team",
            "provider": {"type": provider, "model": model, "secretRef": {"name": "k"}, "baseURL": url},
            "input": {"url": "claims.jsonl", "idField": "id"},
            "request": {"template": "Claim {{ id }}: {{ text }}", "maxTokens": 100},
            "output": {"url": "results/"},
        },
    }
    path = folder / "job.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def run_jobs(tmp_path: Path, ratio: float) -> tuple[str, EmulatorThread]:
    """Both jobs through `barge run` on one ledger; the emulator is left running (stopped by the caller)."""
    profile = parse_profile({"batch": {"processingSeconds": 0.4}, "billing": {"overchargeRatio": ratio}})
    emu = EmulatorThread(profile).start()
    ledger = str(tmp_path / "ledger.db")
    for name, provider, model, url in (
        ("claims-a", "anthropic", "claude-sonnet-4-6", emu.url),
        ("claims-o", "openai", "gpt-4o-mini", f"{emu.url}/v1"),
    ):
        out = barge("run", str(manifest(tmp_path, name, provider, model, url, 40)), "--ledger", ledger, "--json")
        assert out.returncode == 0, out.stderr
    return ledger, emu


def reconcile(emu: EmulatorThread, ledger: str, *extra: str) -> tuple[int, str]:
    today = time.strftime("%Y-%m-%d", time.gmtime())
    tomorrow = time.strftime("%Y-%m-%d", time.gmtime(time.time() + DAY))
    env = {
        "OPENAI_ADMIN_KEY": "sk-admin-test",
        "ANTHROPIC_ADMIN_KEY": "sk-ant-admin-test",
        "OPENAI_BASE_URL": f"{emu.url}/v1",
        "ANTHROPIC_BASE_URL": emu.url,
        "COLUMNS": "160",
    }
    args = ["report", "reconcile", "--ledger", ledger, "--from", today, "--to", tomorrow, *extra]
    result = CliRunner().invoke(app, args, env=env)
    return result.exit_code, result.output


def rows(text: str) -> list[dict[str, str]]:
    return list(csv.DictReader(io.StringIO(text)))


def test_exact_bills_reconcile_to_zero(tmp_path: Path) -> None:
    ledger, emu = run_jobs(tmp_path, 1.0)
    try:
        code, table = reconcile(emu, ledger)
        code_csv, text = reconcile(emu, ledger, "--format", "csv")
    finally:
        emu.stop()
    assert code == 0, table
    assert "Reconciliation" in table
    assert code_csv == 0
    lines = rows(text)
    assert [r["provider"] for r in lines] == ["anthropic", "openai"]
    for r in lines:
        assert Decimal(r["barge_usd"]) > 0
        assert Decimal(r["difference_usd"]) == 0, r
        assert r["barge_tokens"] == r["provider_tokens"], r


def test_a_planted_overcharge_shows_and_fails(tmp_path: Path) -> None:
    ledger, emu = run_jobs(tmp_path, 1.1)
    try:
        at_default = reconcile(emu, ledger)
        code, table = reconcile(emu, ledger, "--provider", "anthropic", "--threshold", "0.0001")
        code_csv, text = reconcile(emu, ledger, "--format", "csv", "--threshold", "0.0001")
    finally:
        emu.stop()
    print(table)
    assert at_default[0] == 0, at_default[1]  # 10% of a cent or so: under the default $0.01 a day
    assert code == 1, table
    assert "anthropic" in table
    assert "openai" not in table  # --provider anthropic only
    assert code_csv == 1
    for r in rows(text):
        barge_usd, provider_usd = Decimal(r["barge_usd"]), Decimal(r["provider_usd"])
        assert barge_usd > 0
        assert abs(provider_usd - barge_usd * Decimal("1.1")) <= Decimal("0.000002"), r  # money: 6 places
        assert Decimal(r["difference_usd"]) > 0
        assert r["barge_tokens"] == r["provider_tokens"], r  # the same tokens, billed differently


def test_no_admin_key_is_refused(tmp_path: Path) -> None:
    for var in ("OPENAI_ADMIN_KEY", "ANTHROPIC_ADMIN_KEY"):
        assert var not in os.environ
    result = CliRunner().invoke(app, ["report", "reconcile", "--ledger", str(tmp_path / "l.db")])
    assert result.exit_code == 2
    assert "no admin key" in result.output
