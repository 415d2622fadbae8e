"""Pure builders for an engine InferencePool's children: vLLM Deployment, Service, PDB, PVC, ServiceMonitor,
KEDA ScaledObject and the Gateway API Inference Extension InferencePool. Each returns a manifest dict.

The latency/throughput dial is vLLM's max_num_batched_tokens: `interactive` keeps chunks small (2048) so
decoding requests are not stalled behind long prefills; `throughput` (16384) packs more tokens per step.
Explicit `args` override the profile. Only real vLLM flags are emitted (tests list them all).

Every engine pool's /v1 API needs a key (review 3, M9): the Secret ENGINE_KEY_SUFFIX, owned by the pool, is made
once by the operator (operator/engine_key.py, its value never comes from here) and reaches vLLM as VLLM_API_KEY
(vLLM's environment form of --api-key, so the key is not on the command line); the operator and the pool's
workers send it as `Authorization: Bearer`. /health and /metrics stay open in vLLM, so the probes use /health.
"""

from __future__ import annotations

import hashlib
import math
from typing import Any

from barge.api.pool import PROFILE_BATCHED_TOKENS, EngineSpec, InferencePool

PORT = 8000
"""The pool's Service port (spec.engine.port, the engines' own, defaults to it too)."""
PENDING_METRIC = "barge_pool_pending_requests"
"""The operator's gauge of requests waiting for an engine pool (operator/metrics.py), read by its ScaledObject."""
MANAGED_BY = "barge"
ENGINE_KEY_FIELD = "api-key"
"""The key of the engine API key in the pool's `<pool>-engine-key` Secret."""
CREDENTIAL_LABEL = "barge.dev/credential"
#: /dev/shm of a vLLM pod (tensor parallelism uses shared memory); bounded so a pod cannot fill the node's RAM.
SHM_SIZE = "8Gi"
#: vLLM runs as this non-root user; HOME is an emptyDir so caches outside /models stay writable.
ENGINE_UID = 1000
ENGINE_DEFAULT_REQUESTS = {"cpu": "1", "memory": "8Gi"}
#: Labels a GitOps tool uses to track what it applied; copying them to children makes the tool think it owns
#: (and must prune) objects Barge generated.
TRACKING_PREFIXES = (
    "argocd.argoproj.io/",
    "kustomize.toolkit.fluxcd.io/",
    "helm.toolkit.fluxcd.io/",
    "app.kubernetes.io/instance",
    "app.kubernetes.io/managed-by",
    "helm.sh/chart",
)
#: Every flag Barge can put on a vLLM command line.
VLLM_FLAGS = (
    "--model",
    "--served-model-name",
    "--host",
    "--port",
    "--tensor-parallel-size",
    "--max-num-batched-tokens",
    "--max-num-seqs",
    "--gpu-memory-utilization",
    "--max-model-len",
    "--enable-chunked-prefill",
    "--no-enable-chunked-prefill",
)


def bounded(name: str, limit: int) -> str:
    """`name` if it fits, else a prefix plus a stable hash (Kubernetes and KEDA name limits)."""
    if len(name) <= limit:
        return name
    digest = hashlib.sha256(name.encode()).hexdigest()[:8]
    return f"{name[: limit - 9].rstrip('-.')}-{digest}"


def names(pool: str) -> dict[str, str]:
    """Children's names. A ScaledObject's HPA is named keda-hpa-<name>, which must fit in 63 characters."""
    return {
        "deployment": bounded(f"{pool}-vllm", 63),
        "service": bounded(pool, 63),
        "pvc": bounded(f"{pool}-model-cache", 253),
        "pdb": bounded(f"{pool}-vllm", 253),
        "scaledobject": bounded(f"{pool}-vllm", 63 - len("keda-hpa-")),
        "servicemonitor": bounded(f"{pool}-vllm", 253),
        "gateway": bounded(pool, 253),
        "enginekey": bounded(f"{pool}-engine-key", 253),
        "networkpolicy": bounded(f"{pool}-engine", 253),
    }


def inherited_labels(labels: dict[str, str] | None) -> dict[str, str]:
    return {k: v for k, v in (labels or {}).items() if not k.startswith(TRACKING_PREFIXES)}


def selector(pool: str) -> dict[str, str]:
    return {"app.kubernetes.io/name": "vllm", "barge.dev/pool": pool}


