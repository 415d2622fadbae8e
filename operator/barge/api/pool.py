"""InferencePool: capacity for one model, self-hosted (vLLM on GPUs) or an external provider deployment.

Batch jobs (`provider.type: pool`) and queue workers (`spec.workers[]`) both draw from a pool. The
source of `crds/inferencepools.barge.dev.yaml`. Short name `bpool`: `infpool` belongs to the Gateway API.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import ConfigDict, Field, model_validator

from barge.api.common import DNS_LABEL, Condition, Model, ModelPrice, SecretKeyRef, cel, validations
from barge.api.response_format import ResponseFormatSpec

Profile = Literal["interactive", "throughput"]

#: max_num_batched_tokens per profile: the latency/throughput dial of vLLM's continuous batching.
PROFILE_BATCHED_TOKENS: dict[str, int] = {"interactive": 2048, "throughput": 16384}


class Autoscaling(Model):
    """KEDA autoscaling of the engine on vllm:num_requests_waiting."""

    model_config = ConfigDict(
        json_schema_extra=validations(
            cel("self.minReplicas <= self.maxReplicas", "minReplicas must not exceed maxReplicas")
        )
    )

    min_replicas: int = Field(0, ge=0, le=1000, description="Minimum replicas; 0 scales to zero.")
    max_replicas: int = Field(4, ge=1, le=1000, description="Maximum replicas.")
    target_waiting_requests: int = Field(5, ge=1, description="Waiting requests per replica that trigger scaling.")

    @model_validator(mode="after")
    def _check(self) -> Autoscaling:
        if self.min_replicas > self.max_replicas:
            raise ValueError("minReplicas must not exceed maxReplicas")
        return self


class EngineArgs(Model):
    """vLLM engine arguments; 0 means the profile's or vLLM's default."""

    max_num_batched_tokens: int = Field(0, ge=0, description="--max-num-batched-tokens; 0 takes the profile's.")
    max_num_seqs: int = Field(0, ge=0, description="--max-num-seqs; 0 keeps vLLM's default.")
    gpu_memory_utilization: float = Field(0.9, gt=0, le=1, description="--gpu-memory-utilization.")
    max_model_len: int = Field(0, ge=0, description="--max-model-len; 0 keeps the model's.")
    enable_chunked_prefill: bool = Field(True, description="--enable-chunked-prefill (on by default in vLLM V1).")
    extra: list[str] = Field(default_factory=list, description="Extra flags, appended last.")


class ModelCache(Model):
    """PersistentVolumeClaim holding the model weights (the Hugging Face cache)."""

    size: str = Field("100Gi", description="Requested storage.", pattern=r"^[0-9]+(\.[0-9]+)?([KMGTPE]i?)?$")
    storage_class_name: str = Field("", description="StorageClass; empty uses the cluster default.")


class EngineSpec(Model):
    """Self-hosted vLLM engine."""

    model_config = ConfigDict(
        json_schema_extra=validations(
            cel(
                "!has(self.tensorParallelSize) || self.tensorParallelSize <= self.gpus",
                "spec.engine.tensorParallelSize must not exceed spec.engine.gpus",
                field_path=".tensorParallelSize",
            ),
            cel(
                "!has(self.args) || self.args.enableChunkedPrefill || self.args.maxModelLen == 0 || "
                "(self.args.maxNumBatchedTokens == 0 ? (self.profile == 'throughput' ? 16384 : 2048) : "
                "self.args.maxNumBatchedTokens) >= self.args.maxModelLen",
                "with chunked prefill off, max_num_batched_tokens must be at least maxModelLen",
                field_path=".args",
            ),
        )
    )

    image: str = Field("vllm/vllm-openai:v0.11.0", min_length=1, description="vLLM OpenAI-server image.")
    command: list[str] = Field(
        default_factory=list,
        max_length=16,
        description="The engine container's command, replacing the image's entrypoint (vLLM's image: `vllm serve`); "
        "the generated vLLM flags stay its arguments. Empty: the image's entrypoint. Only a command the admin's "
        "policy lists in pools.commands is admitted (ImagePolicy), e.g. [barge, emulator] for Barge's own image "
        "standing in for vLLM.",
    )
    gpus: int = Field(1, ge=0, le=64, description="nvidia.com/gpu per replica.")
    tensor_parallel_size: int | None = Field(None, ge=1, le=64, description="Defaults to gpus.")
    replicas: int = Field(1, ge=0, le=1000, description="Replicas when autoscaling is not set.")
    autoscaling: Autoscaling | None = Field(None, description="KEDA autoscaling on waiting requests.")
    profile: Profile = Field(
        "interactive",
        description="interactive (max_num_batched_tokens 2048, low inter-token latency) or throughput (16384).",
    )
    args: EngineArgs = Field(default_factory=EngineArgs, description="Engine arguments.")
    model_cache: ModelCache | None = Field(None, description="PVC for model weights.")
    hf_token_secret_ref: SecretKeyRef | None = Field(None, description="Hugging Face token for gated models.")
    startup_seconds: int = Field(1800, ge=60, description="Startup-probe budget while weights load.")
    port: int = Field(
        8000,
        ge=1024,
        le=65535,
        description="Port vLLM listens on. With the operator's pod host network (BARGE_POD_HOST_NETWORK) it is a port "
        "of the node: give each pool on a node its own. The pool's Service keeps port 8000.",
    )
    service_monitor: bool = Field(False, description="Also create a Prometheus Operator ServiceMonitor.")
    node_selector: dict[str, str] = Field(default_factory=dict, description="Node selector for the pods.")
    tolerations: list[dict[str, Any]] = Field(default_factory=list, description="Extra tolerations.")
    resources: dict[str, Any] = Field(default_factory=dict, description="Extra container resources.")

    @model_validator(mode="after")
    def _check(self) -> EngineSpec:
        if self.tensor_parallel_size is not None and self.tensor_parallel_size > self.gpus:
            raise ValueError("spec.engine.tensorParallelSize must not exceed spec.engine.gpus")
        batched = self.args.max_num_batched_tokens or PROFILE_BATCHED_TOKENS[self.profile]
        if not self.args.enable_chunked_prefill and self.args.max_model_len and batched < self.args.max_model_len:
            raise ValueError("with chunked prefill off, max_num_batched_tokens must be at least maxModelLen")
        return self


class PoolProvider(Model):
    """An external provider deployment this pool stands for."""

    model_config = ConfigDict(
        json_schema_extra=validations(
            cel(
                "self.type != 'openai-compatible' || (has(self.baseURL) && size(self.baseURL) > 0)",
                "spec.provider.baseURL is required when spec.provider.type is openai-compatible",
                field_path=".baseURL",
            ),
        )
    )

    type: Literal[
        "anthropic", "openai", "azure-openai", "openai-compatible", "mistral", "bedrock", "gemini", "vertex"
    ] = Field(description="Provider (openai-compatible needs baseURL).")
    model: str = Field(min_length=1, description="Model or (Azure) deployment name.")
    secret_ref: SecretKeyRef = Field(description="Secret holding the API key.")
    base_url: str = Field("", alias="baseURL", description="Handed to the SDK as base_url; Azure: endpoint.")
    api_version: str = Field("", description="Azure OpenAI api-version.")
    price: ModelPrice | None = Field(
        None,
        description="Price of this deployment for the jobs on the pool that bring none in spec.budget.price "
        "(a job's own price wins), used instead of the operator's price table (e.g. for an Azure deployment "
        "name the table cannot know).",
    )

    @model_validator(mode="after")
    def _check_base_url(self) -> PoolProvider:
        if self.type == "openai-compatible" and not self.base_url:
            raise ValueError("spec.provider.baseURL is required when spec.provider.type is openai-compatible")
        return self


class Quota(Model):
    """The model's quota; workers and jobs on the pool share it. 0 means unlimited."""

    tokens_per_minute: int = Field(0, ge=0, description="Tokens per minute.")
    requests_per_minute: int = Field(0, ge=0, description="Requests per minute.")
    enqueued_tokens: int = Field(
        0,
        ge=0,
        description="Provider pools: the deployment's batch quota of prompt tokens in live batches (Azure Global "
        "Batch enqueued tokens). Jobs on the pool are admitted while their estimated tokens fit what is left, and "
        "otherwise wait in phase Queued (Admitted=False, QuotaExhausted); pools naming the same deployment share it.",
    )
    max_live_batches: int = Field(
        0,
        ge=0,
        description="Provider pools: batches the deployment may have in flight at once, for the jobs of every pool "
        "on it.",
    )


