"""LLMBatchJob: bulk LLM work that nobody is waiting for, run through a provider batch API or a pool.

These models are the single source of `crds/llmbatchjobs.barge.dev.yaml` and of manifest parsing in
`barge plan` / `barge run`. Rules the API server must enforce live here as CEL next to the fields, and are
mirrored by pydantic validators so a local run rejects what the cluster would reject.
"""

from __future__ import annotations

import re
from datetime import datetime
from decimal import Decimal
from typing import Any, Literal

from pydantic import ConfigDict, Field, model_validator

from barge.api.common import (
    DECIMAL,
    Condition,
    ConfigMapKeyRef,
    LocalObjectRef,
    Model,
    ModelPrice,
    SecretKeyRef,
    cel,
    validations,
)
from barge.api.response_format import ResponseFormatSpec

ProviderType = Literal[
    "anthropic", "openai", "azure-openai", "openai-compatible", "mistral", "bedrock", "gemini", "vertex", "pool"
]
Phase = Literal[
    "Pending", "Queued", "Submitting", "Running", "Retrying", "FallingBack", "Succeeded", "Failed", "Suspended"
]
TERMINAL_PHASES: frozenset[str] = frozenset({"Succeeded", "Failed"})

#: Placeholders a customId template may use; anything else is rejected before submission.
CUSTOM_ID_FIELDS = ("id", "promptVersion", "runDate", "tenant", "line")
_PLACEHOLDER = re.compile(r"\{([^{}]*)\}")
CUSTOM_ID_TEMPLATE = r"^([^{}]|\{(" + "|".join(CUSTOM_ID_FIELDS) + r")\})*$"

#: Request keys Barge sets itself; spec.request.params may not override them (the job is priced by them, and
#: `n` or `stream` would multiply the cost or break the result format).
RESERVED_PARAMS = ("model", "max_tokens", "max_completion_tokens", "messages", "system", "custom_id", "n", "stream")

#: Keys of a passthrough line's `body` that are refused (the line becomes invalid): they would multiply the cost,
#: break the result format or rename the item. `model` is not among them: Barge replaces it (spec.provider.model or
#: the pool's), and `max_tokens` / `max_completion_tokens` may only lower spec.request.maxTokens, which prices the job.
PASSTHROUGH_RESERVED = ("custom_id", "n", "stream", "stream_options")
RequestMode = Literal["template", "passthrough"]
#: What each request asks for: a chat completion, the embedding of the rendered text, or a Responses API answer
#: (providers/encoding.py).
Endpoint = Literal["chat", "embeddings", "responses"]
#: Providers with a batch embeddings endpoint; any other is refused at admission (Admitted=False, InvalidSpec).
EMBEDDINGS_PROVIDERS = ("openai", "azure-openai", "openai-compatible", "pool")
#: Providers whose batch API takes /v1/responses lines. Azure OpenAI Global Batch documents /chat/completions and
#: /embeddings lines only; openai-compatible services, Mistral, Anthropic and engine pools have no such endpoint.
RESPONSES_PROVIDERS = ("openai",)
#: Why each provider without it is refused (the InvalidSpec condition's message).
RESPONSES_REFUSED = {
    "azure-openai": "Azure OpenAI Global Batch takes /chat/completions and /embeddings lines, not /v1/responses; "
    "use spec.request.endpoint chat",
    "pool": "an engine pool serves chat and embeddings through vLLM's OpenAI API; use spec.request.endpoint chat",
}
#: spec.request.params keys a responses job may not set: Barge renders them (the job is priced by them).
RESPONSES_RESERVED = ("input", "instructions", "max_output_tokens")

#: Spec fields that may change after creation; everything else is fixed like a Job's pod template.
MUTABLE_SPEC_FIELDS = ("suspend", "deadline", "successRatio", "budget", "retention", "priority")
IMMUTABLE_SPEC_FIELDS = (
    "tenant",
    "provider",
    "input",
    "request",
    "customId",
    "runDate",
    "retry",
    "fallback",
    "output",
)


