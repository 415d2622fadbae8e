"""Every Kubernetes permission the operator needs, in one table, with the reason for each verb.

Why one table: least privilege is only checkable when the rules are written once and read by people. The chart's
RBAC templates (`charts/barge/templates/_rbac_rules.tpl`) and the README's RBAC table are both generated from
`RULES` by `barge crds` (`make crds`), and `make lint` fails when either is stale. To let the operator do
something new, add a verb here with its reason, then run `make crds`.

Verbs come from what the code calls: Kopf watches the handled resources (list, watch; it never GETs them) and
patches them for its finalizer and `barge.dev/` annotations; `operator/kube.py` reads Secrets and ConfigMaps with
GET, writes status with a merge PATCH on the status subresource, and applies generated children with server-side
apply (a PATCH; when the object does not exist yet the API server also checks `create`); `operator/pools.py`
GETs a child before deleting one it owns and LISTs workers' children by label. No rule uses `*`; Secrets are
only ever read by name (`get`), never listed.

Groups, i.e. where a rule is granted:
    watched            in every watched namespace: a ClusterRole when the operator watches all namespaces, a Role
                       in each listed namespace otherwise
    cluster            cluster-scoped resources: always a ClusterRole
    cluster-namespaced cluster-scoped resources only a namespace list needs: in the ClusterRole then, never with
                       all namespaces
    peering-watched    with replicas > 1 and a namespace list: Kopf's KopfPeering in each watched namespace
    peering-cluster    with replicas > 1 and all namespaces: Kopf's ClusterKopfPeering
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

Group = Literal["watched", "cluster", "cluster-namespaced", "peering-watched", "peering-cluster"]
GROUPS: tuple[Group, ...] = ("watched", "cluster", "cluster-namespaced", "peering-watched", "peering-cluster")

_KOPF_WATCH = (
    ("list", "Kopf lists the handled objects when it starts watching"),
    ("watch", "Kopf watches the handled objects"),
)
_SSA_CREATE = ("create", "server-side apply of a child that does not exist yet (the API server checks create)")
_SSA_PATCH = ("patch", "server-side apply of the generated child")
_SSA = (_SSA_CREATE, _SSA_PATCH)
_GET_OWNED = ("get", "check the owner reference before deleting a child the spec no longer asks for")
_DELETE = ("delete", "remove a child the spec no longer asks for (only one this pool owns)")
_PEERING = (
    ("get", "Kopf peering (Kopf's documented RBAC for peering: get, list, watch, patch)"),
    ("list", "Kopf peering: see the other replicas"),
    ("watch", "Kopf peering: see the other replicas"),
    ("patch", "Kopf peering: announce this replica and its priority, clean up dead peers"),
)


@dataclass(frozen=True)
class Rule:
    api_group: str
    resources: tuple[str, ...]
    verbs: tuple[tuple[str, str], ...]
    """(verb, why Barge needs it), in the order they are rendered."""
    group: Group = "watched"


RULES: tuple[Rule, ...] = (
    Rule(
        "barge.dev",
        ("llmbatchjobs",),
        (
            ("list", "Kopf lists the handled objects when it starts watching; a schedule lists its runs by label"),
            ("watch", "Kopf watches the handled objects"),
            ("patch", "Kopf's finalizer and its barge.dev/ progress annotations; a schedule removes its run's hold"),
            ("create", "a schedule creates its run (named from the scheduled time: a second create is a 409)"),
            ("delete", "a schedule deletes its runs beyond successfulJobsHistoryLimit / failedJobsHistoryLimit"),
        ),
    ),
    Rule("barge.dev", ("llmbatchjobs/status",), (("patch", "write status (phase, counts, conditions, usage)"),)),
    Rule(
        "barge.dev",
        ("llmbatchschedules",),
        (*_KOPF_WATCH, ("patch", "Kopf's finalizer (its daemon per schedule) and barge.dev/ annotations")),
    ),
    Rule(
        "barge.dev",
        ("llmbatchschedules/status",),
        (("patch", "write status (last and next scheduled time, active runs, conditions)"),),
    ),
    Rule(
        "barge.dev",
        ("llmbatchschedules/finalizers",),
        (("update", "runs' owner references set blockOwnerDeletion (OwnerReferencesPermissionEnforcement)"),),
    ),
    Rule(
        "barge.dev",
        ("inferencepools",),
        (
            ("get", "a job with provider.type pool reads its pool"),
            *_KOPF_WATCH,
            ("patch", "Kopf's barge.dev/ progress annotations"),
        ),
    ),
    Rule("barge.dev", ("inferencepools/status",), (("patch", "write status (readiness, endpoint, workers, caps)"),)),
    Rule(
        "barge.dev",
        ("inferencepools/finalizers",),
        (("update", "children's owner references set blockOwnerDeletion (OwnerReferencesPermissionEnforcement)"),),
    ),
    Rule(
        "",
        ("secrets",),
        (
            (
                "get",
                "read a Secret named by a job or pool, in its own namespace (used only if labelled "
                "barge.dev/credential: true)",
            ),
            (
                "create",
                "create each engine pool's API key Secret (the pool's name + -engine-key) once (POST only: "
                "no update or patch, so no existing Secret is ever changed)",
            ),
        ),
    ),
    Rule(
        "",
        ("namespaces",),
        (("get", "read the namespace's tenant label barge.dev/tenant (a namespace-scoped Role grants its own)"),),
    ),
    Rule(
        "",
        ("configmaps",),
        (
            ("get", "read a job's input.configMapRef"),
            ("list", "find workers' ConfigMaps by label to remove those of deleted workers"),
            ("create", "server-side apply of a worker's new ConfigMap (the API server checks create)"),
            ("patch", "server-side apply of each worker's ConfigMap"),
            _DELETE,
        ),
    ),
    Rule("", ("events",), (("create", "post events on jobs and pools (Kopf's kopf.event)"),)),
    Rule("", ("services",), (_GET_OWNED, *_SSA, _DELETE)),
    Rule("", ("persistentvolumeclaims",), (_GET_OWNED, *_SSA, _DELETE)),
    Rule(
        "apps",
        ("deployments",),
        (
            ("get", "read the vLLM Deployment's status for the pool's readiness; check ownership before delete"),
            ("list", "find workers' Deployments by label to remove those of deleted workers"),
            *_SSA,
            _DELETE,
        ),
    ),
    Rule("policy", ("poddisruptionbudgets",), (_GET_OWNED, *_SSA, _DELETE)),
    Rule(
        "autoscaling",
        ("horizontalpodautoscalers",),
        (("list", "detect an HPA that KEDA does not own (ScalingConflict instead of a ScaledObject)"),),
    ),
    Rule("monitoring.coreos.com", ("servicemonitors",), (_GET_OWNED, *_SSA, _DELETE)),
    Rule(
        "keda.sh",
        ("scaledobjects",),
        (
            _GET_OWNED,
            ("list", "find workers' ScaledObjects by label to remove those of deleted workers"),
            *_SSA,
            _DELETE,
        ),
    ),
    Rule(
        "keda.sh",
        ("triggerauthentications",),
        (("list", "find workers' TriggerAuthentications by label to remove stale ones"), *_SSA, _DELETE),
    ),
    Rule("inference.networking.k8s.io", ("inferencepools",), (_GET_OWNED, *_SSA, _DELETE)),
    Rule(
        "networking.k8s.io",
        ("networkpolicies",),
        (
            ("get", "check the owner reference before applying or deleting an engine pool's NetworkPolicy"),
            ("create", "server-side apply of an engine pool's new NetworkPolicy (the API server checks create)"),
            ("patch", "server-side apply of each engine pool's NetworkPolicy (who may reach its vLLM port)"),
            ("delete", "remove an engine pool's NetworkPolicy when BARGE_POOL_NETWORK_POLICY turns it off"),
        ),
    ),
    Rule(
        "apiextensions.k8s.io",
        ("customresourcedefinitions",),
        (
            ("list", "Kopf scans the CRDs to find the resources it handles (Kopf's documented RBAC)"),
            ("watch", "Kopf notices CRDs added or removed while it runs"),
        ),
        "cluster",
    ),
    Rule(
        "",
        ("namespaces",),
        (
            (
                "list",
                "Kopf serving a namespace list lists namespaces first (without it: nine failed attempts, about a "
                "minute, before it falls back to the names as given)",
            ),
            ("watch", "Kopf follows listed namespaces that are created or deleted while it runs"),
        ),
        "cluster-namespaced",
    ),
    Rule("kopf.dev", ("kopfpeerings",), _PEERING, "peering-watched"),
    Rule("kopf.dev", ("clusterkopfpeerings",), _PEERING, "peering-cluster"),
)


def build_rules(group: Group, rules: tuple[Rule, ...] = RULES) -> list[dict[str, Any]]:
    """The PolicyRules of one group, as they go into a Role or ClusterRole."""
    return [
        {"apiGroups": [r.api_group], "resources": list(r.resources), "verbs": [v for v, _ in r.verbs]}
        for r in rules
        if r.group == group
    ]


def render_rules(group: Group, rules: tuple[Rule, ...] = RULES) -> str:
    """YAML text of one group's rules with each verb's reason as a comment (it survives into the manifests)."""
    lines = []
    for r in rules:
        if r.group != group:
            continue
        lines.append(f'- apiGroups: ["{r.api_group}"]')
        lines.append(f"  resources: [{', '.join(r.resources)}]")
        lines.append("  verbs:")
        lines += [f"    - {verb}  # {why}" for verb, why in r.verbs]
    return "\n".join(lines)


def markdown_table(rules: tuple[Rule, ...] = RULES) -> str:
    """The README's RBAC table: one row per verb."""
    rows = ["| granted | API group | resource | verb | why |", "| --- | --- | --- | --- | --- |"]
    for r in rules:
        for verb, why in r.verbs:
            group = r.api_group or "core"
            rows.append(f"| {r.group} | `{group}` | `{', '.join(r.resources)}` | `{verb}` | {why} |")
    return "\n".join(rows)
