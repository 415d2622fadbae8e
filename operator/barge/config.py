"""Operator settings: one frozen, typed value built at start-up and passed explicitly (never a global)."""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import socket
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import yaml

from barge import ledger, sharding
from barge.k8s import pool_network as engine_fence
from barge.ledger import lifetime
from barge.policy import Policy, parse

PRIORITY_MAX = 2**31 - 1
"""Kopf compares priorities as integers; keep `auto` ones inside a signed 32-bit range every client reads."""


def _roots(text: str) -> tuple[Path, ...]:
    return tuple(Path(p) for p in text.split(":") if p)


def peering_priority(text: str) -> int:
    """BARGE_PEERING_PRIORITY / --priority: an integer, or `auto`.

    Kopf pauses every peer that sees a live peer of higher priority, and freezes all peers of equal priority, so
    replicas of one Deployment must not share one. `auto` hashes the pod name (POD_NAME, else the hostname, which
    is the pod name in a pod), the process id and 16 random bytes into 1..2**31-1: above a hand-run operator's
    default 0, and two replicas tie with odds of about 1 in 2**31 (if they ever do, Kopf logs the conflict and both
    pause until one restarts and draws again).
    """
    if text.strip().lower() != "auto":
        return int(text)
    name = os.environ.get("POD_NAME") or socket.gethostname()
    seed = f"{name}/{os.getpid()}".encode() + secrets.token_bytes(16)
    return 1 + int.from_bytes(hashlib.sha256(seed).digest()[:8], "big") % PRIORITY_MAX


