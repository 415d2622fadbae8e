"""The site's generated reference pages (barge.cli.reference) say what the code has: every CRD field, every command,
every series an alert or the dashboard reads, every chart value."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import typer
import yaml

from barge.api.crd import all_crds
from barge.cli import reference
from barge.cli.main import app

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "charts" / "barge"


def _leaves(node: dict[str, Any], path: str) -> list[str]:
    out = []
    for name, sub in node.get("properties", {}).items():
        out.append(f"{path}.{name}")
        out += _leaves(sub, f"{path}.{name}")
        if "items" in sub:
            out += _leaves(sub["items"], f"{path}.{name}[]")
    return out


def test_every_crd_field_and_cel_rule_is_on_the_crd_page() -> None:
    page = reference.crds_page()
    for crd in all_crds().values():
        schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
        fields = _leaves({"properties": {k: schema["properties"][k] for k in ("spec", "status")}}, "")
        assert len(fields) > 20
        missing = [f for f in fields if f"| `{f}` |" not in page]
        assert missing == [], f"{crd['spec']['names']['kind']}: {missing[:5]}"
    assert "spec.request is immutable" in page or "immutable after creation" in page


def test_every_command_and_option_is_on_the_cli_page() -> None:
    page = reference.cli_page(app)
    root = typer.main.get_command(app)
    for name, command in root.commands.items():  # type: ignore[attr-defined]
        assert f"## `barge {name}`" in page
        for param in command.params:
            if param.param_type_name == "option" and not param.hidden:
                assert f"`{param.opts[0]}`" in page, (name, param.opts)


def test_every_series_an_alert_or_the_dashboard_reads_is_on_the_metrics_page() -> None:
    page = reference.metrics_page()
    listed = set(re.findall(r"^\| `(barge_\w+)` \|", page, re.M))
    text = (CHART / "files" / "alerts.yaml").read_text() + (CHART / "files" / "dashboards" / "barge.json").read_text()
    used = set(re.findall(r"\bbarge_[a-z_]+\b(?!\*)", text))  # `barge_admission_queued_*` names a family
    # A histogram is read through its _bucket/_sum/_count series.
    used = {re.sub(r"_(bucket|sum|count)$", "", name) for name in used}
    assert used, "no series found in the alerts and the dashboard"
    assert sorted(used - listed) == []


def test_every_chart_value_is_on_the_values_page() -> None:
    schema = json.loads((CHART / "values.schema.json").read_text())
    page = reference.values_page(schema, yaml.safe_load((CHART / "values.yaml").read_text()))
    assert "| `metrics.prometheusRule.runbookBaseURL` |" in page
    assert "| `image.repository` |" in page
