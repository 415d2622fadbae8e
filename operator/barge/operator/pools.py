"""InferencePool in the cluster: apply the engine's children, guard against competing HPAs, report status.

Children are applied with server-side apply (field manager `barge`) and carry an owner reference, so the
garbage collector removes them with the pool. An object of a child's name that the pool did not create is never
applied over (a `NameConflict`, and an engine pool is not Ready while it lasts). A KEDA ScaledObject is never
created beside an HPA that KEDA does not own targeting the same Deployment: the pool reports `ScalingConflict`
with the HPA's name instead.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

from pydantic import ValidationError

from barge.api.pool import InferencePool
from barge.config import OperatorConfig
from barge.k8s import pool as builders
from barge.k8s import pool_network, workers
from barge.operator import engine_key, kstatus
from barge.operator import status as status_
from barge.operator.kube import NotFound, Objects
from barge.policy import Refused

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
    ("networking.k8s.io/v1", "NetworkPolicy", "networkpolicy"),
)


def worker_pods(config: OperatorConfig) -> workers.WorkerPods:
    """How this operator's worker pods run: BARGE_POD_HOST_NETWORK and the admin's BARGE_WORKER_VOLUMES."""
    return workers.WorkerPods(config.pod_host_network, config.worker_volumes, config.worker_volume_mounts)


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


async def reconcile_workers(
    objects: Objects,
    pool: InferencePool,
    hpas: list[dict[str, Any]],
    image: str,
    endpoint_template: str,
    tenancy: workers.WorkerTenancy | None = None,
    *,
    pods: workers.WorkerPods | None = None,
) -> tuple[list[dict[str, Any]], list[dict[str, str]]]:
    """Apply every worker's ConfigMap, Deployment, ScaledObject (+ TriggerAuthentication); drop removed ones.
    `pods`: how this operator's worker pods run (network, the admin's volumes)."""
    pods = pods or workers.WorkerPods()
    host_network = pods.host_network
    meta = pool.metadata
    caps = workers.quota_caps(pool)
    statuses, conflicts, clashes = [], [], []
    for worker in pool.spec.workers:
        cap = caps[worker.name]
        n = workers.worker_names(str(meta["name"]), worker.name)
        children = [
            workers.build_worker_configmap(pool, worker, cap, endpoint_template, tenancy, host_network=host_network),
            workers.build_worker_deployment(pool, worker, image, pods=pods),
            workers.build_trigger_auth(pool, worker),
        ]
        hpa = conflicting_hpa(hpas, n["deployment"])
        if hpa is None:
            children.append(workers.build_worker_scaled_object(pool, worker, cap))
        else:
            conflicts.append(
                f"worker {worker.name}: HorizontalPodAutoscaler {hpa!r} already targets {n['deployment']!r}"
            )
            # A ScaledObject made before the HPA appeared would now fight it: remove ours.
            if await _owned(
                objects, "keda.sh/v1alpha1", "ScaledObject", meta["namespace"], n["scaledobject"], meta["uid"]
            ):
                await objects.delete("keda.sh/v1alpha1", "ScaledObject", meta["namespace"], n["scaledobject"])
        for child in children:
            if child is not None:
                clash = await apply_owned(objects, child, meta["uid"])
                if clash:
                    clashes.append(f"worker {worker.name}: {clash}")
        statuses.append(
            {
                "name": worker.name,
                "quotaCap": cap.quota_cap,
                "effectiveMaxReplicas": cap.effective_max,
                "scaledObject": n["scaledobject"] if hpa is None else "",
            }
        )
    keep = {w.name for w in pool.spec.workers}
    selector = f"barge.dev/pool={meta['name']},barge.dev/worker"
    for api_version, kind in (
        ("apps/v1", "Deployment"),
        ("v1", "ConfigMap"),
        ("keda.sh/v1alpha1", "ScaledObject"),
        ("keda.sh/v1alpha1", "TriggerAuthentication"),
    ):
        for obj in await objects.list(api_version, kind, meta["namespace"], selector):
            owned = any(o.get("uid") == meta["uid"] for o in obj["metadata"].get("ownerReferences") or [])
            if owned and obj["metadata"]["labels"].get("barge.dev/worker") not in keep:
                await objects.delete(api_version, kind, meta["namespace"], obj["metadata"]["name"])
    capped = [w.name for w in pool.spec.workers if workers.is_capped(w, caps[w.name])]
    conds = [
        _cond(
            "QuotaCapped",
            bool(capped),
            "QuotaBelowMaxReplicas" if capped else "NotCapped",
            f"the model quota caps {', '.join(capped)}" if capped else "",
        )
    ]
    if conflicts:
        conds.append(_cond("ScalingConflict", True, "ForeignHPA", "; ".join(conflicts) + ": no ScaledObject"))
    if clashes:
        conds.append(_cond("NameConflict", True, "ObjectNotOwned", "; ".join(clashes)))
    return statuses, conds


async def reconcile(
    objects: Objects,
    body: Any,
    prometheus_url: str,
    endpoint_template: str,
    secret_exists: Any,
    worker_image: str = "barge-operator:0.1.0",
    admit: Callable[[InferencePool], Awaitable[workers.WorkerTenancy]] | None = None,
    *,
    host_network: bool = False,
    worker_pods: workers.WorkerPods | None = None,
    network: pool_network.PoolNetwork | None = None,
) -> dict[str, Any]:
    """Bring the children in line with the spec and return the pool's new status. `host_network`: the generated
    pods use the node's network (BARGE_POD_HOST_NETWORK); `worker_pods`: the workers' (with it, and the admin's
    volumes); `network`: the engines' NetworkPolicy peers (BARGE_POOL_NETWORK_POLICY; None: no policy)."""
    pods = worker_pods or workers.WorkerPods(host_network=host_network)
    meta = body["metadata"]
    generation = int(meta.get("generation") or 0)
    old = dict(body.get("status") or {})
    try:
        pool = InferencePool.model_validate({"metadata": dict(meta), "spec": dict(body["spec"])})
    except ValidationError as exc:
        message = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
        return _status(old, generation, [_cond("Ready", False, "InvalidSpec", message)], 0, "")
    tenancy = None
    if admit is not None:  # the admin's policy first: nothing is created for a pool it refuses
        try:
            tenancy = await admit(pool)
        except Refused as exc:
            return _status(old, generation, [_cond("Ready", False, exc.policy, exc.message)], 0, "")
        except NotFound as exc:
            return _status(old, generation, [_cond("Ready", False, "SecretNotFound", str(exc))], 0, "")
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
        hpas = await objects.list("autoscaling/v2", "HorizontalPodAutoscaler", meta["namespace"])
        worker_status, wconds = await reconcile_workers(
            objects, pool, hpas, worker_image, endpoint_template, tenancy, pods=pods
        )
        return {
            **_status(old, generation, _combine(conds + wconds), 0, endpoint),
            "quota": quota,
            "workers": worker_status,
        }

    namespace = meta["namespace"]
    n = builders.names(meta["name"])
    children = builders.build_children(pool, prometheus_url, host_network=host_network)
    fence = pool_network.build_network_policy(pool, network) if network is not None else None
    children += [fence] if fence is not None else []
    hpas = await objects.list("autoscaling/v2", "HorizontalPodAutoscaler", namespace)
    hpa = conflicting_hpa(hpas, n["deployment"])
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
    # The key first (the engines read it at start); a key Secret not the pool's means no Ready pool.
    key_clash = await engine_key.ensure(objects, pool)
    clashes = [clash for child in children if (clash := await apply_owned(objects, child, meta["uid"]))]
    clashes += [key_clash] if key_clash else []
    if clashes:  # jobs must not be sent to someone else's Service: the pool is not Ready while names clash
        return _status(old, generation, [_cond("Ready", False, "NameConflict", "; ".join(clashes))], 0, "")
    wanted = {(c["apiVersion"], c["kind"]) for c in children}
    for api_version, kind, role in CHILD_KINDS:
        if (api_version, kind) in wanted:
            continue
        existing = await _owned(objects, api_version, kind, namespace, n[role], meta["uid"])
        if existing:
            await objects.delete(api_version, kind, namespace, n[role])
    ready, dconds = deployment_conditions(await objects.get("apps/v1", "Deployment", namespace, n["deployment"]), pool)
    worker_status, wconds = await reconcile_workers(
        objects, pool, hpas, worker_image, endpoint_template, tenancy, pods=pods
    )
    return {
        **_status(old, generation, _combine(conds + dconds + wconds), ready, endpoint),
        "quota": quota,
        "workers": worker_status,
    }


