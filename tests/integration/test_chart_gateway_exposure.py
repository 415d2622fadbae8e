"""The gateway's optional exposure and monitoring in the chart, rendered by the real helm: Ingress, HTTPRoute, TLS
from a Secret, NetworkPolicy and PodMonitor, each absent until asked for, each carrying the values given, and the
schema refusing a value of the wrong type."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.integration.test_chart_gateway import helm, render  # noqa: F401 - helm is a fixture

ON = "gateway.enabled=true"
EVERYTHING = (
    ON,
    "gateway.tls.secretName=gateway-cert",
    "gateway.ingress.enabled=true",
    "gateway.httpRoute.enabled=true",
    "gateway.httpRoute.parentRefs[0].name=public",
    "gateway.networkPolicy.enabled=true",
    "gateway.networkPolicy.apiFrom[0].namespaceSelector.matchLabels.team=a",
    "metrics.serviceMonitor.enabled=true",
)


def gateway_docs(docs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {d["kind"]: d for d in docs if d["metadata"]["name"] == "barge-gateway"}


def container(objs: dict[str, dict[str, Any]]) -> dict[str, Any]:
    return objs["Deployment"]["spec"]["template"]["spec"]["containers"][0]  # type: ignore[no-any-return]


@pytest.mark.parametrize("gateway", [False, True])
def test_nothing_is_exposed_or_monitored_until_asked(helm: Path, gateway: bool) -> None:  # noqa: F811
    sets = [ON] if gateway else [s for s in EVERYTHING if s != ON]  # every exposure asked, the gateway off
    objs = gateway_docs(render(helm, *sets))
    assert not {"Ingress", "HTTPRoute", "NetworkPolicy", "PodMonitor"} & set(objs)
    if gateway:
        c = container(objs)
        assert not any(a.startswith("--tls") for a in c["args"])
        assert c["readinessProbe"]["httpGet"]["scheme"] == "HTTP"
        assert objs["Service"]["spec"]["ports"][0]["appProtocol"] == "http"


def test_the_metrics_port_is_a_container_port_the_podmonitor_scrapes_and_never_a_service_port(
    helm: Path,  # noqa: F811
) -> None:
    docs = render(
        helm,
        ON,
        "gateway.metricsPort=9191",
        "metrics.serviceMonitor.enabled=true",
        "metrics.serviceMonitor.additionalLabels.release=kps",
        "metrics.serviceMonitor.interval=15s",
    )
    objs = gateway_docs(docs)
    c = container(objs)
    env = {e["name"]: e.get("value") for e in c["env"]}
    assert env["BARGE_GATEWAY_METRICS_PORT"] == "9191"
    assert {"name": "metrics", "containerPort": 9191, "protocol": "TCP"} in c["ports"]
    assert [p["targetPort"] for p in objs["Service"]["spec"]["ports"]] == ["http"]  # an Ingress never reaches it
    monitor = objs["PodMonitor"]["spec"]
    pod_labels = objs["Deployment"]["spec"]["template"]["metadata"]["labels"]
    assert monitor["selector"]["matchLabels"].items() <= pod_labels.items()
    assert monitor["podMetricsEndpoints"] == [{"port": "metrics", "path": "/metrics", "interval": "15s"}]
    assert monitor["namespaceSelector"] == {"matchNames": ["barge-system"]}
    assert objs["PodMonitor"]["metadata"]["labels"]["release"] == "kps"
    operator_pods = next(d for d in docs if d["kind"] == "PodMonitor" and d["metadata"]["name"] == "barge-workers")
    assert not operator_pods["spec"]["selector"]["matchLabels"].items() <= pod_labels.items()


def test_tls_mounts_the_secret_and_serves_https(helm: Path) -> None:  # noqa: F811
    objs = gateway_docs(render(helm, ON, "gateway.tls.secretName=gateway-cert"))
    c = container(objs)
    assert c["args"][-2:] == ["--tls-cert=/etc/barge/tls/tls.crt", "--tls-key=/etc/barge/tls/tls.key"]
    assert {"name": "tls", "mountPath": "/etc/barge/tls", "readOnly": True} in c["volumeMounts"]
    volumes = {v["name"]: v for v in objs["Deployment"]["spec"]["template"]["spec"]["volumes"]}
    assert volumes["tls"]["secret"] == {"secretName": "gateway-cert", "defaultMode": 0o440}
    assert c["livenessProbe"]["httpGet"]["scheme"] == c["readinessProbe"]["httpGet"]["scheme"] == "HTTPS"
    assert objs["Service"]["spec"]["ports"][0]["appProtocol"] == "https"


def test_the_ingress_carries_class_hosts_paths_annotations_and_tls(helm: Path) -> None:  # noqa: F811
    objs = gateway_docs(
        render(
            helm,
            ON,
            "gateway.ingress.enabled=true",
            "gateway.ingress.className=nginx",
            "gateway.ingress.hosts={batches.example.com,llm.example.com}",
            "gateway.ingress.annotations.nginx\\.ingress\\.kubernetes\\.io/proxy-body-size=250m",
            "gateway.ingress.tls[0].secretName=batches-cert",
            "gateway.ingress.tls[0].hosts={batches.example.com}",
            "gateway.service.port=8443",
        )
    )
    ingress = objs["Ingress"]
    assert ingress["metadata"]["annotations"] == {"nginx.ingress.kubernetes.io/proxy-body-size": "250m"}
    spec = ingress["spec"]
    assert spec["ingressClassName"] == "nginx"
    assert spec["tls"] == [{"secretName": "batches-cert", "hosts": ["batches.example.com"]}]
    assert [r["host"] for r in spec["rules"]] == ["batches.example.com", "llm.example.com"]
    backend = {"service": {"name": "barge-gateway", "port": {"number": 8443}}}
    for rule in spec["rules"]:
        assert rule["http"]["paths"] == [{"path": "/v1", "pathType": "Prefix", "backend": backend}]
    assert objs["Service"]["spec"]["ports"][0]["port"] == 8443


def test_an_ingress_without_hosts_is_one_rule_for_every_host(helm: Path) -> None:  # noqa: F811
    objs = gateway_docs(render(helm, ON, "gateway.ingress.enabled=true", "gateway.ingress.paths[0].path=/v1/"))
    (rule,) = objs["Ingress"]["spec"]["rules"]
    assert "host" not in rule
    assert rule["http"]["paths"][0]["path"] == "/v1/"
    assert "ingressClassName" not in objs["Ingress"]["spec"]
    assert "tls" not in objs["Ingress"]["spec"]


def test_the_httproute_attaches_to_its_parents_with_the_hostnames(helm: Path) -> None:  # noqa: F811
    objs = gateway_docs(
        render(
            helm,
            ON,
            "gateway.httpRoute.enabled=true",
            "gateway.httpRoute.parentRefs[0].name=public",
            "gateway.httpRoute.parentRefs[0].namespace=gateway-system",
            "gateway.httpRoute.parentRefs[0].sectionName=https",
            "gateway.httpRoute.hostnames={batches.example.com}",
        )
    )
    route = objs["HTTPRoute"]
    assert route["apiVersion"] == "gateway.networking.k8s.io/v1"
    spec = route["spec"]
    parent = {"group": "gateway.networking.k8s.io", "kind": "Gateway", "name": "public"}
    assert spec["parentRefs"] == [{**parent, "namespace": "gateway-system", "sectionName": "https"}]
    assert spec["hostnames"] == ["batches.example.com"]
    assert spec["rules"] == [
        {
            "matches": [{"path": {"type": "PathPrefix", "value": "/v1"}}],
            "backendRefs": [{"name": "barge-gateway", "port": 80}],
        }
    ]


def test_the_networkpolicy_admits_the_api_port_from_apifrom_and_metrics_from_the_monitoring_namespaces(
    helm: Path,  # noqa: F811
) -> None:
    objs = gateway_docs(
        render(
            helm,
            ON,
            "gateway.networkPolicy.enabled=true",
            "gateway.networkPolicy.apiFrom[0].namespaceSelector.matchLabels.barge\\.dev/gateway-clients=open",
            "gateway.networkPolicy.apiFrom[1].namespaceSelector.matchLabels.kubernetes\\.io/metadata\\.name=ingress",
            "gateway.networkPolicy.apiFrom[1].podSelector.matchLabels.app=controller",
            "gateway.networkPolicy.metricsFromNamespaceSelector.matchLabels.kubernetes\\.io/metadata\\.name=prom",
        )
    )
    spec = objs["NetworkPolicy"]["spec"]
    assert spec["podSelector"]["matchLabels"] == objs["Deployment"]["spec"]["selector"]["matchLabels"]
    assert spec["policyTypes"] == ["Ingress"]
    api, metrics = spec["ingress"]
    assert api["ports"] == [{"port": "http", "protocol": "TCP"}]
    assert api["from"] == [
        {"namespaceSelector": {"matchLabels": {"barge.dev/gateway-clients": "open"}}},
        {
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "ingress"}},
            "podSelector": {"matchLabels": {"app": "controller"}},
        },
    ]
    assert metrics == {
        "ports": [{"port": "metrics", "protocol": "TCP"}],
        "from": [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "prom"}}}],
    }
    ports = {p["name"] for p in container(objs)["ports"]}
    assert ports == {"http", "metrics"}  # the named ports the policy admits exist on the pod


def test_everything_at_once_renders_each_object_once(helm: Path) -> None:  # noqa: F811
    objs = gateway_docs(render(helm, *EVERYTHING))
    assert {"Ingress", "HTTPRoute", "NetworkPolicy", "PodMonitor", "Deployment", "Service"} <= set(objs)


@pytest.mark.parametrize(
    ("sets", "named"),
    [
        (["gateway.metricsPort=metrics"], "metricsPort"),
        (["gateway.tls=gateway-cert"], "tls"),
        (["gateway.ingress.enabled=yes"], "enabled"),
        (["gateway.ingress.hosts=batches.example.com"], "hosts"),
        (["gateway.ingress.paths[0].path=v1"], "path"),
        (["gateway.ingress.paths[0].pathType=Suffix"], "pathType"),
        (["gateway.httpRoute.parentRefs[0].namespace=gateway-system"], "name"),  # a parentRef without its name
        (["gateway.httpRoute.hostnames={Not A Host}"], "hostnames"),
        (["gateway.networkPolicy.apiFrom[0].namespace=team-a"], "namespace"),  # not a NetworkPolicyPeer key
        (["gateway.networkPolicy.metricsFromNamespaceSelector.matchLabels=monitoring"], "matchLabels"),
        (["gateway.ingress.tlsSecret=x"], "tlsSecret"),
    ],
)
def test_the_schema_refuses_a_wrong_value(helm: Path, sets: list[str], named: str) -> None:  # noqa: F811
    with pytest.raises(subprocess.CalledProcessError) as caught:
        render(helm, ON, *sets)
    assert "values don't meet the specifications of the schema" in caught.value.stderr
    assert named in caught.value.stderr


@pytest.mark.parametrize(
    ("sets", "named"),
    [
        (["gateway.httpRoute.enabled=true"], "gateway.httpRoute.parentRefs"),
        (["gateway.networkPolicy.enabled=true"], "gateway.networkPolicy.apiFrom"),
    ],
)
def test_a_route_without_parents_or_a_policy_without_callers_is_refused_naming_the_value(
    helm: Path,  # noqa: F811
    sets: list[str],
    named: str,
) -> None:
    with pytest.raises(subprocess.CalledProcessError) as caught:
        render(helm, ON, *sets)
    assert named in caught.value.stderr
