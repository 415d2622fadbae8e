"""The adapters the provider contract runs on: one row per provider type, nothing else per provider.

A new provider is an adapter in `barge.providers`, emulator endpoints in `barge.emulator`, and one `Case` here;
`test_provider_contract.py` then holds it to everything the engine relies on.
"""

from __future__ import annotations

from dataclasses import dataclass

from barge.providers import BatchProvider, make_provider


@dataclass(frozen=True)
class Case:
    """One adapter as the contract suite drives it against `barge emulator`."""

    kind: str
    """The provider type (spec.provider.type)."""
    model: str
    """A model the emulator and the price table know."""
    path: str = ""
    """Appended to the emulator's URL to make spec.provider.baseURL."""
    objects: int = 1
    """What `delete_objects` deletes of an ended batch where every request succeeded."""
    refusals: bool = True
    """The provider reports refusals (content filters) as such; Mistral's API has no such finish reason."""
    idempotent_create: bool = False
    """Creates carry an idempotency key (Bedrock's clientRequestToken), so the adapter retries them: the same job."""

    @property
    def id(self) -> str:
        if self.kind == "vertex":  # two rows, one per model family
            return f"vertex-{self.model.split('-')[0]}"
        return f"{self.kind}{self.path.replace('/', '-')}" if self.path else self.kind

    def base_url(self, emulator_url: str) -> str:
        return emulator_url + self.path

    def provider(self, emulator_url: str, key: str = "k", sync_retries: int = 0) -> BatchProvider:
        if self.kind == "bedrock":  # its Secret is a JSON object, its records live in moto's S3
            from tests.contract.bedrock_case import bedrock

            return bedrock(self.base_url(emulator_url), key, sync_retries)
        if self.kind == "vertex":  # its Secret is a service account's JSON, its files live in a GCS server
            from tests.contract.vertex_case import vertex

            return vertex(self.base_url(emulator_url), key, sync_retries)
        return make_provider(self.kind, key, base_url=self.base_url(emulator_url), sync_retries=sync_retries)


CASES = [
    Case("anthropic", "claude-sonnet-4-6", objects=1),  # the batch with its results
    Case("openai", "gpt-4o-mini", "/v1", objects=2),  # input + output file (no error file)
    Case("azure-openai", "gpt-4o-mini-batch", objects=3),  # input, output and Azure's empty error file
]
CASES += [
    Case("openai-compatible", "llama-3.1-8b-instant", "/groq/openai/v1", objects=2),  # Groq's base path
    Case("openai-compatible", "meta-llama/Llama-3.3-70B-Instruct-Turbo", "/together/v1", objects=2),  # Together's
]
CASES += [Case("mistral", "mistral-small-latest", "/mistral", objects=3, refusals=False)]  # input, output, job
CASES += [Case("gemini", "gemini-2.5-flash", "/gemini", objects=3)]  # input file, responses file, batch
# S3 input, output and manifest objects; creates retried under one clientRequestToken (tests/contract/bedrock_case.py)
CASES += [Case("bedrock", "anthropic.claude-haiku-4-5-20251001-v1:0", "/bedrock", objects=3, idempotent_create=True)]
# Vertex AI: GCS input, predictions file and the job (tests/contract/vertex_case.py), for Gemini and Claude models
CASES += [
    Case("vertex", "gemini-2.5-flash", "/vertex", objects=3),
    Case("vertex", "claude-haiku-4-5", "/vertex", objects=3),
]