@dataclass(frozen=True)
class OperatorConfig:
    namespaces: tuple[str, ...] = ()
    """Namespaces to watch; empty with all_namespaces=False means the current namespace only."""
    all_namespaces: bool = False
    """Watch the whole cluster."""
    metrics_port: int = 8080
    """Port of /metrics (Prometheus) and /healthz (liveness); 0 turns the server off."""
    ledger_url: str = "/var/lib/barge/ledger.db"
    """SQLite path or postgresql:// URL of the ledger (BARGE_LEDGER_URL)."""
    allowed_file_roots: tuple[Path, ...] = ()
    """Roots file:// inputs and outputs may use, added to every tenant's storage prefixes (BARGE_ALLOWED_FILE_ROOTS,
    colon-separated; each with {tenant} or {namespace}, unless BARGE_SHARED_FILE_ROOTS=true); none by default."""
    poll_seconds: float = 30.0
    """Seconds between reconcile steps of a running job (BARGE_POLL_SECONDS), with +-20% jitter."""
    min_batch_window: float = 3600.0
    """Closer than this to the deadline, leftovers go to the synchronous path (BARGE_MIN_BATCH_WINDOW)."""
    max_shard_requests: int = 0
    """Requests per batch at most; 0 = the provider's limit (BARGE_MAX_SHARD_REQUESTS)."""
    max_shard_bytes: int = 0
    """Encoded bytes per batch at most; 0 = the provider's limit (BARGE_MAX_SHARD_BYTES)."""
    admission_gather_seconds: float = 5.0
    """On a provider pool with a batch quota, a job waits this long in the admission queue before it may be
    admitted (BARGE_ADMISSION_GATHER_SECONDS), so jobs created together are ordered by priority and fair share."""
    admission_backoff_seconds: float = 60.0
    """First wait after a token_limit_exceeded answer, doubled with each one in a row up to 30 min
    (BARGE_ADMISSION_BACKOFF_SECONDS)."""
    second_door_seconds: float = 900.0
    """Seconds between scans of the credentials jobs use for batches Barge did not create (BARGE_SECOND_DOOR_SECONDS;
    0: off)."""
    second_door_window: float = 86400.0
    """How far back (seconds) a scan looks at a credential's batches (BARGE_SECOND_DOOR_WINDOW)."""
    focus_export_url: str = ""
    """Where the daily FOCUS 1.2 cost file goes (BARGE_FOCUS_EXPORT_URL, the chart's reports.focus.url): a folder
    URL (file://, s3://, az://) that gets focus-1.2-YYYY-MM-DD.csv for each UTC day; empty: no export."""
    focus_export_seconds: float = 86400.0
    """Seconds between exports (BARGE_FOCUS_EXPORT_SECONDS); each writes the previous UTC day's file whole."""
    focus_export_period: str = "hour"
    """Charge period of the exported rows, hour or day (BARGE_FOCUS_EXPORT_PERIOD)."""
    planner_memory_mb: int = 256
    """Address space of each job's planner process, which renders the templates (BARGE_PLANNER_MEMORY_MB)."""
    operator_reserve_mb: int = 384
    """Memory of the container kept for the operator itself and its planner server (BARGE_OPERATOR_RESERVE_MB):
    planners run only while the reserve plus BARGE_PLANNER_MEMORY_MB per planner fit the cgroup's limit."""
    delete_provider_copies: bool = True
    """Default of spec.retention.deleteProviderCopies (BARGE_DELETE_PROVIDER_COPIES, true/false): delete the
    provider's copies of prompts and results once a job's outputs are written."""
    output_expires_after_days: int = 14
    """Default of spec.retention.outputExpiresAfterDays (BARGE_OUTPUT_EXPIRES_AFTER_DAYS, 14..30)."""
    ledger_purge_seconds: float = 3600.0
    """Seconds between the operator's ledger purges (BARGE_LEDGER_PURGE_SECONDS; 0 turns the timer off): texts past
    their spec.retention keep times are dropped (operator/purge.py)."""
    ledger_purge_older_than: str = ""
    """Also drop the texts of every job that ended longer ago than this, e.g. 30d (BARGE_LEDGER_PURGE_OLDER_THAN;
    empty: only keep times count)."""
    shard: sharding.Shard = field(default_factory=sharding.Shard)
    """The namespaces this process owns among several active operators (BARGE_SHARD=i/N; barge/sharding.py)."""
    peering: str | None = None
    """Kopf peering name for several operator replicas; None runs standalone."""
    peering_priority: int = 0
    """This replica's Kopf peering priority (BARGE_PEERING_PRIORITY: an integer or `auto`, see peering_priority):
    the live peer with the highest priority works, the others pause."""
    peering_lifetime: int = 30
    """Seconds a peer's keep-alive stays valid (BARGE_PEERING_LIFETIME; Kopf's default is 60). A peer killed
    without a goodbye is replaced at most this long after its death; keep-alives go out every lifetime - 5..10 s."""
    prices_file: Path | None = None
    """A price table replacing the shipped one (BARGE_PRICES)."""
    prometheus_url: str = "http://prometheus-operated.monitoring.svc:9090"
    """Prometheus that KEDA queries for vllm:num_requests_waiting (BARGE_PROMETHEUS_URL)."""
    worker_image: str = "barge-operator:0.1.0"
    """Image of queue-worker pods (`barge worker`); normally the operator's own (BARGE_WORKER_IMAGE)."""
    pool_endpoint_template: str = "http://{name}.{namespace}.svc:8000/v1"
    """How the operator reaches an engine pool's Service (BARGE_POOL_ENDPOINT_TEMPLATE; override it when the
    operator runs outside the cluster, e.g. through a port-forward). {name}, {namespace} and {port} (the pool's
    spec.engine.port) are filled in: `http://127.0.0.1:{port}/v1` on a one-node lab with the host's network."""
    pod_host_network: bool = False
    """The pods Barge generates (vLLM engines, queue workers) use the node's network (BARGE_POD_HOST_NETWORK=true):
    hostNetwork with dnsPolicy ClusterFirstWithHostNet, for clusters with no Pod network (single-node labs, edge).
    An engine pod then listens on the node at its spec.engine.port; a worker declares no port and serves its
    metrics on one the kernel picks (replicas on one node would otherwise collide on one host port)."""
    worker_volumes: tuple[dict[str, Any], ...] = ()
    """Volumes the admin adds to every queue-worker pod (BARGE_WORKER_VOLUMES, JSON {"volumes": [...],
    "volumeMounts": [...]}, the chart's operator.workerVolumes / workerVolumeMounts): e.g. the volume behind a
    file:// storage prefix, so that workers can write their results there (their root filesystem is read-only)."""
    worker_volume_mounts: tuple[dict[str, Any], ...] = ()
    """Their mounts in the worker container (BARGE_WORKER_VOLUMES' volumeMounts)."""
    pool_network: engine_fence.PoolNetwork = field(default_factory=engine_fence.PoolNetwork)
    """Each engine pool's NetworkPolicy: on or off, and the operator, gateway and monitoring peers it admits
    (BARGE_POOL_NETWORK_POLICY, JSON; the chart's operator.poolNetworkPolicy; k8s/pool_network.py)."""
    policy: Policy = field(default_factory=Policy)
    """What tenants may do (BARGE_POLICY_FILE, a YAML document the chart mounts; BARGE_ALLOWED_FILE_ROOTS are
    added to its storage prefixes). Without a file: no storage URL, no endpoint beyond the providers' own."""
    extra: dict[str, str] = field(default_factory=dict)

    @classmethod
    def from_env(cls, **overrides: object) -> OperatorConfig:
        env = os.environ
        values: dict[str, object] = {
            "ledger_url": env.get("BARGE_LEDGER_URL", cls.ledger_url),
            "allowed_file_roots": _roots(env.get("BARGE_ALLOWED_FILE_ROOTS", "")),
            "poll_seconds": float(env.get("BARGE_POLL_SECONDS", cls.poll_seconds)),
            "min_batch_window": float(env.get("BARGE_MIN_BATCH_WINDOW", cls.min_batch_window)),
            "max_shard_requests": int(env.get("BARGE_MAX_SHARD_REQUESTS", cls.max_shard_requests)),
            "max_shard_bytes": int(env.get("BARGE_MAX_SHARD_BYTES", cls.max_shard_bytes)),
            "planner_memory_mb": int(env.get("BARGE_PLANNER_MEMORY_MB", cls.planner_memory_mb)),
            "operator_reserve_mb": int(env.get("BARGE_OPERATOR_RESERVE_MB", cls.operator_reserve_mb)),
            "admission_gather_seconds": float(env.get("BARGE_ADMISSION_GATHER_SECONDS", cls.admission_gather_seconds)),
            "admission_backoff_seconds": float(
                env.get("BARGE_ADMISSION_BACKOFF_SECONDS", cls.admission_backoff_seconds)
            ),
            "prices_file": Path(env["BARGE_PRICES"]) if env.get("BARGE_PRICES") else None,
            "focus_export_url": env.get("BARGE_FOCUS_EXPORT_URL", cls.focus_export_url),
            "second_door_seconds": float(env.get("BARGE_SECOND_DOOR_SECONDS", cls.second_door_seconds)),
            "second_door_window": float(env.get("BARGE_SECOND_DOOR_WINDOW", cls.second_door_window)),
            "focus_export_seconds": float(env.get("BARGE_FOCUS_EXPORT_SECONDS", cls.focus_export_seconds)),
            "focus_export_period": env.get("BARGE_FOCUS_EXPORT_PERIOD", cls.focus_export_period),
            "prometheus_url": env.get("BARGE_PROMETHEUS_URL", cls.prometheus_url),
            "worker_image": env.get("BARGE_WORKER_IMAGE", cls.worker_image),
            "pool_endpoint_template": env.get("BARGE_POOL_ENDPOINT_TEMPLATE", cls.pool_endpoint_template),
            "pod_host_network": _flag(env.get("BARGE_POD_HOST_NETWORK", "")),
            **_worker_volumes(env.get("BARGE_WORKER_VOLUMES", "")),
            "pool_network": engine_fence.parse(env.get(engine_fence.ENV, "")),
            "peering_priority": peering_priority(env.get("BARGE_PEERING_PRIORITY", str(cls.peering_priority))),
            "peering_lifetime": int(env.get("BARGE_PEERING_LIFETIME", cls.peering_lifetime)),
            "shard": sharding.parse(env.get("BARGE_SHARD", "")),
            "ledger_purge_seconds": float(env.get("BARGE_LEDGER_PURGE_SECONDS", cls.ledger_purge_seconds)),
            "ledger_purge_older_than": env.get("BARGE_LEDGER_PURGE_OLDER_THAN", cls.ledger_purge_older_than),
            "delete_provider_copies": env.get("BARGE_DELETE_PROVIDER_COPIES", "true").strip().lower()
            in ("true", "1", "yes"),
            "output_expires_after_days": int(env.get("BARGE_OUTPUT_EXPIRES_AFTER_DAYS", cls.output_expires_after_days)),
        }
        values.update({k: v for k, v in overrides.items() if v is not None})
        if "policy" not in overrides or overrides["policy"] is None:
            policy = load_policy(
                env.get("BARGE_POLICY_FILE"),
                env.get("BARGE_ALLOWED_FILE_ROOTS", ""),
                shared_file_roots=_flag(env.get("BARGE_SHARED_FILE_ROOTS", "")),
            )
            if _flag(env.get("BARGE_REQUIRE_TENANT_LABEL", "")):  # the chart sets it for new installs (M3)
                policy = replace(policy, require_tenant_label=True)
            values["policy"] = policy
        config = cls(**values)  # type: ignore[arg-type]
        if config.poll_seconds <= 0:
            raise ValueError("poll seconds must be positive")
        if config.ledger_purge_older_than:
            lifetime.seconds(config.ledger_purge_older_than)  # a bad duration stops the operator at start-up
        if not 14 <= config.output_expires_after_days <= 30:
            raise ValueError("output expiry must be 14..30 days (what Azure accepts; OpenAI accepts it too)")
        if config.shard.sharded and not ledger.is_postgresql(config.ledger_url):
            raise ValueError(
                f"BARGE_SHARD={config.shard}: several shards share one PostgreSQL ledger (BARGE_LEDGER_URL), "
                "where their admission is decided; a SQLite file belongs to one process"
            )
        if config.peering_lifetime < 2:
            raise ValueError("peering lifetime must be at least 2 seconds")
        if config.focus_export_period not in ("hour", "day") or config.focus_export_seconds <= 0:
            raise ValueError("FOCUS export: the period must be hour or day and the interval positive")
        return config


