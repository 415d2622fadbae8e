"""FOCUS 1.2 export (#31.2): a batch job and a synchronous one run against the emulator with real SDK adapters and a
real ledger; `barge report focus` writes the CSV; every FOCUS 1.2 column and type is checked against the schema
shipped as test data (tests/integration/data/focus-1.2-columns.json, its source named inside), and the sums equal
the ledger's. `barge report` prints the same spend by tenant and model (rich table, and --format csv)."""

from __future__ import annotations

import csv
import json
import re
from datetime import UTC, datetime, timedelta
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from barge.batch import prices
from barge.batch.runner import JobRunner
from barge.cli.main import app
from barge.ledger import Ledger
from barge.providers.base import Usage
from barge.reports import export, focus
from tests.conftest import Factory
from tests.integration.test_engine import FAST, provider_for, run_to_end
from tests.integration.test_robustness_money import claims, job_of

SCHEMA = json.loads((Path(__file__).parent / "data" / "focus-1.2-columns.json").read_text())
KIND_INDEX = {"input": 0, "output": 1, "cache_read": 2, "cache_write": 3}


def problems(header: list[str], rows: list[dict[str, str]]) -> list[str]:
    """Every way the file breaks the FOCUS 1.2 schema (empty: it conforms)."""
    found = []
    names = {c["name"] for c in SCHEMA["columns"]}
    found += [f"missing column {n}" for n in sorted(names - set(header))]
    found += [f"unknown column {h} (custom ones start with x_)" for h in header if h not in names and h[:2] != "x_"]
    when = re.compile(SCHEMA["dateTimeFormat"])
    for n, row in enumerate(rows, start=2):
        for column in SCHEMA["columns"]:
            name, value = column["name"], row.get(column["name"], "")
            if value == "":
                if not column["allowsNulls"] and column["featureLevel"] in ("Mandatory", "Recommended"):
                    found.append(f"line {n}: {name} is null")
                continue
            kind = column["dataType"]
            if kind == "Decimal":
                try:
                    Decimal(value)
                except InvalidOperation:
                    found.append(f"line {n}: {name} {value!r} is not a decimal")
            elif kind == "DateTime" and not when.match(value):
                found.append(f"line {n}: {name} {value!r} is not ISO 8601 UTC")
            elif kind == "KeyValue":
                parsed = json.loads(value)
                if not isinstance(parsed, dict) or not all(isinstance(v, str) for v in parsed.values()):
                    found.append(f"line {n}: {name} is not a JSON object of strings")
            if "allowedValues" in column and value not in column["allowedValues"]:
                found.append(f"line {n}: {name} {value!r} is not one of {column['allowedValues']}")
        if not re.fullmatch(r"[A-Z]{3}", row.get("BillingCurrency", "")):
            found.append(f"line {n}: BillingCurrency is not ISO 4217")
        if row.get("ChargePeriodStart", "") >= row.get("ChargePeriodEnd", ""):
            found.append(f"line {n}: the charge period is empty")
    return found


def read(path: Path) -> tuple[list[str], list[dict[str, str]]]:
    with path.open(newline="") as handle:
        reader = csv.DictReader(handle)
        return list(reader.fieldnames or []), list(reader)


@pytest.fixture
async def ran(start_emulator: Factory, tmp_path: Path) -> tuple[Ledger, list[tuple[str, str]]]:
    """Two jobs of tenant t: claims on Anthropic's batch API, and tickets sent synchronously (deadline passed) to
    OpenAI."""
    emu = start_emulator()
    ledger = Ledger(str(tmp_path / "l.db"))
    table = prices.load()
    batch_job = job_of(tmp_path / "a", "anthropic", "claude-sonnet-4-6", claims(30, 300))
    past = (datetime.now(UTC) - timedelta(minutes=1)).isoformat()
    sync_job = job_of(tmp_path / "b", "openai", "gpt-4o-mini", claims(12, 200), deadline=past)
    for job in (batch_job, sync_job):
        runner = JobRunner(job, provider_for(job.spec.provider.type, emu.url), ledger, table, FAST)
        snap = await run_to_end(runner, limit=180)  # a loaded CI machine (two workers, builds beside) took over 60 s
        assert snap.phase == "Succeeded", snap
    return ledger, [(batch_job.key, "claude-sonnet-4-6"), (sync_job.key, "gpt-4o-mini")]


