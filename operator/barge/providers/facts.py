"""What each provider type's batch API allows and how Barge meets it: the providers table.

One source for `barge providers`, the provider row `barge plan` prints, and the generated page
docs/reference/providers.md. The numbers are the adapters' own (`max_requests`, `max_bytes`): a unit test builds
every adapter and compares, so the table cannot drift from what the sharder uses. Pure: no SDK is imported here.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class ProviderFacts:
    type: str
    reaches: str
    max_requests: int
    """The adapter's default shard cap in requests (Bedrock's comes from the Secret; this is its default)."""
    max_bytes: int
    requests_note: str
    batch_ratio: str
    """The batch price over the list price, as the price table applies it (`batchDiscount`)."""
    idempotent: str
    orphan: str
    retention: str
    window: str


MB = 1024 * 1024

FACTS: tuple[ProviderFacts, ...] = (
    ProviderFacts(
        "anthropic", "Anthropic Message Batches", 100_000, 256 * MB - 1024, "", "0.5", "no",
        "creation window + request count, confirmed by result ids (no metadata)",
        "the batch and its results, after it ends", "24 h",
    ),
    ProviderFacts(
        "openai", "OpenAI Batch", 50_000, 200 * MB, "", "0.5", "no",
        "Barge's metadata (`barge_job`, `barge_shard`)",
        "input, output and error files (a batch cannot be deleted); `output_expires_after` from `spec.retention`",
        "24 h",
    ),
    ProviderFacts(
        "azure-openai", "Azure OpenAI Global Batch", 100_000, 200 * MB, "", "0.5", "no", "metadata",
        "input, output and error files; `output_expires_after` (14 to 30 days)", "24 h",
    ),
    ProviderFacts(
        "openai-compatible", "any `/v1/files` + `/v1/batches` service (Groq, Together, vLLM, a proxy)", 50_000,
        100 * MB, "100 MB is Groq's and Together's input limit",
        "0.5 for Groq and Together; set the real price per job or pool", "no",
        "metadata when the service keeps it, else creation window + size + result ids",
        "input, output and error files (no `output_expires_after`)", "24 h (Groq accepts 24h to 7d)",
    ),
    ProviderFacts(
        "mistral", "Mistral batch inference", 1_000_000, 512 * MB - 1, "\"up to 1M requests\"", "0.5", "no",
        "metadata (Mistral batch jobs carry `metadata`)",
        "input, output and error files, then the job", "`timeout_hours: 24`",
    ),
    ProviderFacts(
        "bedrock", "Amazon Bedrock batch inference (S3 records)", 50_000, 1024**3 - 1,
        "100 .. 50,000 records: the Secret's `minRecordsPerJob` / `maxRecordsPerJob`; fewer go synchronously",
        "0.5", "**yes**: `clientRequestToken` from the ledger's intent",
        "the job name (`barge-<job tag>-<shard>-<digest>`)",
        "input, output and manifest objects in S3 (a job cannot be deleted)", "`timeoutDurationInHours: 24`",
    ),
    ProviderFacts(
        "gemini", "the Gemini API's Batch Mode", 100_000, 2 * 1024**3 - 1,
        "Barge's cap; the API documents no line count", "0.5; cached input at the cache price (not halved)", "no",
        "Barge's metadata in the display name, after listing every page",
        "input file, responses file, then the batch", "48 h (then EXPIRED, no results)",
    ),
    ProviderFacts(
        "vertex", "Vertex AI batch prediction (Gemini and Claude, GCS)", 200_000, 1024**3 - 1,
        "Claude: 4 live jobs per project (admission's default cap)",
        "0.5; Gemini's cached input at the cache price (not halved)", "no",
        "the display name (`barge?barge_job=..&barge_shard=..&d=..`), after listing every page",
        "the input object, every output object, then the job", "Vertex's own (then EXPIRED)",
    ),
)  # fmt: skip

BY_TYPE: dict[str, ProviderFacts] = {f.type: f for f in FACTS}

COLUMNS = (
    "type", "reaches", "requests per shard", "bytes per shard", "batch ÷ list price", "create idempotent?",
    "an orphan (created, not recorded) is found by", "retention: what Barge deletes", "window",
)  # fmt: skip


def size(n: int) -> str:
    """Bytes as the providers state them: 256 MB, 2 GB (a cap one byte or a wrapper's room below counts as it)."""
    for unit, name in ((1024**3, "GB"), (MB, "MB")):
        if n >= unit // 2:
            return f"{round(n / unit):g} {name}"
    return f"{n:,} B"


def plain(text: str) -> str:
    """A cell for a terminal: the Markdown marks dropped."""
    return text.replace("`", "").replace("**", "")


def row(facts: ProviderFacts) -> tuple[str, ...]:
    requests = f"{facts.max_requests:,}" + (f" ({facts.requests_note})" if facts.requests_note else "")
    return (
        facts.type,
        facts.reaches,
        requests,
        size(facts.max_bytes),
        facts.batch_ratio,
        facts.idempotent,
        facts.orphan,
        facts.retention,
        facts.window,
    )
