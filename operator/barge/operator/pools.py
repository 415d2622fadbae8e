"""InferencePool in the cluster: apply the engine's children, guard against competing HPAs, report status.

Children are applied with server-side apply (field manager `barge`) and carry an owner reference, so the
garbage collector removes them with the pool. A KEDA ScaledObject is never created beside an HPA that KEDA
does not own targeting the same Deployment: the pool reports `ScalingConflict` with the HPA's name instead.
"""

from __future__ import annotations

import logging
from typing import Any

from pydantic import ValidationError

from barge.api.pool import InferencePool
from barge.k8s import pool as builders
from barge.operator import status as status_
from barge.operator.kube import NotFound, Objects

log = logging.getLogger("barge.operator.pools")
PLURAL = "inferencepools"
#: Every kind an engine pool can generate, to delete the ones the spec no longer asks for.
CHILD_KINDS = (
    ("apps/v1", "Deployment", "deployment"),
    ("v1", "Service", "service"),
    ("v1", "PersistentVolumeClaim", "pvc"),
    ("policy/v1", "PodDisruptionBudget", "pdb"),
    ("monitoring.coreos.com/v1", "ServiceMonitor", "servicemonitor"),
    ("keda.sh/v1alpha1", "ScaledObject", "scaledobject"),
    ("inference.networking.k8s.io/v1", "InferencePool", "gateway"),
)


def _cond(type_: str, ok: bool, reason: str, message: str = "") -> dict[str, str]:
    return {"type": type_, "status": "True" if ok else "False", "reason": reason, "message": message}


def conflicting_hpa(hpas: list[dict[str, Any]], deployment: str) -> str | None:
    """The name of an HPA that targets `deployment` and is not KEDA's own, if any."""
    for hpa in hpas:
        target = hpa.get("spec", {}).get("scaleTargetRef", {})
        owners = hpa.get("metadata", {}).get("ownerReferences") or []
        if (
            target.get("kind") == "Deployment"
            and target.get("name") == deployment
            and not any(o.get("kind") == "ScaledObject" for o in owners)
        ):
            return str(hpa["metadata"]["name"])
    return None


def deployment_conditions(deployment: dict[str, Any] | None, pool: InferencePool) -> tuple[int, list[dict[str, str]]]:
    if deployment is None:
        return 0, [_cond("Ready", False, "NoDeployment", "the vLLM Deployment does not exist yet")]
    st = deployment.get("status") or {}
    ready = int(st.get("readyReplicas") or 0)
    wanted = deployment.get("spec", {}).get("replicas", 1)
    by_type = {c.get("type"): c for c in st.get("conditions") or []}
    available = by_type.get("Available", {})
    progressing = by_type.get("Progressing", {})
    failure = by_type.get("ReplicaFailure", {})
    conds = [
        _cond(
            "Available",
            available.get("status") == "True",
            available.get("reason") or "Unknown",
            available.get("message") or "",
        ),
        _cond(
            "Progressing",
            progressing.get("status") == "True",
            progressing.get("reason") or "Unknown",
            progressing.get("message") or "",
        ),
    ]
    degraded = (
        failure.get("status") == "True"
        or progressing.get("reason") == "ProgressDeadlineExceeded"
        or (0 < ready < wanted)
    )
    conds.append(
        _cond(
            "Degraded",
            degraded,
            "ReplicasUnavailable" if degraded else "AsExpected",
            f"{ready}/{wanted} replicas ready" if degraded else "",
        )
    )
    if ready >= 1:
        conds.append(_cond("Ready", True, "ReplicasReady", f"{ready}/{wanted} replicas ready"))
    elif wanted == 0:
        conds.append(_cond("Ready", False, "ScaledToZero", "no replicas are running (scaled to zero)"))
    else:
        conds.append(_cond("Ready", False, "Starting", f"0/{wanted} replicas ready (weights can take minutes)"))
    return ready, conds


async def reconcile(
    objects: Objects, body: Any, prometheus_url: str, endpoint_template: str, secret_exists: Any
) -> dict[str, Any]:
    """Bring the children in line with the spec and return the pool's new status."""
    meta = body["metadata"]
    generation = int(meta.get("generation") or 0)
    old = dict(body.get("status") or {})
    try:
        pool = InferencePool.model_validate({"metadata": dict(meta), "spec": dict(body["spec"])})
    except ValidationError as exc:
        message = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
        return _status(old, generation, [_cond("Ready", False, "InvalidSpec", message)], 0, "")
    endpoint = builders.endpoint(pool, endpoint_template)
    quota = pool.spec.quota.model_dump(by_alias=True)
    conds: list[dict[str, str]] = []
    if pool.spec.provider is not None:
        ref = pool.spec.provider.secret_ref
        try:
            await secret_exists(meta["namespace"], ref.name, ref.key)
            conds = [
                _cond(
                    "Ready",
                    True,
                    "SecretFound",
                    f"provider {pool.spec.provider.type}, deployment {pool.spec.provider.model}",
                )
            ]
        except NotFound as exc:
            conds = [_cond("Ready", False, "SecretNotFound", str(exc))]
        return {**_status(old, generation, conds, 0, endpoint), "quota": quota}

    namespace = meta["namespace"]
    n = builders.names(meta["name"])
    children = builders.build_children(pool, prometheus_url)
    hpa = conflicting_hpa(await objects.list("autoscaling/v2", "HorizontalPodAutoscaler", namespace), n["deployment"])
    if hpa is not None and pool.spec.engine is not None and pool.spec.engine.autoscaling is not None:
        children = [c for c in children if c["kind"] != "ScaledObject"]
        conds.append(
            _cond(
                "ScalingConflict",
                True,
                "ForeignHPA",
                f"HorizontalPodAutoscaler {hpa!r} already targets Deployment {n['deployment']!r}; "
                "no ScaledObject is created while it exists",
            )
        )
    else:
        conds.append(_cond("ScalingConflict", False, "NoConflict"))
    for child in children:
        await objects.apply(child)
    wanted = {(c["apiVersion"], c["kind"]) for c in children}
    for api_version, kind, role in CHILD_KINDS:
        if (api_version, kind) in wanted:
            continue
        existing = await _owned(objects, api_version, kind, namespace, n[role], meta["uid"])
        if existing:
            await objects.delete(api_version, kind, namespace, n[role])
    ready, dconds = deployment_conditions(await objects.get("apps/v1", "Deployment", namespace, n["deployment"]), pool)
    return {**_status(old, generation, conds + dconds, ready, endpoint), "quota": quota}


async def _owned(objects: Objects, api_version: str, kind: str, namespace: str, name: str, uid: str) -> bool:
    try:
        found = await objects.get(api_version, kind, namespace, name)
    except Exception:
        return False
    if not found:
        return False
    return any(o.get("uid") == uid for o in found["metadata"].get("ownerReferences") or [])


def _status(
    old: dict[str, Any], generation: int, conds: list[dict[str, str]], ready: int, endpoint: str
) -> dict[str, Any]:
    return {
        "observedGeneration": generation,
        "readyReplicas": ready,
        "endpoint": endpoint,
        "conditions": status_.merge_conditions(old.get("conditions", []), conds, generation, status_.now_rfc3339()),
    }


def is_ready(pool_body: dict[str, Any] | None) -> bool:
    conds = (pool_body or {}).get("status", {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conds)