def _immutable(field: str) -> dict[str, str]:
    return cel(
        f"has(self.{field}) == has(oldSelf.{field}) && (!has(self.{field}) || self.{field} == oldSelf.{field})",
        f"spec.{field} is immutable after creation (like a Job's template); create a new LLMBatchJob",
        field_path=f".{field}",
    )


class ProviderSpec(Model):
    """Where the requests go."""

    model_config = ConfigDict(
        json_schema_extra=validations(
            cel(
                "(self.type == 'pool') == (has(self.poolRef) && size(self.poolRef.name) > 0)",
                "spec.provider.poolRef.name is required when spec.provider.type is pool, and only then",
                field_path=".poolRef",
            ),
            cel(
                "self.type == 'pool' || (has(self.model) && size(self.model) > 0)",
                "spec.provider.model is required unless spec.provider.type is pool",
                field_path=".model",
            ),
            cel(
                "self.type == 'pool' || has(self.secretRef)",
                "spec.provider.secretRef is required unless spec.provider.type is pool",
                field_path=".secretRef",
            ),
            cel(
                "self.type != 'openai-compatible' || (has(self.baseURL) && size(self.baseURL) > 0)",
                "spec.provider.baseURL is required when spec.provider.type is openai-compatible",
                field_path=".baseURL",
            ),
        )
    )

    type: ProviderType = Field(
        description="anthropic, openai, azure-openai, openai-compatible (any service serving OpenAI's /v1/files and "
        "/v1/batches at baseURL: Groq, Together, a vLLM batch API, a company proxy), mistral, bedrock (Amazon Bedrock "
        "batch inference of Claude models: the Secret's key holds a JSON object with accessKeyId, secretAccessKey, "
        "region, roleArn, inputS3Uri, outputS3Uri), "
        "gemini (the Gemini API's Batch Mode; the Secret holds a Gemini API key), vertex (Vertex AI batch "
        "prediction of Gemini and Claude models: the Secret's key holds a JSON object with serviceAccount, project, "
        "location, gcsPrefix), "
        "or pool (an InferencePool)."
    )
    model: str = Field(
        "",
        description="Model name; for Azure OpenAI the Global-Batch deployment name; "
        "for a pool, taken from the pool when empty.",
        max_length=256,
    )
    secret_ref: SecretKeyRef | None = Field(
        None, description="Secret in the job's namespace holding the provider API key."
    )
    base_url: str = Field(
        "",
        alias="baseURL",
        max_length=2048,
        description="Handed to the SDK as base_url unchanged (proxy, emulator); for Azure OpenAI the endpoint.",
    )
    api_version: str = Field("", max_length=64, description="Azure OpenAI api-version; empty uses Barge's default.")
    pool_ref: LocalObjectRef | None = Field(
        None, description="For type pool: the InferencePool in this namespace to run on."
    )

    @model_validator(mode="after")
    def _check(self) -> ProviderSpec:
        has_pool = self.pool_ref is not None and bool(self.pool_ref.name)
        if (self.type == "pool") != has_pool:
            raise ValueError("spec.provider.poolRef.name is required when spec.provider.type is pool, and only then")
        if self.type != "pool" and not self.model:
            raise ValueError("spec.provider.model is required unless spec.provider.type is pool")
        if self.type != "pool" and self.secret_ref is None:
            raise ValueError("spec.provider.secretRef is required unless spec.provider.type is pool")
        if self.type == "openai-compatible" and not self.base_url:
            raise ValueError("spec.provider.baseURL is required when spec.provider.type is openai-compatible")
        return self


def _cel_error(expression: str) -> str | None:
    """Why a CEL expression does not compile (celpy's parser), or None."""
    import celpy  # the operator's CEL (cel-python); imported where a spec has one

    try:
        celpy.Environment().compile(expression)
    except Exception as exc:  # celpy raises CELParseError, and others on odd input
        return " ".join(str(exc).split())[:300]
    return None


