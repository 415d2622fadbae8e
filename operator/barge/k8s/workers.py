"""Pure builders for an InferencePool's queue workers: the quota cap, and per worker a ConfigMap, a Deployment
running `barge worker`, a KEDA ScaledObject and (with credentials) a TriggerAuthentication.

The cap is what makes queue workers safe: twenty workers that each get a 429 are worse than five that do
not. Workers on one pool split its quota equally; each worker's cap is
    floor(min(TPM / (tokensPerRequest * rpmPerReplica), RPM / rpmPerReplica)),
at least 1 while a quota is set (a dimension set to 0 is unlimited), and KEDA's maxReplicaCount is
min(maxReplicas, cap). Each replica also rate-limits itself to its share, so the pool never exceeds quota even
at the cap.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import yaml

from barge.api.pool import InferencePool, Worker
from barge.k8s.pool import (
    ENGINE_KEY_FIELD,
    MANAGED_BY,
    bounded,
    endpoint,
    host_network_fields,
    inherited_labels,
    names,
    object_meta,
)

WORKER_PORT = 9100
"""The metrics port of a worker pod on the Pod network, declared as the named port `metrics` (the chart's
PodMonitor scrapes it). On the host's network (BARGE_POD_HOST_NETWORK) a declared port is a host port and the
scheduler fits one replica per node, so there no port is declared and each replica serves its metrics on a port
the kernel picks (metricsPort 0 in its config; the worker logs it)."""
EPHEMERAL_PORT = 0
METRICS_HOST_ENV = "BARGE_METRICS_HOST"
"""On the host's network a worker serves its metrics on its pod's IP (the node's address, from the downward API),
not on every interface of the node."""
HEADROOM = 0.95
WORKER_RESOURCES = {"requests": {"cpu": "100m", "memory": "256Mi"}, "limits": {"memory": "512Mi"}}


@dataclass(frozen=True)
class WorkerTenancy:
    """What the operator's policy lets a pool's workers do, written into their config: the pool's tenant (the
    only one they meter and key results by, whatever a message says), its storage prefixes, the payload limit."""

    tenant: str
    storage_prefixes: tuple[str, ...]
    max_payload_bytes: int


@dataclass(frozen=True)
class WorkerPods:
    """How this operator's worker pods run (its settings, the same for every pool): on the host's network
    (BARGE_POD_HOST_NETWORK) or the Pod network, and the volumes the admin adds to each (BARGE_WORKER_VOLUMES)."""

    host_network: bool = False
    volumes: tuple[dict[str, Any], ...] = ()
    volume_mounts: tuple[dict[str, Any], ...] = ()


@dataclass(frozen=True)
class _Network:
    """The one place the worker's network is decided: what the container declares and gets, and the metrics port
    its config names."""

    pod: dict[str, Any]
    container: dict[str, Any]
    metrics_port: int


def _network(host_network: bool) -> _Network:
    if not host_network:
        return _Network({}, {"ports": [{"name": "metrics", "containerPort": WORKER_PORT}]}, WORKER_PORT)
    pod_ip = {"name": METRICS_HOST_ENV, "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}
    return _Network(host_network_fields(True), {"env": [pod_ip]}, EPHEMERAL_PORT)


@dataclass(frozen=True)
class Cap:
    quota_cap: int  # replicas the quota allows (0 = no quota: unlimited)
    effective_max: int
    requests_per_minute: int  # each replica's own limit (0 = unlimited)
    tokens_per_minute: int


def quota_caps(pool: InferencePool) -> dict[str, Cap]:
    """Per worker: the cap, the effective max replicas, and each replica's share of the quota."""
    workers = pool.spec.workers
    if not workers:
        return {}
    tpm = pool.spec.quota.tokens_per_minute / len(workers)
    rpm = pool.spec.quota.requests_per_minute / len(workers)
    caps = {}
    for w in workers:
        limits = []
        if tpm:
            limits.append(tpm / (w.tokens_per_request * w.requests_per_minute_per_replica))
        if rpm:
            limits.append(rpm / w.requests_per_minute_per_replica)
        if not limits:
            caps[w.name] = Cap(0, w.max_replicas, w.requests_per_minute_per_replica, 0)
            continue
        cap = max(1, math.floor(min(limits)))
        effective = min(w.max_replicas, cap)
        # Each replica aims HEADROOM below its exact share: at 100% of a sliding-minute quota, jitter alone
        # produces 429s (measured in bench/bench_workers.py).
        caps[w.name] = Cap(
            cap,
            effective,
            min(w.requests_per_minute_per_replica, math.floor(rpm * HEADROOM / effective))
            if rpm
            else w.requests_per_minute_per_replica,
            math.floor(tpm * HEADROOM / effective) if tpm else 0,
        )
    return caps


