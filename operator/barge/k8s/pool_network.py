"""The NetworkPolicy of an engine InferencePool (review 3, M9): who may open a connection to its vLLM pods.

Without it any pod of any tenant can POST to `http://<pool>.<ns>.svc:8000/v1`: it uses the pool owner's GPUs and
drives its KEDA scale-up. The per-pool API key (k8s/pool.py, `<pool>-engine-key`) is the control on a cluster
whose network plugin does not enforce NetworkPolicies; this policy is the fence in front of it where one does.

The policy selects the pool's engine pods and admits, on the engine port only (vLLM serves /v1, /health and
/metrics on that one port), connections from:

| peer                         | selector                                                     | when               |
| ---------------------------- | ------------------------------------------------------------ | ------------------ |
| the operator                 | namespace `kubernetes.io/metadata.name=<operator ns>` and    | its identity is    |
|                              | the operator pods' labels                                    | known (the chart)  |
| the pool's own queue workers | pods of the pool's namespace labelled                        | always             |
|                              | `app.kubernetes.io/name: barge-worker`, `barge.dev/pool`     |                    |
| an inference gateway         | each admin-named namespace and pod labels (the Gateway API   | spec.gateway.      |
|                              | Inference Extension's proxy sends straight to the pods)      | inferencePool      |
| Prometheus                   | each admin-named monitoring namespace                        | named              |

Nothing else reaches the engines over the Pod network. What a NetworkPolicy cannot do, and so this one does not
claim: pods on the host's network (BARGE_POD_HOST_NETWORK) are not selected by any policy; the kubelet's probes
come from the node and are admitted by the network plugins that enforce policies; and the API server enforces
nothing itself, so on a cluster without a NetworkPolicy controller the object is inert (turn it off there:
`enabled: false`, and rely on the API key).

The operator's setting is BARGE_POOL_NETWORK_POLICY, a JSON object (the chart's operator.poolNetworkPolicy):
    {"enabled": true,
     "operator": {"namespace": "barge-system", "podLabels": {"app.kubernetes.io/name": "barge", ...}},
     "gateways": [{"namespace": "gateway-system", "podLabels": {"app": "inference-gateway"}}],
     "monitoringNamespaces": ["monitoring"]}
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from barge.api.pool import InferencePool
from barge.k8s.pool import names, object_meta, selector

NAMESPACE_LABEL = "kubernetes.io/metadata.name"
"""Set by the API server on every namespace (immutable, equal to its name): a namespace selector on it cannot be
satisfied by a tenant labelling its own namespace."""
ENV = "BARGE_POOL_NETWORK_POLICY"
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
_KEYS = {"enabled", "operator", "gateways", "monitoringNamespaces"}
_PEER_KEYS = {"namespace", "podLabels"}


@dataclass(frozen=True)
class Peer:
    """Pods allowed to connect: those of `namespace` with every label of `pod_labels` (none: every pod there)."""

    namespace: str
    pod_labels: Mapping[str, str] = field(default_factory=dict)

    def selector(self) -> dict[str, Any]:
        """A NetworkPolicyPeer: namespace and pod selectors in one element, so both must match."""
        peer: dict[str, Any] = {"namespaceSelector": {"matchLabels": {NAMESPACE_LABEL: self.namespace}}}
        if self.pod_labels:
            peer["podSelector"] = {"matchLabels": dict(self.pod_labels)}
        return peer


@dataclass(frozen=True)
class PoolNetwork:
    """Whether engine pools get a NetworkPolicy, and the peers outside the pool's namespace it admits."""

    enabled: bool = True
    """False on clusters without a NetworkPolicy controller (the object would be inert there); an existing policy
    the pool owns is then deleted."""
    operator: Peer | None = None
    """The operator's pods; None when not known (an operator outside the cluster reaches pools by port-forward)."""
    gateways: tuple[Peer, ...] = ()
    """Inference gateways' pods, admitted to pools with spec.gateway.inferencePool."""
    monitoring_namespaces: tuple[str, ...] = ()
    """Namespaces whose pods may scrape the engines' /metrics (on the engine port: vLLM has no other)."""


def _labels(value: Any, where: str) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in value.items()):
        raise ValueError(f"{ENV}: {where}.podLabels must map label names to strings")
    return dict(value)


def _namespace(value: Any, where: str) -> str:
    if not isinstance(value, str) or not _DNS_LABEL.match(value):
        raise ValueError(f"{ENV}: {where} must be a namespace name, got {value!r}")
    return value


def _peer(value: Any, where: str) -> Peer:
    if not isinstance(value, dict) or set(value) - _PEER_KEYS:
        raise ValueError(f"{ENV}: {where} must be an object with namespace and podLabels")
    return Peer(_namespace(value.get("namespace"), f"{where}.namespace"), _labels(value.get("podLabels"), where))


def parse(text: str) -> PoolNetwork:
    """BARGE_POOL_NETWORK_POLICY; empty: on, with no operator peer known. A broken value stops the operator."""
    if not text.strip():
        return PoolNetwork()
    data = json.loads(text)
    if not isinstance(data, dict):
        raise ValueError(f"{ENV} must be a JSON object")
    unknown = set(data) - _KEYS
    if unknown:
        raise ValueError(f"{ENV}: unknown key(s) {sorted(unknown)} (known: {sorted(_KEYS)})")
    enabled = data.get("enabled", True)
    if not isinstance(enabled, bool):
        raise ValueError(f"{ENV}: enabled must be true or false")
    gateways = data.get("gateways") or []
    monitoring = data.get("monitoringNamespaces") or []
    if not isinstance(gateways, list) or not isinstance(monitoring, list):
        raise ValueError(f"{ENV}: gateways and monitoringNamespaces must be lists")
    return PoolNetwork(
        enabled=enabled,
        operator=_peer(data["operator"], "operator") if data.get("operator") else None,
        gateways=tuple(_peer(g, f"gateways[{i}]") for i, g in enumerate(gateways)),
        monitoring_namespaces=tuple(_namespace(m, f"monitoringNamespaces[{i}]") for i, m in enumerate(monitoring)),
    )


def workers_peer(pool: str) -> dict[str, Any]:
    """The pool's queue workers: a pod selector alone means pods of the policy's (the pool's) namespace."""
    return {"podSelector": {"matchLabels": {"app.kubernetes.io/name": "barge-worker", "barge.dev/pool": pool}}}


def build_network_policy(pool: InferencePool, network: PoolNetwork) -> dict[str, Any] | None:
    """The engine pods' ingress policy (see the table above); None for a provider pool or when turned off."""
    engine = pool.spec.engine
    if engine is None or not network.enabled:
        return None
    name = str(pool.metadata["name"])
    peers = [workers_peer(name)]
    if network.operator is not None:
        peers.append(network.operator.selector())
    if pool.spec.gateway.inference_pool:
        peers += [g.selector() for g in network.gateways]
    peers += [Peer(ns).selector() for ns in network.monitoring_namespaces]
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": object_meta(pool, names(name)["networkpolicy"]),
        "spec": {
            "podSelector": {"matchLabels": selector(name)},
            "policyTypes": ["Ingress"],
            "ingress": [{"from": peers, "ports": [{"port": engine.port, "protocol": "TCP"}]}],
        },
    }