class QueueSpec(Model):
    """The queue a worker reads."""

    model_config = ConfigDict(
        json_schema_extra=validations(
            cel(
                "self.type != 'redis-streams' || (has(self.address) && has(self.stream))",
                "redis-streams needs address and stream",
            ),
            cel(
                "self.type != 'rabbitmq' || (has(self.address) && has(self.queueName))",
                "rabbitmq needs address and queueName",
            ),
            cel(
                "self.type != 'azure-servicebus' || (has(self.namespace) && has(self.queueName))",
                "azure-servicebus needs namespace and queueName",
            ),
        )
    )

    type: Literal["redis-streams", "rabbitmq", "azure-servicebus"] = Field(description="Queue technology.")
    address: str | None = Field(None, description="host:port (Redis) or amqp:// URL without credentials.")
    stream: str | None = Field(None, description="Redis stream name.")
    consumer_group: str = Field("barge", description="Redis consumer group.")
    queue_name: str | None = Field(None, description="RabbitMQ or Service Bus queue.")
    namespace: str | None = Field(None, description="Service Bus namespace (FQDN).")
    auth_secret_ref: SecretKeyRef | None = Field(None, description="Secret with the connection credentials.")


class WorkerRequest(Model):
    """How one message becomes one request."""

    system: str = Field("", description="System prompt.")
    template: str = Field("{{ text }}", min_length=1, description="Sandboxed Jinja2 over the payload's fields.")
    max_tokens: int = Field(1024, ge=1, description="max_tokens.")
    params: dict[str, Any] = Field(default_factory=dict, description="Extra provider parameters.")
    response_format: ResponseFormatSpec | None = Field(
        None,
        description="Structured outputs: {name, schema}. Every answer must be JSON that follows the schema: a valid "
        "one is written with output_json; one that is not is asked again, up to maxAttempts calls, then written "
        "with status invalid_output and the validation error as error.",
    )
    max_attempts: int = Field(
        1, ge=1, le=10, description="Calls per message while its answers break responseFormat (each one is paid)."
    )
    service_tier: Literal["standard", "flex", "auto"] = Field(
        "standard",
        description="standard: the provider's default tier. flex: every call asks OpenAI's flex tier (batch rates, "
        "slower; its 429 resource unavailable leaves the message for redelivery). auto: flex, and a flex 429 asked "
        "again at once at standard. Providers without a flex tier are asked at standard.",
    )