def _combine(conds: list[dict[str, str]]) -> list[dict[str, str]]:
    """One condition per type: a True one wins, and messages of the same status are joined."""
    out: dict[str, dict[str, str]] = {}
    for c in conds:
        before = out.get(c["type"])
        if before is None or (c["status"] == "True" and before["status"] != "True"):
            out[c["type"]] = dict(c)
        elif c["status"] == before["status"] and c["message"] and c["message"] not in before["message"]:
            before["message"] = "; ".join(m for m in (before["message"], c["message"]) if m)
    return list(out.values())


async def apply_owned(objects: Objects, child: dict[str, Any], uid: str) -> str:
    """Server-side apply `child` unless an object of that name exists that this pool did not create: then nothing
    is changed (apply with force would take its fields over) and the clash is returned for a condition."""
    meta = child["metadata"]
    found = await objects.get(child["apiVersion"], child["kind"], meta["namespace"], meta["name"])
    if found is not None and not any(o.get("uid") == uid for o in found["metadata"].get("ownerReferences") or []):
        return f"{child['kind']} {meta['name']!r} already exists and was not created by this pool; it is left alone"
    await objects.apply(child)
    return ""


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
        # The domain readiness above is an input: the one `Ready` written is kstatus's (kstatus.py's table).
        "conditions": status_.merge_conditions(
            old.get("conditions", []),
            [*(c for c in conds if c["type"] != "Ready"), *kstatus.pool_conditions(conds)],
            generation,
            status_.now_rfc3339(),
        ),
    }


def is_ready(pool_body: dict[str, Any] | None) -> bool:
    """Whether jobs can run on the pool now: an engine pool with a ready replica (kstatus may call a pool
    scaled to zero Ready, and a degraded one not Ready), a provider pool whose Secret was found."""
    body = pool_body or {}
    status = body.get("status") or {}
    by_type = {c.get("type"): c for c in status.get("conditions") or []}
    stalled = by_type.get("Stalled", {})
    if stalled.get("status") == "True" and stalled.get("reason") in ("InvalidSpec", "SecretNotFound"):
        return False
    if (body.get("spec") or {}).get("engine") is not None:
        return int(status.get("readyReplicas") or 0) >= 1
    return bool(by_type.get("Ready", {}).get("status") == "True" or stalled.get("reason") == "ScalingConflict")