def labels_for(pool: InferencePool) -> dict[str, str]:
    name = str(pool.metadata["name"])
    return {
        **inherited_labels(pool.metadata.get("labels")),
        **selector(name),
        "app.kubernetes.io/managed-by": MANAGED_BY,
        "app.kubernetes.io/part-of": "barge",
    }


def owner_reference(pool: InferencePool) -> dict[str, Any]:
    return {
        "apiVersion": "barge.dev/v1alpha1",
        "kind": "InferencePool",
        "name": pool.metadata["name"],
        "uid": pool.metadata["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }


def object_meta(pool: InferencePool, name: str, labels: dict[str, str] | None = None) -> dict[str, Any]:
    """Metadata of a generated child: the pool's labels (minus GitOps tracking ones) and its owner reference."""
    return {
        "name": name,
        "namespace": pool.metadata["namespace"],
        "labels": labels or labels_for(pool),
        "ownerReferences": [owner_reference(pool)],
    }


POD_IP_ENV = "POD_IP"
"""On the host's network an engine binds its pod's IP (the node's address, from the downward API), not every
interface of the node: `--host $(POD_IP)`, which the kubelet expands."""


def vllm_args(model: str, engine: EngineSpec, *, host_network: bool = False) -> list[str]:
    """The engine's command line: profile first, explicit args over it, `extra` last."""
    a = engine.args
    batched = a.max_num_batched_tokens or PROFILE_BATCHED_TOKENS[engine.profile]
    args = [
        "--model",
        model,
        "--served-model-name",
        model,
        "--host",
        f"$({POD_IP_ENV})" if host_network else "0.0.0.0",
        "--port",
        str(engine.port),
        "--tensor-parallel-size",
        str(engine.tensor_parallel_size or max(engine.gpus, 1)),
        "--max-num-batched-tokens",
        str(batched),
        "--gpu-memory-utilization",
        str(a.gpu_memory_utilization),
    ]
    if a.max_num_seqs:
        args += ["--max-num-seqs", str(a.max_num_seqs)]
    if a.max_model_len:
        args += ["--max-model-len", str(a.max_model_len)]
    args.append("--enable-chunked-prefill" if a.enable_chunked_prefill else "--no-enable-chunked-prefill")
    return args + list(a.extra)


def host_network_fields(host_network: bool) -> dict[str, Any]:
    """A generated pod's network with the operator's BARGE_POD_HOST_NETWORK: the node's, and cluster DNS first
    (without ClusterFirstWithHostNet a hostNetwork pod gets the node's resolv.conf). Empty: the Pod network."""
    return {"hostNetwork": True, "dnsPolicy": "ClusterFirstWithHostNet"} if host_network else {}


def build_deployment(pool: InferencePool, *, host_network: bool = False) -> dict[str, Any]:
    """The vLLM Deployment. `host_network`: the pods use the node's network, so spec.engine.port is a port of the
    node (the scheduler puts one replica per port on a node)."""
    engine = pool.spec.engine
    assert engine is not None
    name = str(pool.metadata["name"])
    n = names(name)
    gpu = {"nvidia.com/gpu": str(engine.gpus)} if engine.gpus else {}
    resources = {**engine.resources}
    resources["limits"] = {**resources.get("limits", {}), **gpu}
    resources["requests"] = {**ENGINE_DEFAULT_REQUESTS, **resources.get("requests", {}), **gpu}
    env: list[dict[str, Any]] = [{"name": "HF_HOME", "value": "/models"}, {"name": "HOME", "value": "/home/vllm"}]
    key_ref = {"secretKeyRef": {"name": n["enginekey"], "key": ENGINE_KEY_FIELD}}
    env.append({"name": "VLLM_API_KEY", "valueFrom": key_ref})
    if host_network:
        env.append({"name": POD_IP_ENV, "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}})
    if engine.hf_token_secret_ref is not None:
        ref = engine.hf_token_secret_ref
        env.append({"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": ref.name, "key": ref.key}}})
    cache: dict[str, Any] = (
        {"persistentVolumeClaim": {"claimName": n["pvc"]}} if engine.model_cache else {"emptyDir": {}}
    )

    def probe() -> dict[str, Any]:
        # /v1 needs the API key; vLLM's HTTP server answers /health only once the engine (the weights) is up.
        return {"httpGet": {"path": "/health", "port": "http"}}

    container: dict[str, Any] = {
        "name": "vllm",
        "image": engine.image,
        **({"command": list(engine.command)} if engine.command else {}),
        "args": vllm_args(pool.spec.model, engine, host_network=host_network),
        "ports": [{"name": "http", "containerPort": engine.port, "protocol": "TCP"}],
        "env": env,
        "resources": resources,
        "volumeMounts": [
            {"name": "dshm", "mountPath": "/dev/shm"},  # noqa: S108 - tensor parallelism needs shared memory
            {"name": "models", "mountPath": "/models"},
            {"name": "home", "mountPath": "/home/vllm"},
        ],
        "startupProbe": {**probe(), "periodSeconds": 10, "failureThreshold": math.ceil(engine.startup_seconds / 10)},
        "readinessProbe": {**probe(), "periodSeconds": 5, "failureThreshold": 3},
        "livenessProbe": {"httpGet": {"path": "/health", "port": "http"}, "periodSeconds": 10, "failureThreshold": 3},
        "securityContext": {
            "runAsNonRoot": True,
            "runAsUser": ENGINE_UID,
            "allowPrivilegeEscalation": False,
            "capabilities": {"drop": ["ALL"]},
        },
    }
    tolerations = [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}] if engine.gpus else []
    spec: dict[str, Any] = {
        "selector": {"matchLabels": selector(name)},
        "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 0, "maxUnavailable": 1}},
        "template": {
            "metadata": {"labels": labels_for(pool)},
            "spec": {
                **host_network_fields(host_network),
                "containers": [container],
                # the engine never talks to the API server: no token in the pod
                "automountServiceAccountToken": False,
                "volumes": [
                    {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": SHM_SIZE}},
                    {"name": "models", **cache},
                    {"name": "home", "emptyDir": {}},
                ],
                "tolerations": tolerations + list(engine.tolerations),
                "nodeSelector": dict(engine.node_selector),
                # long enough for in-flight generations to finish after the endpoint stops receiving traffic
                "terminationGracePeriodSeconds": 120,
                "securityContext": {
                    "seccompProfile": {"type": "RuntimeDefault"},
                    "runAsNonRoot": True,
                    "runAsUser": ENGINE_UID,
                    "runAsGroup": ENGINE_UID,
                    "fsGroup": ENGINE_UID,  # the model cache volume is writable by the engine's user
                },
            },
        },
    }
    if engine.autoscaling is None:  # with autoscaling the HPA that KEDA creates owns .spec.replicas
        spec["replicas"] = engine.replicas
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": object_meta(pool, n["deployment"]), "spec": spec}


def build_engine_key(pool: InferencePool, value: str) -> dict[str, Any]:
    """The pool's engine API key Secret holding `value` (the operator generates it, once). Labelled as a Barge
    credential so the operator reads it (policy.check_secret); owned by the pool, so it goes with it."""
    labels = {**labels_for(pool), CREDENTIAL_LABEL: "true"}
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": object_meta(pool, names(str(pool.metadata["name"]))["enginekey"], labels),
        "type": "Opaque",
        "stringData": {ENGINE_KEY_FIELD: value},
    }


def build_service(pool: InferencePool) -> dict[str, Any]:
    name = str(pool.metadata["name"])
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": object_meta(pool, names(name)["service"]),
        "spec": {
            "selector": selector(name),
            "ports": [{"name": "http", "port": PORT, "targetPort": "http", "protocol": "TCP"}],
        },
    }