def _worker_volumes(text: str) -> dict[str, tuple[dict[str, Any], ...]]:
    """BARGE_WORKER_VOLUMES: a JSON object {"volumes": [Volume...], "volumeMounts": [VolumeMount...]}; a broken
    one stops the operator at start-up."""
    data = json.loads(text) if text.strip() else {}
    if not isinstance(data, dict) or set(data) - {"volumes", "volumeMounts"}:
        raise ValueError('BARGE_WORKER_VOLUMES must be a JSON object with "volumes" and "volumeMounts"')
    lists = {key: data.get(key) or [] for key in ("volumes", "volumeMounts")}
    for key, items in lists.items():
        if not isinstance(items, list) or not all(isinstance(i, dict) and i.get("name") for i in items):
            raise ValueError(f"BARGE_WORKER_VOLUMES {key} must be a list of objects with a name")
    return {"worker_volumes": tuple(lists["volumes"]), "worker_volume_mounts": tuple(lists["volumeMounts"])}


def _flag(text: str) -> bool:
    return text.strip().lower() in ("true", "1", "yes")


def load_policy(path: str | None, file_roots: str = "", *, shared_file_roots: bool = False) -> Policy:
    """The admin's policy file (YAML) plus the legacy file roots (each with {tenant} or {namespace}, unless
    BARGE_SHARED_FILE_ROOTS says one team uses this operator); a broken file stops the operator at start-up."""
    data = yaml.safe_load(Path(path).read_text()) if path else None
    if data is not None and not isinstance(data, dict):
        raise ValueError(f"policy file {path}: expected a mapping at the top")
    return parse(data, [r for r in file_roots.split(":") if r], shared_file_roots)
