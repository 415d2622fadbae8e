"""spec.request.responseFormat: the JSON Schema every answer of a job must follow, checked as a schema here.

Why at admission: a schema the jsonschema library cannot use would make every answer "invalid", and the job would
spend its whole budget on retries before anyone saw why. A bad one is a validation error of the spec, which the
operator shows as Admitted=False (InvalidSpec) with this module's message. Answers are read in batch/structured.py.
"""

from __future__ import annotations

from typing import Any

import jsonschema  # type: ignore[import-untyped]  # no stubs in the lock
import orjson
from jsonschema.exceptions import SchemaError  # type: ignore[import-untyped]
from pydantic import Field, model_validator

from barge.api.common import Model

#: Bytes a schema may take (it is sent inside every request of the job).
MAX_SCHEMA_BYTES = 64 * 1024
#: Characters of a message kept (a schema error can quote the whole schema).
MESSAGE_CHARS = 300


def short(text: str, limit: int = MESSAGE_CHARS) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def validator_class(schema: dict[str, Any]) -> Any:
    """The jsonschema validator of the schema's own `$schema` draft (default 2020-12, what the providers read)."""
    return jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)


def schema_error(schema: Any) -> str:
    """Why `schema` cannot check answers ("" when it can): not an object, too large, or not a valid JSON Schema."""
    if not isinstance(schema, dict):
        return "must be a JSON Schema object"
    if len(orjson.dumps(schema)) > MAX_SCHEMA_BYTES:
        return f"is over {MAX_SCHEMA_BYTES // 1024} KiB"
    try:
        validator_class(schema).check_schema(schema)
    except SchemaError as exc:
        path = "/".join(str(p) for p in exc.absolute_path)
        where = f" at /{short(path, 200)}" if path else ""
        return f"is not a valid JSON Schema{where}: {short(exc.message)}"
    return ""


class ResponseFormatSpec(Model):
    """Structured outputs: every answer must be JSON that follows `schema`, asked of the provider as it expects it
    (OpenAI/Azure/vLLM response_format json_schema strict; Anthropic output_config.format) and checked by Barge."""

    name: str = Field(
        min_length=1,
        max_length=64,
        pattern=r"^[A-Za-z0-9_-]+$",
        description="Name of the schema (OpenAI's json_schema.name).",
    )
    json_schema: dict[str, Any] = Field(
        alias="schema",
        description="The JSON Schema (draft 2020-12 unless it names its own $schema); checked at admission. "
        "OpenAI's strict mode wants every property required and additionalProperties false.",
    )

    @model_validator(mode="after")
    def _check_schema(self) -> ResponseFormatSpec:
        error = schema_error(self.json_schema)
        if error:
            raise ValueError(f"spec.request.responseFormat.schema {error}")
        return self