def build_pvc(pool: InferencePool) -> dict[str, Any] | None:
    engine = pool.spec.engine
    if engine is None or engine.model_cache is None:
        return None
    spec: dict[str, Any] = {
        "accessModes": ["ReadWriteOnce"] if max_replicas(engine) <= 1 else ["ReadWriteMany"],
        "resources": {"requests": {"storage": engine.model_cache.size}},
    }
    if engine.model_cache.storage_class_name:
        spec["storageClassName"] = engine.model_cache.storage_class_name
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": object_meta(pool, names(str(pool.metadata["name"]))["pvc"]),
        "spec": spec,
    }


def max_replicas(engine: EngineSpec) -> int:
    return engine.autoscaling.max_replicas if engine.autoscaling else engine.replicas


def build_pdb(pool: InferencePool) -> dict[str, Any] | None:
    engine = pool.spec.engine
    if engine is None or max_replicas(engine) <= 1:
        return None
    name = str(pool.metadata["name"])
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": object_meta(pool, names(name)["pdb"]),
        "spec": {"maxUnavailable": 1, "selector": {"matchLabels": selector(name)}},
    }


def build_service_monitor(pool: InferencePool) -> dict[str, Any] | None:
    engine = pool.spec.engine
    if engine is None or not engine.service_monitor:
        return None
    name = str(pool.metadata["name"])
    return {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "ServiceMonitor",
        "metadata": object_meta(pool, names(name)["servicemonitor"]),
        "spec": {
            "selector": {"matchLabels": selector(name)},
            "endpoints": [{"port": "http", "path": "/metrics", "interval": "15s"}],
        },
    }