class FromJobSpec(Model):
    """Another LLMBatchJob's results as this job's input: the cascade (barge/cascade/). CEL sees one result line:
    id, custom_id, status, output, output_json (the output parsed as JSON, {} if it is not: ask with has()), usage,
    line and input (the upstream item's fields)."""

    name: str = Field(
        min_length=1,
        max_length=253,
        pattern=r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$",
        description="The upstream LLMBatchJob, in this job's namespace. The job waits (Pending, Admitted=False "
        "WaitingForUpstream) until it has results, then takes them as its batches land.",
    )
    namespace: str | None = Field(
        None,
        max_length=63,
        description="Only this job's own namespace is allowed: any other is refused (Admitted=False CrossNamespace).",
    )
    select: str = Field(
        "status == 'succeeded'",
        min_length=1,
        max_length=4096,
        description="CEL over a result line choosing the items that go on (true: goes on). An error or a value "
        "that is not a bool makes that item invalid, with the reason.",
    )
    fields: dict[str, str] = Field(
        default_factory=dict,
        max_length=64,
        description="Template variable -> CEL over the result line (e.g. claim: input.text, label: "
        "output_json.category). Empty: the upstream item's fields plus output and output_json.",
    )

    @model_validator(mode="after")
    def _compiles(self) -> FromJobSpec:
        for where, expression in [("select", self.select), *((f"fields.{k}", v) for k, v in self.fields.items())]:
            why = _cel_error(expression)
            if why is not None:
                raise ValueError(f"spec.input.fromJob.{where} is not a CEL expression: {why}")
        return self


class InputSpec(Model):
    """Where the JSONL items come from: exactly one of url, configMapRef, inline, fromJob."""

    model_config = ConfigDict(
        json_schema_extra=validations(
            cel(
                "[has(self.url), has(self.configMapRef), has(self.inline), has(self.fromJob)].filter(x, x).size() == 1",
                "exactly one of spec.input.url, spec.input.configMapRef, spec.input.inline, spec.input.fromJob "
                "must be set",
            ),
        )
    )

    url: str | None = Field(
        None,
        max_length=2048,
        description=(
            "JSONL location: file:// (under an allowed root), s3://, az://, gs://; a plain path in local runs."
        ),
    )
    config_map_ref: ConfigMapKeyRef | None = Field(None, description="A ConfigMap key holding JSONL.")
    inline: list[dict[str, Any]] | None = Field(
        None, max_length=1000, description="Items written in the manifest (small jobs and tests)."
    )
    from_job: FromJobSpec | None = Field(
        None, description="Another LLMBatchJob's results (same namespace), selected and mapped by CEL: a cascade."
    )
    id_field: str = Field("id", min_length=1, max_length=128, description="Field of each item holding its id.")
    credentials_secret_ref: LocalObjectRef | None = Field(
        None,
        description='Secret (same namespace, labelled barge.dev/credential: "true") with storage credentials for '
        "url: s3 aws_access_key_id + aws_secret_access_key [+ aws_session_token, endpoint_url, region]; az "
        "connection_string, or account_name + account_key or sas_token; gs service_account.json. Required for "
        "object storage unless the admin allows the operator's own credentials.",
    )

    @model_validator(mode="after")
    def _one_source(self) -> InputSpec:
        if sum(x is not None for x in (self.url, self.config_map_ref, self.inline, self.from_job)) != 1:
            raise ValueError(
                "exactly one of spec.input.url, spec.input.configMapRef, spec.input.inline, spec.input.fromJob "
                "must be set"
            )
        return self