class WorkerOutput(Model):
    """Where a worker writes results."""

    url: str = Field(min_length=1, description="Directory URL for results, keyed by correlationId.")


class Worker(Model):
    """A queue worker deployment drawing from this pool, scaled by KEDA and capped by the quota."""

    model_config = ConfigDict(
        json_schema_extra=validations(
            cel("self.minReplicas <= self.maxReplicas", "minReplicas must not exceed maxReplicas")
        )
    )

    name: str = Field(min_length=1, max_length=40, pattern=DNS_LABEL, description="Worker name (DNS label).")
    queue: QueueSpec = Field(description="Queue to read.")
    request: WorkerRequest = Field(default_factory=WorkerRequest, description="Request template.")
    tokens_per_request: int = Field(1000, ge=1, description="Token estimate per request, for the quota cap.")
    requests_per_minute_per_replica: int = Field(60, ge=1, description="Throughput of one replica.")
    target_backlog_per_replica: int = Field(20, ge=1, description="Backlog per replica KEDA aims for.")
    min_replicas: int = Field(0, ge=0, description="Minimum replicas; 0 scales to zero.")
    max_replicas: int = Field(10, ge=1, description="Maximum replicas; the effective max is capped by quota.")
    max_deliveries: int = Field(5, ge=1, description="Deliveries before a message is dead-lettered.")
    polling_interval_seconds: int = Field(
        15, ge=1, le=3600, description="Seconds between KEDA's looks at the queue (the ScaledObject's pollingInterval)."
    )
    cooldown_seconds: int = Field(
        120,
        ge=0,
        le=86400,
        description="Seconds the queue must stay empty before KEDA scales the worker to zero (cooldownPeriod).",
    )
    output: WorkerOutput = Field(description="Where results go.")

    @model_validator(mode="after")
    def _check(self) -> Worker:
        if self.min_replicas > self.max_replicas:
            raise ValueError("minReplicas must not exceed maxReplicas")
        return self


