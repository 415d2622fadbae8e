"""Generate CustomResourceDefinitions from the typed models (the one source of truth for the API).

Why a converter: pydantic emits JSON Schema 2020-12 ($ref, anyOf-with-null, titles), while the API server
wants a structural OpenAPI v3 schema (every node typed, refs inlined, free-form maps marked with
x-kubernetes-preserve-unknown-fields). Pure: builds dicts, writes nothing.
"""

from __future__ import annotations

from typing import Any

import yaml
from pydantic import BaseModel

from barge.api.batchjob import LLMBatchJobSpec, LLMBatchJobStatus
from barge.api.pool import InferencePoolSpec, InferencePoolStatus
from barge.api.schedule import LLMBatchScheduleSpec, LLMBatchScheduleStatus

GROUP = "barge.dev"
VERSION = "v1alpha1"
CATEGORY = "barge"

_KEEP = {
    "type",
    "description",
    "properties",
    "required",
    "items",
    "enum",
    "default",
    "format",
    "pattern",
    "minimum",
    "maximum",
    "exclusiveMinimum",
    "exclusiveMaximum",
    "minLength",
    "maxLength",
    "minItems",
    "maxItems",
    "additionalProperties",
    "nullable",
}


def structural(schema: dict[str, Any], defs: dict[str, Any] | None = None) -> dict[str, Any]:
    """Turn one pydantic JSON-schema node into a structural OpenAPI v3 node."""
    defs = defs if defs is not None else schema.get("$defs", {})
    node = dict(schema)
    if "$ref" in node:
        target = defs[node.pop("$ref").rsplit("/", 1)[-1]]
        node = {**target, **{k: v for k, v in node.items() if k in ("description", "default")}}
    if "anyOf" in node:  # Optional[X] -> X (absent, never null, on the wire)
        variants = [v for v in node.pop("anyOf") if v.get("type") != "null"]
        if len(variants) != 1:
            raise ValueError(f"unsupported union in schema: {variants}")
        inner = structural(variants[0], defs)
        if "description" in node:
            inner["description"] = node["description"]
        if node.get("default") is not None:
            inner["default"] = node["default"]
        return _ordered(inner)
    if node.get("default", 0) is None:
        node.pop("default")
    out: dict[str, Any] = {k: v for k, v in node.items() if k in _KEEP or k.startswith("x-kubernetes-")}
    if "const" in node:
        out["enum"] = [node["const"]]
        out.setdefault("type", "string")
    if "enum" in out and "type" not in out:
        out["type"] = "string"
    for bound, plain in (("exclusiveMinimum", "minimum"), ("exclusiveMaximum", "maximum")):
        if isinstance(out.get(bound), int | float) and not isinstance(out[bound], bool):  # 2020-12 -> OpenAPI v3.0
            out[plain] = out[bound]
            out[bound] = True
    if out.get("type") == "number" and "format" not in out:
        out["format"] = "double"
    if "properties" in out:
        out["properties"] = {name: structural(sub, defs) for name, sub in out["properties"].items()}
        # A field with a default_factory (no "default" in pydantic's schema, not required) defaults to an
        # empty object or list, so the server fills in the nested defaults too. Optional fields carry
        # "default": null instead and stay absent.
        for name, sub in node["properties"].items():
            prop = out["properties"][name]
            if name not in out.get("required", []) and "default" not in sub and "default" not in prop:
                if prop.get("type") == "object":
                    prop["default"] = {}
                elif prop.get("type") == "array":
                    prop["default"] = []
        out.pop("additionalProperties", None)
        out["type"] = "object"
    elif out.get("type") == "object" or "type" not in out:
        extra = out.pop("additionalProperties", True)
        if extra is True or extra == {}:
            out["type"] = "object"
            out["x-kubernetes-preserve-unknown-fields"] = True
        else:
            out["type"] = "object"
            out["additionalProperties"] = structural(extra, defs)
    if "items" in out:
        out["items"] = structural(out["items"], defs)
    return _ordered(out)


def _ordered(node: dict[str, Any]) -> dict[str, Any]:
    order = ["type", "description"]
    return {k: node[k] for k in [*order, *sorted(k for k in node if k not in order)] if k in node}


def model_schema(model: type[BaseModel]) -> dict[str, Any]:
    return structural(model.model_json_schema(by_alias=True, mode="validation"))