def ledger_cost(ledger: Ledger, jobs: list[tuple[str, str]]) -> tuple[Decimal, Decimal, list[int]]:
    """(billed, list, tokens per kind) as the ledger's own usage totals say."""
    table = prices.load()
    billed = listed = Decimal(0)
    tokens = [0, 0, 0, 0]
    for key, model in jobs:
        batch, sync = ledger.usage(key)
        billed += table.cost(model, Usage(*batch), batch=True) + table.cost(model, Usage(*sync), batch=False)
        listed += table.cost(model, Usage(*batch), batch=False) + table.cost(model, Usage(*sync), batch=False)
        tokens = [t + b + s for t, b, s in zip(tokens, batch, sync, strict=True)]
    return billed, listed, tokens


def test_focus_file_conforms_to_focus_1_2_and_sums_to_the_ledger(
    ran: tuple[Ledger, list[tuple[str, str]]], tmp_path: Path
) -> None:
    ledger, jobs = ran
    out = tmp_path / "export" / "focus.csv"
    result = CliRunner().invoke(
        app,
        ["report", "focus", "--ledger", ledger.url.removeprefix("sqlite:///"), "--from", "2026-01-01", "--out",
         str(out)],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    header, rows = read(out)
    assert problems(header, rows) == []
    assert {r["x_FocusVersion"] for r in rows} == {"1.2"}
    assert {r["ProviderName"] for r in rows} == {"Anthropic", "OpenAI"}
    billed, listed, tokens = ledger_cost(ledger, jobs)
    assert billed > 0
    assert sum(Decimal(r["BilledCost"]) for r in rows) == billed
    assert sum(Decimal(r["EffectiveCost"]) for r in rows) == billed
    assert sum(Decimal(r["ListCost"]) for r in rows) == listed
    assert listed - billed == sum(Decimal(r["ListCost"]) - Decimal(r["EffectiveCost"]) for r in rows) > 0
    for kind, n in KIND_INDEX.items():
        assert sum(int(r["ConsumedQuantity"]) for r in rows if r["x_TokenKind"] == kind) == tokens[n], kind
    tags = [json.loads(r["Tags"]) for r in rows]
    assert {t["barge.dev/tenant"] for t in tags} == {"t"}
    assert {t["barge.dev/job"] for t in tags} == {k.rsplit("/", 1)[0] for k, _ in jobs}
    # one row per job, model, provider, charge period and token kind: none twice
    keys = [(r["ResourceId"], r["SkuId"], r["ProviderName"], r["ChargePeriodStart"], r["x_TokenKind"]) for r in rows]
    assert len(keys) == len(set(keys))
    # a day's charge period folds the hours: the same sums
    daily = export.focus_rows(ledger, prices.load(), 0, datetime.now(UTC).timestamp() + 3600, period="day")
    assert sum(Decimal(r["BilledCost"]) for r in daily) == billed
    assert {r["ChargePeriodStart"][11:] for r in daily} == {"00:00:00Z"}
    # another tenant's export holds none of these rows
    assert export.focus_rows(ledger, prices.load(), 0, 2**40, tenant="u") == []


def test_the_schema_check_can_fail(ran: tuple[Ledger, list[tuple[str, str]]]) -> None:
    ledger, _ = ran
    rows = export.focus_rows(ledger, prices.load(), 0, 2**40)
    header = list(focus.COLUMNS)
    assert problems(header, rows) == []
    broken = [dict(r) for r in rows]
    broken[0]["ChargeCategory"] = "Usages"
    broken[1]["BilledCost"] = ""
    broken[2]["ChargePeriodStart"] = "2026-12-01 10:00"
    found = problems([h for h in header if h != "ServiceName"] + ["Team"], broken)
    assert "missing column ServiceName" in found
    assert "unknown column Team (custom ones start with x_)" in found
    assert any("ChargeCategory 'Usages'" in p for p in found)
    assert "line 3: BilledCost is null" in found
    assert any("ChargePeriodStart '2026-12-01 10:00' is not ISO 8601 UTC" in p for p in found)


def test_report_prints_spend_by_tenant_and_model(ran: tuple[Ledger, list[tuple[str, str]]]) -> None:
    ledger, jobs = ran
    path = ledger.url.removeprefix("sqlite:///")
    table = CliRunner().invoke(app, ["report", "--ledger", path, "--from", "2026-01-01"], env={"COLUMNS": "200"})
    assert table.exit_code == 0, table.output
    assert "claude-sonnet-4-6" in table.output
    assert "gpt-4o-mini" in table.output
    as_csv = CliRunner().invoke(app, ["report", "--ledger", path, "--from", "2026-01-01", "--format", "csv"])
    assert as_csv.exit_code == 0, as_csv.output
    lines = list(csv.DictReader(as_csv.output.splitlines()))
    billed, listed, _ = ledger_cost(ledger, jobs)
    assert [(r["tenant"], r["model"]) for r in lines] == [("t", "claude-sonnet-4-6"), ("t", "gpt-4o-mini")]
    assert sum(Decimal(r["cost_usd"]) for r in lines) == pytest.approx(billed, abs=Decimal("0.000002"))
    assert sum(Decimal(r["list_usd"]) for r in lines) == pytest.approx(listed, abs=Decimal("0.000002"))
    bad = CliRunner().invoke(app, ["report", "--ledger", path, "--from", "2026-12-02", "--to", "2026-12-01"])
    assert bad.exit_code != 0


def test_the_operator_timer_writes_yesterdays_file(tmp_path: Path) -> None:
    """What the operator's daily timer runs (operator/focus_timer.py), with the config the chart's
    operator.reports.focus values give it (rendered here by helm)."""
    from types import SimpleNamespace

    from barge.config import OperatorConfig
    from barge.ledger import spend
    from barge.operator import focus_timer
    from tests.integration.test_alerts import render_chart

    (deployment,) = [
        d
        for d in render_chart(
            f"operator.reports.focus.url=file://{tmp_path}/finops", "operator.reports.focus.period=day"
        )
        if d["kind"] == "Deployment"
    ]
    env = {e["name"]: e.get("value") for e in deployment["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env["BARGE_FOCUS_EXPORT_URL"] == f"file://{tmp_path}/finops"
    assert env["BARGE_FOCUS_EXPORT_PERIOD"] == "day"
    assert env["BARGE_FOCUS_EXPORT_SECONDS"] == "86400"
    (default,) = [d for d in render_chart() if d["kind"] == "Deployment"]
    assert "BARGE_FOCUS_EXPORT_URL" not in str(default)

    ledger = Ledger(str(tmp_path / "l.db"))
    ledger.ensure_job("claims/nightly/u1", "h", "claims-team", "claude-sonnet-4-6", provider="anthropic", schedule="s")
    now = datetime(2026, 12, 2, 3, 0, tzinfo=UTC).timestamp()
    with ledger.engine.begin() as conn:
        cursor = conn.connection.dbapi_connection.cursor()  # type: ignore[union-attr]
        for hour, via in ((1, "batch"), (13, "batch"), (13, "sync")):  # 1 December, twice in one hour
            when = datetime(2026, 12, 1, hour, 30, tzinfo=UTC).timestamp()
            spend.record(cursor, False, "claims/nightly/u1", via, None, (10, 1000, 200, 0, 0), when)
        today = datetime(2026, 12, 2, 1, 0, tzinfo=UTC).timestamp()  # not yesterday: not in the file
        spend.record(cursor, False, "claims/nightly/u1", "batch", None, (1, 5, 5, 0, 0), today)
    env_config = {"BARGE_FOCUS_EXPORT_URL": env["BARGE_FOCUS_EXPORT_URL"], "BARGE_FOCUS_EXPORT_PERIOD": "day"}
    with pytest.MonkeyPatch.context() as patch:
        for name, value in env_config.items():
            patch.setenv(name, value)
        config = OperatorConfig.from_env()
    ctx: Any = SimpleNamespace(config=config, ledger=ledger, prices=prices.load())
    url, written = focus_timer.export_once(ctx, now)
    assert url == f"file://{tmp_path}/finops/focus-1.2-2026-12-01.csv"
    header, rows = read(tmp_path / "finops" / "focus-1.2-2026-12-01.csv")
    assert problems(header, rows) == []
    assert written == len(rows) == 2  # input and output, one day
    assert {r["ChargePeriodStart"] for r in rows} == {"2026-12-01T00:00:00Z"}
    assert {r["ConsumedQuantity"] for r in rows} == {"3000", "600"}
    assert json.loads(rows[0]["Tags"])["barge.dev/schedule"] == "s"
    assert focus_timer.export_once(ctx, now) == (url, 2)  # again: the same file, whole