class Gateway(Model):
    """Interop with the Gateway API Inference Extension."""

    inference_pool: bool = Field(False, description="Also create an inference.networking.k8s.io InferencePool.")


class InferencePoolSpec(Model):
    """Desired state of an InferencePool: exactly one of engine and provider."""

    model_config = ConfigDict(
        json_schema_extra=validations(
            cel(
                "has(self.engine) != has(self.provider)",
                "exactly one of spec.engine and spec.provider must be set",
            ),
            cel(
                "!has(self.engine) || !has(self.quota) || "
                "((!has(self.quota.enqueuedTokens) || self.quota.enqueuedTokens == 0) && "
                "(!has(self.quota.maxLiveBatches) || self.quota.maxLiveBatches == 0))",
                "spec.quota.enqueuedTokens and maxLiveBatches are a provider deployment's batch quota: an engine pool "
                "has no batch API",
                field_path=".quota",
            ),
        )
    )

    model: str = Field(min_length=1, max_length=256, description="Served model name jobs and workers ask for.")
    engine: EngineSpec | None = Field(None, description="Self-hosted vLLM engine.")
    provider: PoolProvider | None = Field(None, description="External provider deployment.")
    quota: Quota = Field(default_factory=Quota, description="Model quota shared by workers and jobs.")
    workers: list[Worker] = Field(
        default_factory=list,
        max_length=32,
        description="Queue workers.",
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"]},
    )
    gateway: Gateway = Field(default_factory=Gateway, description="Gateway API Inference Extension interop.")

    @model_validator(mode="after")
    def _one_kind(self) -> InferencePoolSpec:
        if (self.engine is None) == (self.provider is None):
            raise ValueError("exactly one of spec.engine and spec.provider must be set")
        if self.engine is not None and (self.quota.enqueued_tokens or self.quota.max_live_batches):
            raise ValueError(
                "spec.quota.enqueuedTokens and maxLiveBatches are a provider deployment's batch quota: an engine pool "
                "has no batch API"
            )
        return self


class WorkerStatus(Model):
    """Per worker: the quota cap and what KEDA was told."""

    name: str = Field(description="Worker name.")
    quota_cap: int = Field(0, ge=0, description="Replicas the quota allows for this worker.")
    effective_max_replicas: int = Field(0, ge=0, description="min(maxReplicas, quotaCap).")
    scaled_object: str = Field("", description="Name of the generated KEDA ScaledObject.")


class InferencePoolStatus(Model):
    """Observed state of the pool."""

    model_config = ConfigDict(extra="ignore")

    observed_generation: int = Field(0, ge=0, description="The .metadata.generation last acted on.")
    conditions: list[Condition] = Field(
        default_factory=list,
        description="Ready, Available, Progressing, Degraded, QuotaCapped, ScalingConflict.",
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["type"]},
    )
    ready_replicas: int = Field(0, ge=0, description="Ready engine replicas.")
    endpoint: str = Field("", description="OpenAI-compatible base URL of the pool.")
    quota: Quota | None = Field(None, description="The quota in force, as last reconciled.")
    workers: list[WorkerStatus] = Field(default_factory=list, description="Per-worker caps.")


class InferencePool(Model):
    """Capacity for one model."""

    model_config = ConfigDict(extra="ignore")

    api_version: Literal["barge.dev/v1alpha1"] = Field("barge.dev/v1alpha1")
    kind: Literal["InferencePool"] = Field("InferencePool")
    metadata: dict[str, Any] = Field(default_factory=dict)
    spec: InferencePoolSpec
    status: InferencePoolStatus | None = None