class RequestSpec(Model):
    """How one input item becomes one request."""

    system: str = Field("", max_length=262144, description="System prompt, shared by every request.")
    template: str = Field(
        "{{ text }}",
        min_length=1,
        max_length=262144,
        description="Sandboxed Jinja2 template over the item's fields: the user message.",
    )
    max_tokens: int = Field(1024, ge=1, le=1_000_000, description="max_tokens of every request.")
    params: dict[str, Any] = Field(
        default_factory=dict,
        description="Extra provider parameters passed through (temperature, ...); never the ones Barge sets: "
        + ", ".join(RESERVED_PARAMS)
        + ".",
    )
    prompt_version: str = Field(
        "v1",
        min_length=1,
        max_length=32,
        pattern=r"^[A-Za-z0-9_.-]+$",
        description="Version of the prompt; part of the default customId.",
    )
    cache_prefix: bool = Field(True, description="Mark the shared system block for prompt caching.")
    mode: RequestMode = Field(
        "template",
        description="template: the user message is rendered from the item by `template` (with `system`). "
        "passthrough: each item's `body` field is an OpenAI chat-completions body sent as it is (messages, "
        "temperature, tools ...; converted for Anthropic), except that Barge sets the model, keeps maxTokens as "
        "the cap (a lower max_tokens/max_completion_tokens in the body is kept) and refuses the line if the body "
        "sets " + ", ".join(PASSTHROUGH_RESERVED) + "; system, template and params are then unused.",
    )
    response_format: ResponseFormatSpec | None = Field(
        None,
        description="Structured outputs: {name, schema}. Every answer must be JSON that follows the schema: a "
        "valid one is written as output_json beside output; one that is not is an invalid_output, retried up "
        "to retry.maxAttempts, then failed (failures.jsonl names the validation error).",
    )
    endpoint: Endpoint = Field(
        "chat",
        description="chat: each item is a chat completion. embeddings: each item is the embedding of the rendered "
        "template (one input per request; system, maxTokens and responseFormat unused): results.jsonl carries the "
        "vector as `embedding` and the input tokens as usage. OpenAI, Azure OpenAI, openai-compatible and engine "
        "pools (vLLM) only; Anthropic and Mistral jobs are refused at admission. responses: each item is an OpenAI "
        "Responses API call (/v1/responses lines: the template as input, system as instructions, maxTokens as "
        "max_output_tokens, responseFormat as text.format); results.jsonl keeps its text and function calls as "
        "for chat. OpenAI only; other providers are refused at admission naming why.",
    )
    dimensions: int | None = Field(
        None, ge=1, le=65536, description="embeddings: the vector's length (text-embedding-3 models can shorten it)."
    )
    encoding_format: Literal["float", "base64"] | None = Field(
        None,
        description="embeddings: float (a JSON list, the default) or base64 (little-endian float32 bytes, ~4x "
        "smaller in the ledger and results.jsonl).",
    )

    @property
    def output_bound(self) -> int:
        """Output tokens one item may cost at most: maxTokens; 0 for embeddings (a vector has no output tokens)."""
        return 0 if self.endpoint == "embeddings" else self.max_tokens

    @model_validator(mode="after")
    def _check_endpoint(self) -> RequestSpec:
        if self.endpoint == "responses":
            if self.mode == "passthrough":
                raise ValueError(
                    "spec.request.endpoint responses renders its input from template: mode passthrough sends chat "
                    "bodies"
                )
            reserved = sorted(k for k in self.params if k in RESPONSES_RESERVED)
            if reserved:
                raise ValueError(
                    f"spec.request.params may not set {reserved}: Barge renders them from system, template and "
                    "maxTokens"
                )
        if self.endpoint != "embeddings":
            if self.dimensions is not None or self.encoding_format is not None:
                raise ValueError("spec.request.dimensions and encodingFormat need spec.request.endpoint embeddings")
            return self
        if self.mode == "passthrough":
            raise ValueError(
                "spec.request.endpoint embeddings renders its input from template: mode passthrough sends chat bodies"
            )
        if self.response_format is not None:
            raise ValueError("spec.request.responseFormat asks for a chat answer; an embeddings job has none")
        if "input" in self.params:
            raise ValueError("spec.request.params may not set input: the template renders each item's input")
        return self

    @model_validator(mode="after")
    def _check_params(self) -> RequestSpec:
        reserved = sorted(k for k in self.params if k in RESERVED_PARAMS)
        if reserved:
            raise ValueError(
                f"spec.request.params may not set {reserved}: Barge sets them (and prices the job by them); "
                "use spec.provider.model, spec.request.maxTokens, system and template instead"
            )
        return self


class RetrySpec(Model):
    """Retries of transient outcomes (server errors, overload, rate limits, expiry)."""

    max_attempts: int = Field(3, ge=1, le=20, description="Attempts per item, the first included.")