def is_capped(worker: Worker, cap: Cap) -> bool:
    """QuotaCapped: the quota allows fewer replicas than the worker asks for."""
    return cap.quota_cap > 0 and cap.quota_cap < worker.max_replicas


def worker_names(pool: str, worker: str) -> dict[str, str]:
    base = f"{pool}-{worker}"
    return {
        "deployment": bounded(f"{base}-worker", 63),
        "configmap": bounded(f"{base}-worker", 253),
        "scaledobject": bounded(f"{base}-worker", 63 - len("keda-hpa-")),
        "triggerauth": bounded(f"{base}-worker", 253),
    }


def worker_config(
    pool: InferencePool,
    worker: Worker,
    cap: Cap,
    endpoint_template: str,
    tenancy: WorkerTenancy | None = None,
    *,
    host_network: bool = False,
) -> dict[str, Any]:
    """What `barge worker --config` reads (mounted from the ConfigMap). Secrets are referenced, never inlined."""
    provider = pool.spec.provider
    config = {
        "pool": pool.metadata["name"],
        "worker": worker.name,
        "model": provider.model if provider else pool.spec.model,
        "provider": {
            "type": provider.type if provider else "openai",
            "baseURL": provider.base_url if provider else endpoint(pool, endpoint_template),
            "apiVersion": provider.api_version if provider else "",
            "apiKeyEnv": "BARGE_API_KEY",
        },
        "queue": worker.queue.model_dump(by_alias=True, exclude_none=True, exclude={"auth_secret_ref"}),
        "request": worker.request.model_dump(by_alias=True),
        "output": {"url": worker.output.url},
        "maxDeliveries": worker.max_deliveries,
        "limits": {
            "requestsPerMinute": cap.requests_per_minute,
            "tokensPerMinute": cap.tokens_per_minute,
            "tokensPerRequest": worker.tokens_per_request,
        },
        "metricsPort": _network(host_network).metrics_port,
    }
    if tenancy is not None:
        config["tenant"] = tenancy.tenant
        config["storage"] = {"prefixes": list(tenancy.storage_prefixes)}
        config["maxPayloadBytes"] = tenancy.max_payload_bytes
    return config


def build_worker_configmap(
    pool: InferencePool,
    worker: Worker,
    cap: Cap,
    endpoint_template: str,
    tenancy: WorkerTenancy | None = None,
    *,
    host_network: bool = False,
) -> dict[str, Any]:
    n = worker_names(str(pool.metadata["name"]), worker.name)
    config = worker_config(pool, worker, cap, endpoint_template, tenancy, host_network=host_network)
    text = yaml.safe_dump(config, sort_keys=True)
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": _wmeta(pool, worker, n["configmap"]),
        "data": {"worker.yaml": text},
    }


def _worker_labels(pool: InferencePool, worker: Worker) -> dict[str, str]:
    return {
        "app.kubernetes.io/name": "barge-worker",
        "barge.dev/pool": str(pool.metadata["name"]),
        "barge.dev/worker": worker.name,
    }


def _wmeta(pool: InferencePool, worker: Worker, name: str) -> dict[str, Any]:
    labels = {
        **inherited_labels(pool.metadata.get("labels")),
        **_worker_labels(pool, worker),
        "app.kubernetes.io/managed-by": MANAGED_BY,
        "app.kubernetes.io/part-of": "barge",
    }
    return object_meta(pool, name, labels)