def _crd(
    kind: str,
    plural: str,
    short: list[str],
    spec: type[BaseModel],
    status: type[BaseModel],
    columns: list[dict[str, Any]],
    description: str,
) -> dict[str, Any]:
    spec_schema = model_schema(spec)
    status_schema = model_schema(status)
    status_schema.pop("required", None)  # the operator writes status piece by piece
    # A new object gets `status.observedGeneration: 0` from the server, so kstatus readers (helm --wait, Flux,
    # kubectl wait) see it as InProgress until the operator has observed it, not Current for want of a status.
    status_schema["default"] = {}
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.{GROUP}", "labels": {"app.kubernetes.io/part-of": "barge"}},
        "spec": {
            "group": GROUP,
            "names": {
                "kind": kind,
                "listKind": f"{kind}List",
                "plural": plural,
                "singular": kind.lower(),
                "shortNames": short,
                "categories": [CATEGORY],
            },
            "scope": "Namespaced",
            "versions": [
                {
                    "name": VERSION,
                    "served": True,
                    "storage": True,
                    "subresources": {"status": {}},
                    "additionalPrinterColumns": columns,
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "description": description,
                            "required": ["spec"],
                            "properties": {
                                "apiVersion": {"type": "string", "description": "APIVersion of this object."},
                                "kind": {"type": "string", "description": "Kind of this object."},
                                "metadata": {"type": "object"},  # the API server allows nothing more here
                                "spec": spec_schema,
                                "status": status_schema,
                            },
                        }
                    },
                }
            ],
        },
    }


def _col(name: str, path: str, type_: str = "string", priority: int = 0, description: str = "") -> dict[str, Any]:
    col: dict[str, Any] = {"name": name, "type": type_, "jsonPath": path}
    if priority:
        col["priority"] = priority
    if description:
        col["description"] = description
    return col


def llmbatchjob_crd() -> dict[str, Any]:
    return _crd(
        "LLMBatchJob",
        "llmbatchjobs",
        ["lbj"],
        LLMBatchJobSpec,
        LLMBatchJobStatus,
        [
            _col("Phase", ".status.phase"),
            _col("Done", ".status.progress", description="succeeded/total"),
            _col("Failed", ".status.counts.failed", "integer"),
            _col("Cost", ".status.usage.costUSD", description="USD spent"),
            _col("Deadline", ".spec.deadline"),
            _col("Age", ".metadata.creationTimestamp", "date"),
            _col("Provider", ".spec.provider.type", priority=1),
            _col("Model", ".spec.provider.model", priority=1),
            _col("Tenant", ".spec.tenant", priority=1),
            _col("Refused", ".status.counts.refused", "integer", priority=1),
            _col("Invalid", ".status.counts.invalid", "integer", priority=1),
            _col(
                "InvalidOutput",
                ".status.counts.invalidOutput",
                "integer",
                priority=1,
                description="answers that broke spec.request.responseFormat",
            ),
            _col("Saved", ".status.usage.savedUSD", priority=1, description="USD saved against the sync price"),
        ],
        "LLMBatchJob runs bulk LLM work nobody is waiting for through a provider batch API or an InferencePool, "
        "with a ledger, a deadline with synchronous fallback, and exact per-tenant cost.",
    )


def inferencepool_crd() -> dict[str, Any]:
    return _crd(
        "InferencePool",
        "inferencepools",
        ["bpool"],
        InferencePoolSpec,
        InferencePoolStatus,
        [
            _col("Model", ".spec.model"),
            _col("Ready", ".status.readyReplicas", "integer"),
            _col("Endpoint", ".status.endpoint"),
            _col("Age", ".metadata.creationTimestamp", "date"),
        ],
        "InferencePool is capacity for one model: self-hosted vLLM on GPUs or an external provider deployment "
        "with a quota; batch jobs and queue workers draw from it.",
    )


def llmbatchschedule_crd() -> dict[str, Any]:
    return _crd(
        "LLMBatchSchedule",
        "llmbatchschedules",
        ["lbs"],
        LLMBatchScheduleSpec,
        LLMBatchScheduleStatus,
        [
            _col("Schedule", ".spec.schedule"),
            _col("TimeZone", ".spec.timeZone"),
            _col("Suspend", ".spec.suspend", "boolean"),
            _col("Active", ".status.active", "integer"),
            _col("Last", ".status.lastScheduleTime", "date", description="since the newest run's scheduled time"),
            _col("Next", ".status.nextScheduleTime", description="the next scheduled time (UTC)"),
            _col("Age", ".metadata.creationTimestamp", "date"),
            _col("Policy", ".spec.concurrencyPolicy", priority=1),
            _col("Held", ".status.held", "integer", priority=1),
            _col("LastRun", ".status.lastRun.name", priority=1),
            _col("LastPhase", ".status.lastRun.phase", priority=1),
        ],
        "LLMBatchSchedule creates an LLMBatchJob on a cron schedule in a time zone, like a CronJob creates Jobs, "
        "with the run date and a local-time deadline taken from the scheduled time.",
    )


def all_crds() -> dict[str, dict[str, Any]]:
    """File name -> CRD manifest."""
    return {
        f"{c['metadata']['name']}.yaml": c for c in (llmbatchjob_crd(), inferencepool_crd(), llmbatchschedule_crd())
    }


class _NoAliases(yaml.SafeDumper):
    def ignore_aliases(self, data: Any) -> bool:
        return True


def render(crd: dict[str, Any]) -> str:
    """The exact text of a generated CRD file."""
    return "# Generated by `barge crds` from barge.api; do not edit.\n" + yaml.dump(
        crd, Dumper=_NoAliases, sort_keys=False, width=110
    )