def promql_string(value: str) -> str:
    """`value` as a double-quoted PromQL string literal (backslash, quote and line breaks escaped)."""
    escaped = value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n").replace("\r", "\\r")
    return f'"{escaped}"'


def build_scaled_object(pool: InferencePool, prometheus_url: str) -> dict[str, Any] | None:
    """KEDA on vllm:num_requests_waiting of this pool's model, and on the work Barge knows is waiting for the pool.

    vLLM's own metric only exists while a replica runs, so a pool at zero would never wake on it: the second
    trigger reads PENDING_METRIC, which the operator exports from the pool-backed jobs it watches. KEDA takes the
    larger of the two, and activates from zero when either is above 0."""
    engine = pool.spec.engine
    if engine is None or engine.autoscaling is None:
        return None
    scaling = engine.autoscaling
    name = str(pool.metadata["name"])
    namespace = promql_string(str(pool.metadata["namespace"]))
    # Label values are PromQL string literals: a model name cannot close the matcher and add its own query.
    query = f"sum(vllm:num_requests_waiting{{namespace={namespace},model_name={promql_string(pool.spec.model)}}})"
    pending = f"sum({PENDING_METRIC}{{namespace={namespace},pool={promql_string(name)}}})"
    return {
        "apiVersion": "keda.sh/v1alpha1",
        "kind": "ScaledObject",
        "metadata": object_meta(pool, names(name)["scaledobject"]),
        "spec": {
            "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": names(name)["deployment"]},
            "minReplicaCount": scaling.min_replicas,
            "maxReplicaCount": scaling.max_replicas,
            "pollingInterval": 15,
            "cooldownPeriod": 300,
            "triggers": [
                {
                    "type": "prometheus",
                    "metadata": {
                        "serverAddress": prometheus_url,
                        "query": query,
                        "threshold": str(scaling.target_waiting_requests),
                        "activationThreshold": "0",
                    },
                },
                {
                    "type": "prometheus",
                    "name": "barge-pending",
                    "metadata": {
                        "serverAddress": prometheus_url,
                        "query": pending,
                        "threshold": str(scaling.target_waiting_requests),
                        "activationThreshold": "0",
                    },
                },
            ],
        },
    }


def build_gateway_pool(pool: InferencePool) -> dict[str, Any] | None:
    if pool.spec.engine is None or not pool.spec.gateway.inference_pool:
        return None
    name = str(pool.metadata["name"])
    return {
        "apiVersion": "inference.networking.k8s.io/v1",
        "kind": "InferencePool",
        "metadata": object_meta(pool, names(name)["gateway"]),
        "spec": {"selector": {"matchLabels": selector(name)}, "targetPorts": [{"number": pool.spec.engine.port}]},
    }


def build_children(pool: InferencePool, prometheus_url: str, *, host_network: bool = False) -> list[dict[str, Any]]:
    """Every child an engine pool should have right now (a provider pool has none); `host_network`: the operator's
    BARGE_POD_HOST_NETWORK."""
    if pool.spec.engine is None:
        return []
    built = [
        build_deployment(pool, host_network=host_network),
        build_service(pool),
        build_pvc(pool),
        build_pdb(pool),
        build_service_monitor(pool),
        build_scaled_object(pool, prometheus_url),
        build_gateway_pool(pool),
    ]
    return [c for c in built if c is not None]


def endpoint(pool: InferencePool, template: str = "http://{name}.{namespace}.svc:8000/v1") -> str:
    """Where the operator (and the pool's workers) send requests: a provider pool's base URL, else `template`
    (BARGE_POOL_ENDPOINT_TEMPLATE) with the pool's Service {name}, its {namespace} and the engines' {port}.

    The default goes through the Service. Where the pods use the host's network on a node with only loopback
    addresses (Endpoints refuse 127.0.0.1, so that Service has none), `http://127.0.0.1:{port}/v1` reaches the
    engine on the operator's own node."""
    if pool.spec.provider is not None:
        return pool.spec.provider.base_url
    port = pool.spec.engine.port if pool.spec.engine is not None else PORT
    return template.format(
        name=names(str(pool.metadata["name"]))["service"], namespace=pool.metadata["namespace"], port=port
    )