class FallbackSpec(Model):
    """The synchronous path used for leftovers at the deadline."""

    sync: bool = Field(True, description="Finish leftovers synchronously at the deadline.")
    concurrency: int = Field(8, ge=1, le=512, description="Requests in flight at once.")
    requests_per_minute: int = Field(0, ge=0, description="Rate limit; 0 means unlimited.")
    tokens_per_minute: int = Field(0, ge=0, description="Token rate limit; 0 means unlimited.")
    service_tier: Literal["standard", "flex", "auto"] = Field(
        "standard",
        description="The provider's synchronous tier: standard (full price), flex (OpenAI's service_tier flex: "
        "batch rates, slower answers, 429 when it has no capacity, retried with backoff), or auto (flex while the "
        "deadline leaves room for the pending items at flex's measured pace, then standard). Ignored by providers "
        "without a flex tier (Anthropic, Azure, OpenAI-compatible, Mistral, pools): they are sent at standard. "
        "Each answer is priced at the tier it reports.",
    )


class BudgetSpec(Model):
    """Spending limit for the whole job."""

    max_cost_usd: str = Field(
        alias="maxCostUSD",
        pattern=DECIMAL,
        max_length=32,
        description="Refuse to submit, and stop resubmitting, past this many USD.",
    )
    price: ModelPrice | None = Field(
        None,
        description="Price of spec.provider.model for this job, used instead of the operator's price table "
        "(e.g. for an Azure deployment name the table cannot know). A job with a budget on a model without "
        "a price is not admitted.",
    )

    @property
    def max_cost(self) -> Decimal:
        return Decimal(self.max_cost_usd)


class OutputSpec(Model):
    """Where results.jsonl and failures.jsonl (or results.parquet and failures.parquet) are written."""

    url: str = Field(
        min_length=1,
        max_length=2048,
        description="Directory URL: file:// (under an allowed root), s3://, az://, gs://.",
    )
    credentials_secret_ref: LocalObjectRef | None = Field(
        None,
        description='Secret (same namespace, labelled barge.dev/credential: "true") with storage credentials for '
        "url: s3 aws_access_key_id + aws_secret_access_key [+ aws_session_token, endpoint_url, region]; az "
        "connection_string, or account_name + account_key or sas_token; gs service_account.json. Required for "
        "object storage unless the admin allows the operator's own credentials.",
    )
    format: Literal["jsonl", "parquet"] = Field(
        "jsonl",
        description="jsonl: results.jsonl and failures.jsonl, one JSON object per line. parquet: results.parquet "
        "and failures.parquet (zstd), the same fields as typed columns; for embeddings the vector as a fixed-size "
        "float32 list column `embedding` (its length spec.request.dimensions, else the first vector's). Content "
        "kept beside the text (tool calls, blocks, output_json) is a JSON text column.",
    )

    @property
    def results_name(self) -> str:
        return "results.parquet" if self.format == "parquet" else "results.jsonl"


DURATION = r"^[0-9]{1,6}[smhd]$"


class RetentionSpec(Model):
    """What Barge leaves behind at the provider once results are in output.url and the ledger. Unset fields take
    the operator's defaults (chart: retention.*), which delete at once and ask for the shortest file expiry."""

    delete_provider_copies: bool | None = Field(
        None,
        description="Once the job has ended and its results are written: delete the uploaded input file and the "
        "output/error files (OpenAI, Azure) or the ended batch with its results (Anthropic). Default true.",
    )
    output_expires_after_days: int | None = Field(
        None,
        ge=14,
        le=30,
        description="Days OpenAI and Azure keep a batch's output and error files (output_expires_after, sent at "
        "creation; Azure accepts 14..30). Default 14: Barge copies results as soon as a batch ends.",
    )
    keep_payloads_for: str = Field(
        "0s",
        pattern=DURATION,
        description="How long the ledger keeps the rendered prompts after the job ends (e.g. 7d, for replays); "
        "0s drops them once the job's outputs are written.",
    )
    keep_outputs_for: str = Field(
        "0s",
        pattern=DURATION,
        description="How long the ledger keeps the model outputs after they are written to output.url; "
        "0s drops them at once (results.jsonl is the copy).",
    )