def build_worker_deployment(
    pool: InferencePool, worker: Worker, image: str, *, host_network: bool = False, pods: WorkerPods | None = None
) -> dict[str, Any]:
    """The worker's Deployment; `pods` (or `host_network` alone, BARGE_POD_HOST_NETWORK): on the node's network no
    port is declared (see WORKER_PORT), so KEDA can run many replicas on one node; the admin's volumes added."""
    pods = pods or WorkerPods(host_network=host_network)
    network = _network(pods.host_network)
    n = worker_names(str(pool.metadata["name"]), worker.name)
    env: list[dict[str, Any]] = []
    if pool.spec.provider is not None:
        ref = pool.spec.provider.secret_ref
        env.append({"name": "BARGE_API_KEY", "valueFrom": {"secretKeyRef": {"name": ref.name, "key": ref.key}}})
    else:  # an engine pool: the key its vLLM engines require (the operator's `<pool>-engine-key` Secret)
        key = {"name": names(str(pool.metadata["name"]))["enginekey"], "key": ENGINE_KEY_FIELD}
        env.append({"name": "BARGE_API_KEY", "valueFrom": {"secretKeyRef": key}})
    if worker.queue.auth_secret_ref is not None:
        ref = worker.queue.auth_secret_ref
        env.append({"name": "BARGE_QUEUE_SECRET", "valueFrom": {"secretKeyRef": {"name": ref.name, "key": ref.key}}})
    # each replica's own name (the queue consumer's): on the host's network the hostname is the node's, shared
    env.append({"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}})
    env += network.container.get("env", [])
    meta = _wmeta(pool, worker, n["deployment"])
    ports = {k: v for k, v in network.container.items() if k != "env"}
    mounts = [{"name": "config", "mountPath": "/etc/barge", "readOnly": True}, *pods.volume_mounts]
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": meta,
        "spec": {
            "selector": {"matchLabels": _worker_labels(pool, worker)},
            "template": {
                "metadata": {"labels": {**meta["labels"]}},
                "spec": {
                    **network.pod,
                    "terminationGracePeriodSeconds": 60,  # finish or abandon in-flight messages
                    "containers": [
                        {
                            "name": "worker",
                            "image": image,
                            "args": ["worker", "--config", "/etc/barge/worker.yaml"],
                            "env": env,
                            **ports,
                            "volumeMounts": mounts,
                            "resources": WORKER_RESOURCES,
                            "securityContext": {
                                "runAsNonRoot": True,
                                "allowPrivilegeEscalation": False,
                                "readOnlyRootFilesystem": True,
                                "capabilities": {"drop": ["ALL"]},
                            },
                        }
                    ],
                    "volumes": [{"name": "config", "configMap": {"name": n["configmap"]}}, *pods.volumes],
                    "automountServiceAccountToken": False,  # a worker reads its queue, never the API server
                    "securityContext": {"seccompProfile": {"type": "RuntimeDefault"}},
                },
            },
        },
    }


def _trigger(worker: Worker, auth: str | None) -> dict[str, Any]:
    q = worker.queue
    target = str(worker.target_backlog_per_replica)
    if q.type == "redis-streams":
        trigger: dict[str, Any] = {
            "type": "redis-streams",
            "metadata": {
                "address": q.address or "",
                "stream": q.stream or "",
                "consumerGroup": q.consumer_group,
                "lagCount": target,
            },
        }
    elif q.type == "rabbitmq":
        trigger = {
            "type": "rabbitmq",
            "metadata": {"queueName": q.queue_name or "", "mode": "QueueLength", "value": target, "protocol": "amqp"},
        }
    else:
        trigger = {
            "type": "azure-servicebus",
            "metadata": {"queueName": q.queue_name or "", "namespace": q.namespace or "", "messageCount": target},
        }
    if auth:
        trigger["authenticationRef"] = {"name": auth}
    return trigger


def _pending_trigger(worker: Worker, auth: str | None) -> list[dict[str, Any]]:
    """Redis Streams: a second trigger on the group's pending entries (delivered, not acknowledged). The lag alone
    is 0 once every entry was delivered, so KEDA scaled the worker to zero with a message still pending (one a
    replica abandoned after a failed call, waiting to be claimed again): seen on the node, it was never answered.
    KEDA takes the larger of the two; while anything is pending at least one replica runs to claim it."""
    q = worker.queue
    if q.type != "redis-streams":
        return []
    metadata = {
        "address": q.address or "",
        "stream": q.stream or "",
        "consumerGroup": q.consumer_group,
        "pendingEntriesCount": str(worker.target_backlog_per_replica),
    }
    trigger: dict[str, Any] = {"type": "redis-streams", "name": "pending", "metadata": metadata}
    if auth:
        trigger["authenticationRef"] = {"name": auth}
    return [trigger]


def build_trigger_auth(pool: InferencePool, worker: Worker) -> dict[str, Any] | None:
    ref = worker.queue.auth_secret_ref
    if ref is None:
        return None
    parameter = {"redis-streams": "password", "rabbitmq": "host", "azure-servicebus": "connection"}[worker.queue.type]
    n = worker_names(str(pool.metadata["name"]), worker.name)
    return {
        "apiVersion": "keda.sh/v1alpha1",
        "kind": "TriggerAuthentication",
        "metadata": _wmeta(pool, worker, n["triggerauth"]),
        "spec": {"secretTargetRef": [{"parameter": parameter, "name": ref.name, "key": ref.key}]},
    }


def build_worker_scaled_object(pool: InferencePool, worker: Worker, cap: Cap) -> dict[str, Any]:
    n = worker_names(str(pool.metadata["name"]), worker.name)
    auth = n["triggerauth"] if worker.queue.auth_secret_ref is not None else None
    return {
        "apiVersion": "keda.sh/v1alpha1",
        "kind": "ScaledObject",
        "metadata": _wmeta(pool, worker, n["scaledobject"]),
        "spec": {
            "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": n["deployment"]},
            "minReplicaCount": min(worker.min_replicas, cap.effective_max),
            "maxReplicaCount": cap.effective_max,
            "pollingInterval": worker.polling_interval_seconds,
            "cooldownPeriod": worker.cooldown_seconds,
            "triggers": [_trigger(worker, auth), *_pending_trigger(worker, auth)],
        },
    }
