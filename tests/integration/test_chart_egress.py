"""REVIEW-3 L8: the chart's NetworkPolicy could only fence ingress ("Egress stays open"), so an SSRF bypass had
nothing behind it. With networkPolicy.egress.enabled the operator may reach DNS, the API server, the ledger,
pools and Prometheus, and 443 only on public addresses: no private, link-local or metadata address."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from tools import localcluster

from tests.integration.test_chart import CHART, _run, helm_home, one, render  # noqa: F401 (helm_home: autouse)


@pytest.fixture(scope="module")
def helm() -> Path:
    return localcluster.build(argocd=False)["helm"]


@pytest.fixture
def tmp(tmp_path: Path) -> Path:
    return tmp_path


EGRESS = {
    "enabled": True,
    "egress": {"enabled": True, "apiServerCIDRs": ["10.0.0.10/32"], "ledgerCIDRs": ["10.1.2.0/24"]},
}


def ports(rule: dict[str, Any]) -> set[int]:
    return {int(p["port"]) for p in rule["ports"]}


def test_without_egress_the_policy_stays_ingress_only(helm: Path, tmp: Path) -> None:
    policy = one(render(helm, tmp, {"networkPolicy": {"enabled": True}}), "NetworkPolicy")
    assert policy["spec"]["policyTypes"] == ["Ingress"]
    assert "egress" not in policy["spec"]


def test_egress_allows_what_the_operator_needs_and_no_private_address_on_443(helm: Path, tmp: Path) -> None:
    policy = one(render(helm, tmp, {"networkPolicy": EGRESS}), "NetworkPolicy")
    assert policy["spec"]["policyTypes"] == ["Ingress", "Egress"]
    rules = policy["spec"]["egress"]
    by_port = {frozenset(ports(r)): r for r in rules}
    assert by_port[frozenset({53})]["to"][0]["podSelector"]["matchLabels"] == {"k8s-app": "kube-dns"}
    assert by_port[frozenset({443, 6443})]["to"] == [{"ipBlock": {"cidr": "10.0.0.10/32"}}]
    assert by_port[frozenset({5432})]["to"] == [{"ipBlock": {"cidr": "10.1.2.0/24"}}]
    assert by_port[frozenset({8000, 9090})]["to"] == [{"namespaceSelector": {}}]
    public = by_port[frozenset({443})]["to"]
    v4 = next(b["ipBlock"] for b in public if b["ipBlock"]["cidr"] == "0.0.0.0/0")
    for private in ("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "169.254.0.0/16", "100.64.0.0/10"):
        assert private in v4["except"], f"443 to {private} (cluster, metadata) stays open"
    v6 = next(b["ipBlock"] for b in public if b["ipBlock"]["cidr"] == "::/0")
    assert {"fc00::/7", "fe80::/10", "64:ff9b::/96"} <= set(v6["except"])


def test_egress_through_a_proxy_only_and_extra_rules(helm: Path, tmp: Path) -> None:
    extra = {"to": [{"ipBlock": {"cidr": "10.9.0.0/16"}}], "ports": [{"port": 9000, "protocol": "TCP"}]}
    values = {"networkPolicy": {**EGRESS, "egress": {**EGRESS["egress"], "providerCIDRs": ["10.5.0.7/32"]}}}
    values["networkPolicy"]["egress"]["extra"] = [extra]
    rules = one(render(helm, tmp, values), "NetworkPolicy")["spec"]["egress"]
    https = [r for r in rules if ports(r) == {443}]
    assert https == [{"to": [{"ipBlock": {"cidr": "10.5.0.7/32"}}], "ports": [{"port": 443, "protocol": "TCP"}]}]
    assert rules[-1] == extra


def test_egress_without_the_api_server_is_refused(helm: Path, tmp: Path) -> None:
    out = _run(
        helm,
        "template",
        "barge",
        str(CHART),
        values={"networkPolicy": {"enabled": True, "egress": {"enabled": True}}},
        tmp=tmp,
    )
    assert out.returncode != 0
    assert "apiServerCIDRs" in out.stderr