class LLMBatchJobSpec(Model):
    """Desired state of an LLMBatchJob. Immutable after creation except suspend, deadline, successRatio, budget,
    retention, priority."""

    model_config = ConfigDict(json_schema_extra=validations(*(_immutable(f) for f in IMMUTABLE_SPEC_FIELDS)))

    tenant: str = Field(
        "",
        max_length=63,
        pattern=r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?)?$",
        description="Metering key for cost: the namespace's tenant (label barge.dev/tenant, else the namespace "
        "name), set by the admin; when given it must repeat that, or the job is not admitted.",
    )
    priority: int = Field(
        0,
        ge=-1000,
        le=1000,
        description="Admission order on a provider pool with a batch quota (spec.quota.enqueuedTokens or "
        "maxLiveBatches): higher first; at equal priority tenants take turns, then the oldest job goes first.",
    )
    provider: ProviderSpec = Field(description="Where the requests go.")
    input: InputSpec = Field(description="Where the items come from.")
    request: RequestSpec = Field(default_factory=RequestSpec, description="How an item becomes a request.")
    custom_id: str = Field(
        "{id}-{promptVersion}-{runDate}",
        min_length=1,
        max_length=256,
        pattern=CUSTOM_ID_TEMPLATE,
        description="Template of each request's custom_id; placeholders: " + ", ".join(CUSTOM_ID_FIELDS) + ".",
    )
    run_date: str | None = Field(
        None,
        pattern=r"^[0-9]{4}-[0-9]{2}-[0-9]{2}$",
        description="Run date (YYYY-MM-DD) used in custom ids; defaults to the creation date (UTC).",
    )
    deadline: datetime | None = Field(
        None,
        description="Barge's own cut-off (RFC 3339), earlier than the "
        "provider's 24 h; leftovers then go to the sync path.",
    )
    success_ratio: str = Field(
        "0.99",
        pattern=r"^(0(\.[0-9]+)?|1(\.0+)?)$",
        description="Fraction of items that must end with a result (succeeded or refused); below it the job is Failed.",
    )
    retry: RetrySpec = Field(default_factory=RetrySpec, description="Retries of transient outcomes.")
    fallback: FallbackSpec = Field(default_factory=FallbackSpec, description="Synchronous fallback at the deadline.")
    budget: BudgetSpec | None = Field(None, description="Spending limit.")
    output: OutputSpec = Field(description="Where results are copied.")
    suspend: bool = Field(False, description="True cancels in-flight batches and holds the job.")
    retention: RetentionSpec = Field(
        default_factory=RetentionSpec, description="What is deleted at the provider after ingestion."
    )

    @model_validator(mode="after")
    def _check_embeddings_provider(self) -> LLMBatchJobSpec:
        if self.request.endpoint == "embeddings" and self.provider.type not in EMBEDDINGS_PROVIDERS:
            raise ValueError(
                f"spec.request.endpoint embeddings is not offered by {self.provider.type}: its batch API has no "
                f"embeddings endpoint; use one of {', '.join(EMBEDDINGS_PROVIDERS)}"
            )
        return self

    @model_validator(mode="after")
    def _check_responses_provider(self) -> LLMBatchJobSpec:
        kind = self.provider.type
        if self.request.endpoint == "responses" and kind not in RESPONSES_PROVIDERS:
            why = RESPONSES_REFUSED.get(kind, "its batch API has no responses endpoint")
            raise ValueError(f"spec.request.endpoint responses is not offered by {kind}: {why}")
        return self

    @model_validator(mode="after")
    def _check_custom_id(self) -> LLMBatchJobSpec:
        unknown = [p for p in _PLACEHOLDER.findall(self.custom_id) if p not in CUSTOM_ID_FIELDS]
        if unknown:
            raise ValueError(f"spec.customId uses unknown placeholder(s) {unknown}; known: {list(CUSTOM_ID_FIELDS)}")
        return self

    @property
    def ratio(self) -> Decimal:
        return Decimal(self.success_ratio)


