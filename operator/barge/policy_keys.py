"""Every key of the admin's policy file, for the reference page (docs/reference/policy.md).

Why a table apart from the parsers: `barge.policy.parse` and the section parsers it calls (admission_policy,
limits, pool_placement, budget_policy) read the document piece by piece, so no single schema exists to print.
This table is that schema for people; tests/unit/test_policy_keys.py holds it to the parsers: a document built
from every key's example parses, each closed section refuses a key the table does not list, and the ledger keys
are exactly the ones barge.limits reads. Add a row here when a parser learns a key.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Key:
    path: str
    """Dotted path; `<tenant>` stands for a tenant's name, `[]` for each entry of a list."""
    kind: str
    default: str
    description: str
    example: Any
    """A value the parser accepts (the test parses a document of all of them)."""


KEYS: tuple[Key, ...] = (
    Key(
        "storage.prefixes",
        "list of strings",
        "none: no storage URL (inline and ConfigMap inputs only)",
        "Storage prefixes of every tenant not listed under storage.tenants, with `{tenant}` / `{namespace}` "
        "placeholders; every URL of a job (input, output, its results files) and of a worker must lie under one "
        "(`file`, `s3`, `az`/`abfs`, `gs`/`gcs`, `https`).",
        ["file:///data/{tenant}/", "s3://barge-{tenant}/"],
    ),
    Key(
        "storage.tenants.<tenant>",
        "list of strings",
        "",
        "A listed tenant gets exactly these prefixes instead of storage.prefixes.",
        ["s3://finance-reports/"],
    ),
    Key(
        "storage.ambientCredentials",
        "boolean",
        "`false`",
        "Let s3/az/gs be used with the operator's own cloud identity; otherwise a job brings credentialsSecretRef "
        "(CredentialPolicy).",
        False,
    ),
    Key(
        "storage.sharedFileRoots",
        "boolean",
        "`false`",
        "Accept BARGE_ALLOWED_FILE_ROOTS without `{tenant}`/`{namespace}` (one team per operator: every tenant may "
        "then read and write all of it).",
        False,
    ),
    Key(
        "endpoints.allow[]",
        "string or {host, private}",
        "none: only the providers' own hosts",
        "Hosts (fnmatch patterns) allowed as provider base URLs and http(s)/object-store endpoints beside the "
        "providers' own; plain http only for these. Unknown keys in an entry stop the operator.",
        "*.llm.example.com",
    ),
    Key(
        "endpoints.allow[].host",
        "string",
        "",
        "The host or pattern.",
        "llm-proxy.platform.svc.cluster.local",
    ),
    Key(
        "endpoints.allow[].private",
        "boolean",
        "`false`",
        "The host may resolve to a loopback, private, link-local or CGNAT address (never a metadata address "
        "unless listed this way).",
        True,
    ),
    Key(
        "pools.images",
        "list of strings",
        "`vllm/vllm-openai:*`, `docker.io/vllm/vllm-openai:*`",
        "fnmatch patterns an engine pool's image must match (ImagePolicy).",
        ["registry.example.com/vllm/vllm-openai:*"],
    ),
    Key(
        "pools.extraFlags",
        "list of strings",
        "none",
        "vLLM flags an engine pool may pass in engine.args.extra (ImagePolicy).",
        ["--enable-prefix-caching"],
    ),
    Key(
        "pools.commands",
        "list of lists of strings",
        "none: only the image's entrypoint",
        "Engine commands a pool may run instead of its image's entrypoint (spec.engine.command, each compared "
        "whole; ImagePolicy).",
        [["barge", "emulator"]],
    ),
    Key(
        "pools.nodeSelectors",
        "list of `key=value` patterns",
        "absent: any",
        "fnmatch patterns every entry of a pool's engine.nodeSelector must match (PlacementPolicy).",
        ["gpu.example.com/pool=team-*"],
    ),
    Key(
        "pools.tolerations[]",
        "string key or {key, effect}",
        "absent: any but the control-plane taints and the keyless one",
        "Tolerations a pool may add (PlacementPolicy). Unknown keys in an entry stop the operator.",
        [{"key": "nvidia.com/gpu"}, {"key": "dedicated", "effect": "NoSchedule"}],
    ),
    Key(
        "workers.maxPayloadBytes",
        "integer",
        "`10485760`",
        "The largest claim-check payload a queue worker reads; a larger one is dead-lettered.",
        10485760,
    ),
    Key(
        "tenancy.requireLabel",
        "boolean",
        "`false` (the chart sets BARGE_REQUIRE_TENANT_LABEL=true)",
        "Refuse jobs and pools of namespaces without the barge.dev/tenant label (TenantPolicy).",
        True,
    ),
    Key(
        "admission.maxPriority",
        "integer (-1000..1000)",
        "`0`",
        "The highest spec.priority that counts between tenants in a quota queue (a higher one orders only the "
        "tenant's own jobs).",
        0,
    ),
    Key(
        "admission.tenants.<tenant>.maxPriority",
        "integer (-1000..1000)",
        "admission.maxPriority",
        "The same bound for one tenant the admin trusts further (or less).",
        1000,
    ),
    Key(
        "admission.sharedDeployments[]",
        "list of {provider, baseURL, model, enqueuedTokens, maxLiveBatches}",
        "none",
        "The only provider deployments whose quota queue several tenants share, under the admin's quota (pools' "
        "own spec.quota is then ignored for it). provider, baseURL and model are required.",
        [
            {
                "provider": "azure-openai",
                "baseURL": "https://contoso-batch.openai.azure.com",
                "model": "gpt-4o-mini-global-batch",
                "enqueuedTokens": 50000000,
                "maxLiveBatches": 100,
            }
        ],
    ),
    Key(
        "budgets.default.monthlyUSD",
        "number (USD)",
        "none: no tenant budget",
        "Each tenant's own monthly budget, unless listed under budgets.tenants: what all of its jobs may spend in "
        "a calendar month, at the operator's prices (a tenant's own spec.budget.price or pool price does not lower "
        "it); over it new jobs are Admitted=False TenantBudgetExceeded and running jobs send nothing more.",
        "500",
    ),
    Key(
        "budgets.default.warnAt",
        "number (0..1)",
        "`0.8`",
        "Share of the budget at which the warning alert fires (BargeTenantBudgetWarning).",
        "0.8",
    ),
    Key(
        "budgets.tenants.<tenant>.monthlyUSD",
        "number (USD)",
        "budgets.default",
        "One tenant's monthly budget.",
        2000,
    ),
    Key("budgets.tenants.<tenant>.warnAt", "number (0..1)", "`0.8`", "Its warning share.", "0.9"),
    Key(
        "budgets.namespaces.<namespace>.monthlyUSD",
        "number (USD)",
        "",
        "One namespace's own monthly budget, counted over that namespace's jobs; it replaces the tenant's for them.",
        100,
    ),
    Key("budgets.namespaces.<namespace>.warnAt", "number (0..1)", "`0.8`", "Its warning share.", "0.5"),
    Key(
        "budgets.timeZone",
        "IANA time zone name",
        "`UTC`",
        "The zone whose calendar months the budgets count in.",
        "Europe/London",
    ),
    Key(
        "ledger.maxItemsPerJob",
        "integer",
        "`1000000`",
        "A job with more input lines is Admitted=False ItemLimit, with no row left.",
        1000000,
    ),
    Key(
        "ledger.maxItemsPerTenant",
        "integer",
        "`2000000`",
        "A tenant whose jobs hold this many item rows gets ItemLimit for new jobs until rows are purged.",
        2000000,
    ),
    Key(
        "ledger.listedInvalidLines",
        "integer",
        "`1000`",
        "Invalid lines stored per job with their reasons; the rest are counted (unlisted).",
        1000,
    ),
    Key(
        "ledger.minFreeBytes",
        "integer",
        "`134217728` (128 MiB)",
        "No plan while the ledger's volume has less free (Admitted=False LedgerFull; SQLite only).",
        134217728,
    ),
    Key(
        "ledger.maxKeepFor",
        "duration",
        "`30d`",
        "The longest spec.retention.keepPayloadsFor / keepOutputsFor (Admitted=False RetentionPolicy above it).",
        "30d",
    ),
    Key(
        "ledger.deletedJobsKeptFor",
        "duration",
        "`7d`",
        "A deleted job's audit rows are removed this long after the delete (0s: at the next purge).",
        "7d",
    ),
    Key(
        "gateway.aliases.<model>",
        "string (pool name) or {pool, tenants}",
        "none: a model is an InferencePool of the caller's namespace",
        "A model name `barge gateway` accepts (a request's `model`), resolved to the InferencePool `pool` in the "
        "caller's own namespace when the namespace has no pool named like the model (a team's own pool wins). "
        "`tenants` (list of tenant names) limits who may use it; absent: every tenant. An alias never reaches "
        "another namespace's pool. Unknown keys stop the operator and the gateway.",
        {"pool": "azure-global-batch", "tenants": ["acme"]},
    ),
    Key(
        "gateway.prefixes.<tenant>",
        "storage prefix",
        "none: the tenant's first storage prefix + `gateway/`",
        "Where `barge gateway` keeps the tenant's uploaded files and its batches' inputs and outputs: "
        "`<prefix><namespace>/files/...` ({tenant} and {namespace} placeholders allowed). It must lie under one of "
        "the tenant's storage prefixes (storage.tenants, else storage.prefixes); otherwise the operator and the "
        "gateway do not start, naming the key.",
        "s3://finance-reports/gateway/",
    ),
    Key(
        "reconcile.providers.openai.secretRef",
        "{namespace, name, key}",
        "none: no reconciliation",
        'The Secret (marked barge.dev/credential: "true") holding OpenAI\'s '
        "admin key (key defaults to adminKey). The operator compares the ledger with the provider's usage and cost "
        "reports every reconcile.intervalSeconds (barge_reconcile_difference_usd, alert BargeBillingMismatch).",
        {"namespace": "barge-system", "name": "openai-admin", "key": "adminKey"},
    ),
    Key(
        "reconcile.providers.openai.baseURL",
        "URL",
        "the provider's",
        "Where its admin API is. The same two keys under reconcile.providers.anthropic for Anthropic.",
        "https://api.openai.com/v1",
    ),
    Key(
        "reconcile.providers.azure-openai.secretRef",
        "{namespace, name, key}",
        "none: Azure not reconciled",
        'The Secret (marked barge.dev/credential: "true") holding the client secret of a service principal with '
        "Cost Management Reader on `scope` (key defaults to clientSecret). Azure's bill is read from Cost "
        "Management's query API (daily ActualCost of microsoft.cognitiveservices/accounts, USD only); baseURL "
        "is the management endpoint (default https://management.azure.com).",
        {"namespace": "barge-system", "name": "azure-costs", "key": "clientSecret"},
    ),
    Key("reconcile.providers.azure-openai.tenantId", "string", "required with Azure", "The Entra ID tenant.", "t-1"),
    Key("reconcile.providers.azure-openai.clientId", "string", "required with Azure", "The service principal.", "c-1"),
    Key(
        "reconcile.providers.azure-openai.scope",
        "string",
        "required with Azure",
        "The Cost Management scope: /subscriptions/<id> or /subscriptions/<id>/resourceGroups/<name> (the "
        "resource group of the Azure OpenAI resource keeps other resources' cost out).",
        "/subscriptions/00000000-0000-0000-0000-000000000000/resourceGroups/llm",
    ),
    Key(
        "reconcile.providers.azure-openai.loginURL",
        "URL",
        "`https://login.microsoftonline.com`",
        "Where the service principal's token is asked for (client credentials).",
        "https://login.microsoftonline.com",
    ),
    Key(
        "reconcile.providers.mistral",
        "{} (no keys)",
        "absent",
        "Accepted, but Mistral's bill cannot be compared per UTC day (its Admin API reports per billing month): the "
        "operator logs `not available for mistral: <reason>` and exports no difference series for it.",
        {},
    ),
    Key(
        "reconcile.providers.gemini",
        "{} (no keys)",
        "absent",
        "Accepted, but the Gemini API has no bill of its own to compare (Google bills it through Cloud Billing): the "
        "operator logs `not available for gemini: <reason>` and exports no difference series for it.",
        {},
    ),
    Key("reconcile.thresholdUSD", "number (USD)", "`0.01`", "A provider's day differing by more is a mismatch.", 1),
    Key("reconcile.intervalSeconds", "number", "`86400`", "Seconds between comparisons.", 86400),
    Key("reconcile.days", "integer (1..31)", "`3`", "Complete UTC days compared each time, ending yesterday.", 3),
    Key(
        "bedrock.roles.<tenant>",
        "list of IAM role ARNs",
        "unset: any role the job's Secret names (AWS's iam:PassRole decides)",
        "The service roles a tenant's bedrock jobs may have Bedrock assume (the Secret's roleArn); the tenant "
        '`"*"` lists roles every tenant may name. Once bedrock.roles is set, a job naming another role stays '
        "Admitted=False with reason ProviderPolicy.",
        ["arn:aws:iam::111122223333:role/acme-batch"],
    ),
)

#: Sections where the parser refuses a key it does not know: since #27 every one (a typo stops the operator).
CLOSED = (
    "",
    "storage",
    "endpoints",
    "pools",
    "workers",
    "tenancy",
    "admission",
    "ledger",
    "budgets",
    "gateway",
    "reconcile",
    "bedrock",
)


def example_document() -> dict[str, Any]:
    """A policy document setting every key of the table to its example."""
    doc: dict[str, Any] = {}
    for key in KEYS:
        if "[]." in key.path:
            continue  # the entries' keys are covered by the list's own example
        path = key.path.removesuffix("[]").replace("<tenant>", "acme").replace("<namespace>", "claims")
        parts = path.replace("<model>", "gpt-4o").split(".")
        node = doc
        for part in parts[:-1]:
            node = node.setdefault(part, {})
        node[parts[-1]] = key.example if not key.path.endswith("[]") or isinstance(key.example, list) else [key.example]
    return doc
