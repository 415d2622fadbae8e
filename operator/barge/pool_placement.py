"""Where a tenant's InferencePool may run: the admin's word on node selectors and tolerations.

Why the admin's: a pool's Deployment is created by the operator, so admission rules on Deployments that key on the
requesting user do not see the tenant, and `spec.engine.tolerations` used to pass as written: a pool's creator
could tolerate the control-plane taint, or the taint of GPU nodes dedicated to another team, and schedule there
(REVIEW-3 L6). Pure and parsed once, like barge/policy.py, which holds it as `Policy.placement` and raises
`Refused("PlacementPolicy", ...)` from `check_placement`.

| policy `pools.`                        | a pool's spec.engine                    | when the section is absent     |
| -------------------------------------- | --------------------------------------- | ------------------------------ |
| `nodeSelectors: ["key=value", ...]`    | every nodeSelector entry matches one    | any node selector              |
| (fnmatch patterns on `key=value`)      | pattern                                 |                                |
| `tolerations: [{key, effect}, ...]`    | every extra toleration names a key (and | any toleration except those of |
| (fnmatch on key; effect optional: any) | effect) allowed; a toleration with no   | control-plane taints and the   |
|                                        | key (tolerate everything) never passes  | tolerate-everything form       |

Resources (`spec.engine.resources`, `gpus`) are not bounded here: the pods run in the pool's own namespace, so a
ResourceQuota and LimitRange there bound them, as for any workload of that team.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

#: Taints no tenant's pool tolerates unless the admin lists them (kubeadm's, and the pre-1.24 spelling).
CONTROL_PLANE_TAINTS = ("node-role.kubernetes.io/control-plane", "node-role.kubernetes.io/master")


@dataclass(frozen=True)
class Toleration:
    key: str
    """fnmatch pattern on the toleration's key."""
    effect: str = ""
    """NoSchedule, PreferNoSchedule or NoExecute; empty: any."""


@dataclass(frozen=True)
class Placement:
    node_selectors: tuple[str, ...] | None = None
    """`key=value` patterns a pool's node selector entries must match; None: any."""
    tolerations: tuple[Toleration, ...] | None = None
    """Tolerations a pool may add; None: any but CONTROL_PLANE_TAINTS and the keyless one."""


DEFAULT = Placement()


def parse(pools: Mapping[str, Any]) -> Placement:
    """`nodeSelectors` and `tolerations` of the policy's `pools` section."""
    selectors = pools.get("nodeSelectors")
    if selectors is not None and (
        not isinstance(selectors, list) or not all(isinstance(s, str) and "=" in s for s in selectors)
    ):
        raise ValueError("policy pools.nodeSelectors must be a list of 'key=value' patterns")
    raw = pools.get("tolerations")
    tolerations = None
    if raw is not None:
        if not isinstance(raw, list):
            raise ValueError("policy pools.tolerations must be a list of {key, effect}")
        tolerations = []
        for item in raw:
            entry = {"key": item} if isinstance(item, str) else dict(item)
            if set(entry) - {"key", "effect"} or not isinstance(entry.get("key"), str) or not entry["key"]:
                raise ValueError(f"policy pools.tolerations entry {item!r}: expected key and optional effect")
            tolerations.append(Toleration(entry["key"], str(entry.get("effect") or "")))
    return Placement(None if selectors is None else tuple(selectors), None if raw is None else tuple(tolerations or ()))


def refusal(placement: Placement, node_selector: Mapping[str, str], tolerations: Iterable[Mapping[str, Any]]) -> str:
    """Why this node selector or these tolerations may not be used; "" when they may."""
    if placement.node_selectors is not None:
        for key, value in node_selector.items():
            if not any(fnmatch.fnmatchcase(f"{key}={value}", p) for p in placement.node_selectors):
                allowed = ", ".join(placement.node_selectors) or "none"
                return f"nodeSelector {key}={value} is not allowed (allowed: {allowed})"
    for toleration in tolerations:
        key, effect = str(toleration.get("key") or ""), str(toleration.get("effect") or "")
        if not key:
            return "a toleration without a key tolerates every taint, control-plane nodes' included: not allowed"
        if placement.tolerations is None:
            if key in CONTROL_PLANE_TAINTS:
                return f"a toleration of {key} would schedule the pool onto control-plane nodes: not allowed"
            continue
        if not any(
            fnmatch.fnmatchcase(key, rule.key) and (not rule.effect or (effect and rule.effect == effect))
            for rule in placement.tolerations
        ):
            allowed = ", ".join(f"{r.key}:{r.effect or '*'}" for r in placement.tolerations) or "none"
            return f"toleration {key}:{effect or '*'} is not allowed (allowed: {allowed})"
    return ""