class Counts(Model):
    """How many items are in each state."""

    total: int = Field(0, ge=0, description="Items read from the input (valid or not).")
    pending: int = Field(0, ge=0, description="Items not yet submitted.")
    submitted: int = Field(0, ge=0, description="Items in a live batch.")
    succeeded: int = Field(0, ge=0, description="Items with a result.")
    refused: int = Field(0, ge=0, description="Items the model refused (a result, not a failure).")
    invalid: int = Field(0, ge=0, description="Items that can never succeed (bad input or request).")
    failed: int = Field(0, ge=0, description="Items that ended without a result after all attempts.")
    invalid_output: int = Field(
        0,
        ge=0,
        description="Items whose last answer broke spec.request.responseFormat (retrying, or failed for good).",
    )
    retrying: int = Field(0, ge=0, description="Items waiting to be resubmitted.")
    via_fallback: int = Field(0, ge=0, description="Items finished through the synchronous path.")


class BatchRecord(Model):
    """One provider batch (the status keeps the newest few; the ledger keeps them all)."""

    id: str = Field(description="Provider batch id.")
    attempt: int = Field(1, ge=1, description="Attempt number of the items in it.")
    requests: int = Field(0, ge=0, description="Requests in the batch.")
    state: str = Field("", description="Provider status of the batch.")
    submitted_at: str | None = Field(None, description="When it was created (RFC 3339).")
    ended_at: str | None = Field(None, description="When it ended (RFC 3339).")


class Usage(Model):
    """Tokens and money, counted once per batch."""

    input_tokens: int = Field(0, ge=0, description="Input tokens billed.")
    output_tokens: int = Field(0, ge=0, description="Output tokens billed.")
    cache_read_tokens: int = Field(0, ge=0, description="Prompt-cache read tokens.")
    cache_write_tokens: int = Field(0, ge=0, description="Prompt-cache write tokens.")
    cost_usd: str = Field("0", alias="costUSD", description="Actual cost so far, in USD.")
    estimated_cost_usd: str = Field("0", alias="estimatedCostUSD", description="Estimate made before submitting.")
    saved_usd: str = Field("0", alias="savedUSD", description="Saved against the synchronous price.")


class LLMBatchJobStatus(Model):
    """Observed state, written only by the operator through the status subresource."""

    model_config = ConfigDict(extra="ignore")

    phase: Phase = Field("Pending", description="Where the job is in its life.")
    observed_generation: int = Field(0, ge=0, description="The .metadata.generation last acted on.")
    conditions: list[Condition] = Field(
        default_factory=list,
        description="Admitted, Submitted, Complete, Failed, DeadlineExceeded, BudgetExceeded.",
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["type"]},
    )
    counts: Counts = Field(default_factory=Counts, description="Items by state.")
    progress: str = Field("", description="succeeded/total, for the DONE column.")
    batches: list[BatchRecord] = Field(
        default_factory=list,
        max_length=50,
        description="The newest provider batches; the ledger has them all.",
    )
    usage: Usage = Field(default_factory=Usage, description="Tokens and cost.")
    started_at: str | None = Field(None, description="When work started (RFC 3339).")
    completed_at: str | None = Field(None, description="When the job became terminal (RFC 3339).")
    results_url: str | None = Field(
        None, alias="resultsURL", description="Where results.jsonl (or results.parquet) is."
    )
    message: str = Field("", description="A human-readable summary of the current state.")


class LLMBatchJob(Model):
    """A bulk LLM job: submitted in provider batches, with a ledger, a deadline, and exact cost."""

    model_config = ConfigDict(extra="ignore")

    api_version: Literal["barge.dev/v1alpha1"] = Field("barge.dev/v1alpha1")
    kind: Literal["LLMBatchJob"] = Field("LLMBatchJob")
    metadata: dict[str, Any] = Field(default_factory=dict)
    spec: LLMBatchJobSpec
    status: LLMBatchJobStatus | None = None
