"""The typed API: samples parse, bad specs fail with the field named, CRDs are generated and current."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import ValidationError

from barge.api import InferencePool, LLMBatchJob, LLMBatchSchedule
from barge.api.crd import all_crds, render

REPO = Path(__file__).resolve().parents[2]
SAMPLES = sorted((REPO / "manifests" / "samples").glob("*.yaml"))


def _docs(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def _job(**spec: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "provider": {"type": "anthropic", "model": "claude-sonnet-4-6", "secretRef": {"name": "k"}},
        "input": {"url": "file:///data/in.jsonl"},
        "output": {"url": "file:///data/out/"},
    }
    base.update(spec)
    return {
        "apiVersion": "barge.dev/v1alpha1",
        "kind": "LLMBatchJob",
        "metadata": {"name": "j"},
        "spec": base,
    }


def test_there_is_a_sample_per_provider_type_and_pool_kind() -> None:
    jobs = [d for p in SAMPLES for d in _docs(p) if d["kind"] == "LLMBatchJob"]
    pools = [d for p in SAMPLES for d in _docs(p) if d["kind"] == "InferencePool"]
    assert {j["spec"]["provider"]["type"] for j in jobs} == {
        "anthropic",
        "openai",
        "azure-openai",
        "openai-compatible",
        "mistral",
        "gemini",
        "bedrock",
        "vertex",
        "pool",
    }
    assert any("engine" in p["spec"] for p in pools)
    assert any("provider" in p["spec"] for p in pools)


@pytest.mark.parametrize("path", SAMPLES, ids=lambda p: p.name)
def test_samples_parse(path: Path) -> None:
    for doc in _docs(path):
        model = {"LLMBatchJob": LLMBatchJob, "InferencePool": InferencePool, "LLMBatchSchedule": LLMBatchSchedule}[
            doc["kind"]
        ]
        parsed = model.model_validate(doc)
        assert parsed.metadata["name"] == doc["metadata"]["name"]


def test_defaults() -> None:
    job = LLMBatchJob.model_validate(_job())
    assert job.spec.custom_id == "{id}-{promptVersion}-{runDate}"
    assert job.spec.retry.max_attempts == 3
    assert job.spec.fallback.concurrency == 8
    assert job.spec.request.cache_prefix is True
    assert job.spec.suspend is False


@pytest.mark.parametrize(
    ("spec", "needle"),
    [
        ({"input": {"url": "file:///a", "inline": [{"id": "1"}]}}, "exactly one of spec.input"),
        ({"input": {"idField": "id"}}, "exactly one of spec.input"),
        ({"provider": {"type": "pool"}}, "poolRef.name is required"),
        (
            {
                "provider": {
                    "type": "anthropic",
                    "model": "m",
                    "secretRef": {"name": "s"},
                    "poolRef": {"name": "p"},
                }
            },
            "poolRef.name is required",
        ),
        ({"provider": {"type": "anthropic", "secretRef": {"name": "s"}}}, "model is required"),
        ({"provider": {"type": "cohere", "model": "m", "secretRef": {"name": "s"}}}, "provider.type"),
        ({"request": {"maxTokens": -5}}, "request.maxTokens"),
        ({"customId": "{id}-{date}"}, "customId"),
        ({"successRatio": "1.5"}, "successRatio"),
        ({"budget": {"maxCostUSD": "-3"}}, "maxCostUSD"),
        ({"unknownField": 1}, "unknownField"),
    ],
)
def test_bad_specs_are_rejected_naming_the_field(spec: dict[str, Any], needle: str) -> None:
    with pytest.raises(ValidationError) as err:
        LLMBatchJob.model_validate(_job(**spec))
    assert needle in str(err.value)


def test_pool_needs_exactly_one_of_engine_and_provider() -> None:
    both = {
        "model": "m",
        "engine": {},
        "provider": {"type": "openai", "model": "m", "secretRef": {"name": "s"}},
    }
    for spec in ({"model": "m"}, both):
        with pytest.raises(ValidationError, match=r"exactly one of spec\.engine and spec\.provider"):
            InferencePool.model_validate({"spec": spec})


def test_pool_engine_rules() -> None:
    with pytest.raises(ValidationError, match="tensorParallelSize must not exceed"):
        InferencePool.model_validate({"spec": {"model": "m", "engine": {"gpus": 1, "tensorParallelSize": 2}}})
    off = {"enableChunkedPrefill": False, "maxModelLen": 8192}
    with pytest.raises(ValidationError, match="max_num_batched_tokens must be at least maxModelLen"):
        InferencePool.model_validate({"spec": {"model": "m", "engine": {"profile": "interactive", "args": off}}})
    ok = InferencePool.model_validate({"spec": {"model": "m", "engine": {"profile": "throughput", "args": off}}})
    assert ok.spec.engine is not None
    assert ok.spec.engine.profile == "throughput"


def _walk(schema: dict[str, Any], path: str) -> list[str]:
    missing = []
    for name, sub in schema.get("properties", {}).items():
        if not sub.get("description") and f"{path}.{name}" != ".metadata":
            missing.append(f"{path}.{name}")
        missing += _walk(sub, f"{path}.{name}")
    if "items" in schema:
        missing += _walk(schema["items"], f"{path}[]")
    return missing


@pytest.mark.parametrize("name", sorted(all_crds()))
def test_crd_schema_is_structural_and_fully_described(name: str) -> None:
    crd = all_crds()[name]
    version = crd["spec"]["versions"][0]
    schema = version["schema"]["openAPIV3Schema"]
    assert _walk(schema, "") == []
    text = yaml.safe_dump(schema)
    for word in ("$ref", "anyOf", "title"):
        assert word not in text
    assert version["subresources"] == {"status": {}}
    assert crd["spec"]["names"]["categories"] == ["barge"]


def test_printer_columns() -> None:
    crds = all_crds()
    lbj = crds["llmbatchjobs.barge.dev.yaml"]["spec"]
    cols = [c["name"].upper() for c in lbj["versions"][0]["additionalPrinterColumns"] if "priority" not in c]
    assert cols == ["PHASE", "DONE", "FAILED", "COST", "DEADLINE", "AGE"]
    assert lbj["names"]["shortNames"] == ["lbj"]
    pool = crds["inferencepools.barge.dev.yaml"]["spec"]
    cols = [c["name"].upper() for c in pool["versions"][0]["additionalPrinterColumns"]]
    assert cols == ["MODEL", "READY", "ENDPOINT", "AGE"]
    assert pool["names"]["shortNames"] == ["bpool"]


@pytest.mark.parametrize("name", sorted(all_crds()))
def test_committed_crds_match_the_models(name: str) -> None:
    committed = REPO / "crds" / name
    assert committed.read_text() == render(all_crds()[name]), "crds/ is stale: run `make crds`"
