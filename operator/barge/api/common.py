"""Shapes shared by every Barge resource: the base model, references, Kubernetes-style conditions.

Why a shared base: the CRDs are generated from these models, so every model must speak camelCase on
the wire, reject unknown fields when a manifest is parsed locally, and carry a description per field.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

DNS_LABEL = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
#: A Kubernetes object name (RFC 1123 subdomain): what every reference to another object must be, so that a
#: name can never be a path (`../../ns-b/inferencepools/gpu`) once it is put into an API server URL.
DNS_SUBDOMAIN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
#: A key of a Secret or ConfigMap, as the API server allows it.
DATA_KEY = r"^[-._a-zA-Z0-9]+$"
DECIMAL = r"^[0-9]+(\.[0-9]+)?$"


def cel(rule: str, message: str, *, field_path: str | None = None) -> dict[str, str]:
    """One `x-kubernetes-validations` entry (a CEL rule the API server enforces)."""
    entry = {"rule": rule, "message": message}
    if field_path:
        entry["fieldPath"] = field_path
    return entry


def validations(*rules: dict[str, str]) -> dict[str, Any]:
    return {"x-kubernetes-validations": list(rules)}


class Model(BaseModel):
    """Base of all API models: camelCase aliases, unknown fields rejected, immutable values."""

    model_config = ConfigDict(
        alias_generator=to_camel,
        validate_by_name=True,
        validate_by_alias=True,
        serialize_by_alias=True,
        extra="forbid",
        frozen=True,
    )


class SecretKeyRef(Model):
    """A key of a Secret in the same namespace as the object that names it."""

    name: str = Field(
        description='Name of the Secret, in the same namespace; it must carry the label barge.dev/credential: "true".',
        min_length=1,
        max_length=253,
        pattern=DNS_SUBDOMAIN,
    )
    key: str = Field(
        "api-key",
        description="Key inside the Secret holding the value.",
        min_length=1,
        max_length=253,
        pattern=DATA_KEY,
    )


class LocalObjectRef(Model):
    """A reference to another object in the same namespace."""

    name: str = Field(
        description="Name of the object, in the same namespace (a DNS name).",
        min_length=1,
        max_length=253,
        pattern=DNS_SUBDOMAIN,
    )


class ConfigMapKeyRef(Model):
    """A key of a ConfigMap in the same namespace."""

    name: str = Field(
        description="Name of the ConfigMap, in the same namespace.", min_length=1, max_length=253, pattern=DNS_SUBDOMAIN
    )
    key: str = Field(
        description="Key inside the ConfigMap holding JSONL input.", min_length=1, max_length=253, pattern=DATA_KEY
    )


ConditionStatus = Literal["True", "False", "Unknown"]


class Condition(Model):
    """A condition in the shape every Kubernetes controller uses (metav1.Condition)."""

    type: str = Field(description="Type of the condition, e.g. Admitted or Complete.", max_length=316)
    status: ConditionStatus = Field(description="True, False or Unknown.")
    reason: str = Field(
        "", description="One CamelCase word saying why the condition is in this state.", max_length=1024
    )
    message: str = Field("", description="A human-readable explanation.", max_length=32768)
    last_transition_time: str | None = Field(None, description="When the status last changed (RFC 3339).")
    observed_generation: int | None = Field(
        None, description="The .metadata.generation this condition was computed from.", ge=0
    )


class ModelPrice(Model):
    """Price of a model in USD per million tokens, at the synchronous (list) rate; batches get the operator's
    batch discount (50%)."""

    input: str = Field(pattern=DECIMAL, max_length=32, description="USD per million input tokens.")
    output: str = Field(pattern=DECIMAL, max_length=32, description="USD per million output tokens.")
    cache_write: str = Field("0", pattern=DECIMAL, max_length=32, description="USD per million cache-write tokens.")
    cache_read: str = Field("0", pattern=DECIMAL, max_length=32, description="USD per million cache-read tokens.")
