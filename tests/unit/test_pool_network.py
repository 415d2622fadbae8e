"""An engine pool's NetworkPolicy (review 3, M9): which peers it admits, on which port, and its setting's parser."""

from __future__ import annotations

import json
from typing import Any

import pytest

from barge.api.pool import InferencePool
from barge.config import OperatorConfig
from barge.k8s import pool_network as fence
from barge.k8s import rbac

OPERATOR = fence.Peer("barge-system", {"app.kubernetes.io/name": "barge", "app.kubernetes.io/instance": "barge"})
GATEWAY = fence.Peer("gateway-system", {"app": "inference-gateway"})
NETWORK = fence.PoolNetwork(operator=OPERATOR, gateways=(GATEWAY,), monitoring_namespaces=("monitoring",))


def pool(engine: dict[str, Any] | None = None, **spec: Any) -> InferencePool:
    body: dict[str, Any] = {"model": "m", **spec}
    if "provider" not in spec:
        body["engine"] = engine or {}
    return InferencePool.model_validate({"metadata": {"name": "p", "namespace": "team-a", "uid": "u"}, "spec": body})


def peers(policy: dict[str, Any]) -> list[dict[str, Any]]:
    [rule] = policy["spec"]["ingress"]
    return list(rule["from"])


def test_engine_pods_admit_only_the_operator_the_pools_workers_and_monitoring() -> None:
    policy = fence.build_network_policy(pool({"port": 8001}), NETWORK)
    assert policy is not None
    assert policy["metadata"]["name"] == "p-engine"
    assert policy["metadata"]["ownerReferences"][0]["uid"] == "u"
    assert policy["spec"]["podSelector"] == {"matchLabels": {"app.kubernetes.io/name": "vllm", "barge.dev/pool": "p"}}
    assert policy["spec"]["policyTypes"] == ["Ingress"]
    [rule] = policy["spec"]["ingress"]
    assert rule["ports"] == [{"port": 8001, "protocol": "TCP"}]
    assert peers(policy) == [
        # a bare podSelector: pods of the policy's own namespace, i.e. the pool's
        {"podSelector": {"matchLabels": {"app.kubernetes.io/name": "barge-worker", "barge.dev/pool": "p"}}},
        {
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "barge-system"}},
            "podSelector": {"matchLabels": dict(OPERATOR.pod_labels)},
        },
        {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}},
    ]


def test_gateways_only_for_pools_that_publish_an_inference_pool() -> None:
    policy = fence.build_network_policy(pool(gateway={"inferencePool": True}), NETWORK)
    assert policy is not None
    assert GATEWAY.selector() in peers(policy)
    assert GATEWAY.selector() == {
        "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "gateway-system"}},
        "podSelector": {"matchLabels": {"app": "inference-gateway"}},
    }


def test_no_policy_when_off_or_for_a_provider_pool() -> None:
    assert fence.build_network_policy(pool(), fence.PoolNetwork(enabled=False)) is None
    provider = {
        "type": "openai",
        "model": "gpt",
        "baseURL": "https://api.openai.com/v1",
        "secretRef": {"name": "k", "key": "k"},
    }
    assert fence.build_network_policy(pool(provider=provider), NETWORK) is None


def test_unknown_operator_leaves_only_the_workers_and_monitoring() -> None:
    policy = fence.build_network_policy(pool(), fence.PoolNetwork(monitoring_namespaces=("mon",)))
    assert policy is not None
    assert [sorted(p) for p in peers(policy)] == [["podSelector"], ["namespaceSelector"]]


def test_setting_parses_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    value = {
        "enabled": True,
        "operator": {"namespace": "barge-system", "podLabels": dict(OPERATOR.pod_labels)},
        "gateways": [{"namespace": "gateway-system", "podLabels": {"app": "inference-gateway"}}],
        "monitoringNamespaces": ["monitoring"],
    }
    monkeypatch.setenv(fence.ENV, json.dumps(value))
    assert OperatorConfig.from_env().pool_network == NETWORK
    monkeypatch.setenv(fence.ENV, json.dumps({"enabled": False}))
    assert OperatorConfig.from_env().pool_network.enabled is False
    monkeypatch.delenv(fence.ENV)
    assert OperatorConfig.from_env().pool_network == fence.PoolNetwork()


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ({"enable": False}, "unknown key"),
        ({"enabled": "no"}, "enabled must be"),
        ({"operator": {"namespace": "Barge System"}}, "must be a namespace name"),
        ({"gateways": [{"namespace": "g", "labels": {}}]}, "gateways[0] must be an object"),
        ({"gateways": [{"namespace": "g", "podLabels": {"app": 1}}]}, "podLabels must map"),
        ({"monitoringNamespaces": "monitoring"}, "must be lists"),
        ([], "must be a JSON object"),
    ],
)
def test_a_broken_setting_stops_the_operator(value: Any, message: str) -> None:
    with pytest.raises(ValueError, match=message.replace("[", r"\[").replace("]", r"\]")):
        fence.parse(json.dumps(value))


def test_rbac_grants_what_the_reconcile_does_to_networkpolicies() -> None:
    [rule] = [r for r in rbac.build_rules("watched") if r["resources"] == ["networkpolicies"]]
    assert rule["apiGroups"] == ["networking.k8s.io"]
    assert rule["verbs"] == ["get", "create", "patch", "delete"]
