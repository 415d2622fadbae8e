"""Every alert the chart ships links to a runbook section that exists on the built documentation site.

The chart's alerts carry `runbook_url` = `metrics.prometheusRule.runbookBaseURL` + the lower-cased alert name; by
default that base is the site's runbook page. This builds the site with mkdocs (as `make lint` does, --strict),
reads the ids of the runbook page's HTML, renders the PrometheusRule with helm (so the URLs are exactly what a
cluster gets), and names every alert whose anchor is missing. docs/runbooks.md must also give each alert its three
parts: what it means, how to confirm it (kubectl and PromQL), and what to do.
"""

from __future__ import annotations

import re
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest
import yaml
from tools import localcluster

from tests.conftest import REPO


class _Ids(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.ids: set[str] = set()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.ids.update(value for name, value in attrs if name == "id" and value)


def site_ids(site: Path, page: str) -> set[str]:
    parser = _Ids()
    parser.feed((site / page / "index.html").read_text())
    return parser.ids


def missing_runbooks(urls: dict[str, str], base: str, ids: set[str]) -> list[str]:
    """The alerts whose runbook_url is not `base` + an anchor the built page has."""
    return sorted(alert for alert, url in urls.items() if not url.startswith(base) or url.removeprefix(base) not in ids)


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("site")
    subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--quiet", "--site-dir", str(out)],
        cwd=REPO,
        check=True,
        env={"NO_MKDOCS_2_WARNING": "1", "PATH": "/usr/bin:/bin"},
    )
    return out


# Values that render the PrometheusRule with every optional alert group (the barge-gateway group needs the gateway).
EVERY_ALERT_GROUP = ("metrics.prometheusRule.enabled=true", "gateway.enabled=true")


def shipped_runbook_urls() -> dict[str, str]:
    helm = localcluster.build(argocd=False)["helm"]  # argocd is not needed to render the chart
    chart = str(REPO / "charts" / "barge")
    sets = [arg for value in EVERY_ALERT_GROUP for arg in ("--set", value)]
    out = subprocess.run(
        [str(helm), "template", "barge", chart, "-n", "barge-system", *sets],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    (rule,) = [d for d in yaml.safe_load_all(out) if d and d.get("kind") == "PrometheusRule"]
    groups: list[dict[str, Any]] = rule["spec"]["groups"]
    return {r["alert"]: r["annotations"]["runbook_url"] for g in groups for r in g["rules"]}


def alerts_in_the_rule_file() -> set[str]:
    """Every alert of charts/barge/files/alerts.yaml, whichever values render its group."""
    text = (REPO / "charts" / "barge" / "files" / "alerts.yaml").read_text()
    return {r["alert"] for g in yaml.safe_load(text)["groups"] for r in g["rules"]}


def test_the_rendered_rule_holds_every_alert_of_the_rule_file() -> None:
    # A group rendered only under a value EVERY_ALERT_GROUP does not set would escape the runbook checks below.
    assert set(shipped_runbook_urls()) == alerts_in_the_rule_file()
    assert {"BargeGatewayAbsent", "BargeGatewayErrors"} <= alerts_in_the_rule_file()


def runbook_base() -> str:
    site_url = yaml.safe_load((REPO / "mkdocs.yml").read_text())["site_url"]
    return f"{site_url.rstrip('/')}/runbooks/#"


def test_the_charts_default_runbook_base_is_the_sites_runbook_page() -> None:
    values = yaml.safe_load((REPO / "charts" / "barge" / "values.yaml").read_text())
    assert values["metrics"]["prometheusRule"]["runbookBaseURL"] == runbook_base()


def test_every_alert_has_a_runbook_section_on_the_built_site(site: Path) -> None:
    urls = shipped_runbook_urls()
    assert len(urls) >= 15
    missing = missing_runbooks(urls, runbook_base(), site_ids(site, "runbooks"))
    assert missing == [], f"alerts with no section in docs/runbooks.md (add '## <AlertName>' for each): {missing}"


def test_a_missing_section_is_named(site: Path) -> None:
    urls = {**shipped_runbook_urls(), "BargeNotDocumented": runbook_base() + "bargenotdocumented"}
    assert "BargeNotDocumented" in missing_runbooks(urls, runbook_base(), site_ids(site, "runbooks"))
    assert missing_runbooks({"BargeJobFailed": "https://elsewhere/#bargejobfailed"}, runbook_base(), set()) == [
        "BargeJobFailed"
    ]


def test_every_runbook_section_says_what_it_means_how_to_confirm_and_what_to_do() -> None:
    text = (REPO / "docs" / "runbooks.md").read_text()
    sections = dict(re.findall(r"^## (\w+)\n(.*?)(?=^## |\Z)", text, re.M | re.S))
    for alert in shipped_runbook_urls():
        body = sections.get(alert, "").strip()
        assert body.startswith("**Severity"), alert
        assert "```promql" in body, alert
        assert "```sh" in body, alert
        assert "What to do:" in body, alert
