"""Engine pool builders: golden manifests per sample, the dial, the flags, names, labels, validation."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import ValidationError

from barge.api.pool import InferencePool
from barge.k8s import pool as builders

REPO = Path(__file__).resolve().parents[2]
GOLDEN = Path(__file__).parent / "golden"
SAMPLES = sorted((REPO / "manifests" / "samples").glob("inferencepool-*.yaml"))
PROM = "http://prometheus-operated.monitoring.svc:9090"


def load(path: Path, **meta: Any) -> InferencePool:
    doc = yaml.safe_load(path.read_text())
    doc["metadata"].update({"namespace": "ml", "uid": "00000000-0000-0000-0000-000000000001", **meta})
    return InferencePool.model_validate(doc)


def pool(engine: dict[str, Any], **spec: Any) -> InferencePool:
    return InferencePool.model_validate(
        {"metadata": {"name": "p", "namespace": "ml", "uid": "u"}, "spec": {"model": "m", "engine": engine, **spec}}
    )


@pytest.mark.parametrize("path", SAMPLES, ids=lambda p: p.stem)
def test_golden_children(path: Path) -> None:
    rendered = yaml.safe_dump_all(builders.build_children(load(path), PROM), sort_keys=True)
    golden = GOLDEN / f"{path.stem}.yaml"
    if os.environ.get("UPDATE_GOLDEN"):
        golden.write_text(rendered)
    assert golden.exists(), f"no golden file {golden.name}: run with UPDATE_GOLDEN=1 and review it"
    assert rendered == golden.read_text(), f"{golden.name} differs: rerun with UPDATE_GOLDEN=1 and review the diff"


@pytest.mark.parametrize(("profile", "tokens"), [("interactive", "2048"), ("throughput", "16384")])
def test_profile_sets_the_dial(profile: str, tokens: str) -> None:
    args = builders.vllm_args("m", pool({"profile": profile}).spec.engine)  # type: ignore[arg-type]
    assert args[args.index("--max-num-batched-tokens") + 1] == tokens
    explicit = pool({"profile": profile, "args": {"maxNumBatchedTokens": 4096}}).spec.engine
    assert "4096" in builders.vllm_args("m", explicit)  # type: ignore[arg-type]


def test_only_real_vllm_flags_and_extra_last() -> None:
    engine = pool(
        {
            "gpus": 2,
            "args": {
                "maxNumSeqs": 128,
                "maxModelLen": 8192,
                "enableChunkedPrefill": False,
                "maxNumBatchedTokens": 8192,
                "extra": ["--enable-prefix-caching"],
            },
        }
    ).spec.engine
    args = builders.vllm_args("meta/llama", engine)  # type: ignore[arg-type]
    flags = [a for a in args[:-1] if a.startswith("--")]
    assert set(flags) <= set(builders.VLLM_FLAGS)
    assert set(builders.VLLM_FLAGS) - set(flags) == {"--enable-chunked-prefill"}  # every other flag is emitted
    assert args[-1] == "--enable-prefix-caching"
    assert args[args.index("--tensor-parallel-size") + 1] == "2"  # defaults to gpus


def test_gpu_shm_cache_and_probes() -> None:
    deployment = builders.build_deployment(load(REPO / "manifests/samples/inferencepool-engine-interactive.yaml"))
    pod = deployment["spec"]["template"]["spec"]
    container = pod["containers"][0]
    assert container["resources"]["limits"]["nvidia.com/gpu"] == "1"
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in pod["tolerations"]
    assert {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "8Gi"}} in pod["volumes"]
    assert {"name": "models", "persistentVolumeClaim": {"claimName": "llama-interactive-model-cache"}} in pod["volumes"]
    assert container["startupProbe"]["httpGet"]["path"] == "/health"  # /v1 needs the engine key (M9)
    assert container["startupProbe"]["failureThreshold"] * container["startupProbe"]["periodSeconds"] >= 1800
    assert container["livenessProbe"]["httpGet"]["path"] == "/health"
    assert pod["terminationGracePeriodSeconds"] >= 60
    assert deployment["spec"]["replicas"] == 2


def test_scale_to_zero_has_no_replicas_field_and_a_keda_trigger() -> None:
    p = load(REPO / "manifests/samples/inferencepool-engine-scale-to-zero.yaml")
    assert "replicas" not in builders.build_deployment(p)["spec"]
    so = builders.build_scaled_object(p, PROM)
    assert so is not None
    assert so["spec"]["minReplicaCount"] == 0
    trigger = so["spec"]["triggers"][0]
    assert trigger["type"] == "prometheus"
    assert "vllm:num_requests_waiting" in trigger["metadata"]["query"]
    assert trigger["metadata"]["threshold"] == "5"


def test_long_names_respect_limits() -> None:
    name = "a-very-long-inference-pool-name-that-goes-on-and-on-and-on-forever"
    n = builders.names(name)
    assert len("keda-hpa-" + n["scaledobject"]) <= 63
    assert len(n["deployment"]) <= 63
    assert len(n["service"]) <= 63
    assert n["scaledobject"] == builders.names(name)["scaledobject"]  # stable


def test_gitops_tracking_labels_are_not_copied() -> None:
    p = pool(
        {},
    )
    p.metadata["labels"] = {"argocd.argoproj.io/instance": "x", "app.kubernetes.io/instance": "y", "team": "ml"}
    labels = builders.build_service(p)["metadata"]["labels"]
    assert labels["team"] == "ml"
    assert "argocd.argoproj.io/instance" not in labels
    assert labels.get("app.kubernetes.io/instance") is None
    assert builders.build_service(p)["metadata"]["ownerReferences"][0]["controller"] is True


def test_provider_pool_has_no_children() -> None:
    p = load(REPO / "manifests/samples/inferencepool-provider.yaml")
    assert builders.build_children(p, PROM) == []
    assert builders.endpoint(p) == "https://contoso-batch.openai.azure.com"


@pytest.mark.parametrize(
    ("engine", "needle"),
    [
        ({"gpus": 1, "tensorParallelSize": 2}, "tensorParallelSize must not exceed"),
        ({"args": {"enableChunkedPrefill": False, "maxModelLen": 32768}}, "at least maxModelLen"),
        ({"autoscaling": {"minReplicas": 3, "maxReplicas": 2}}, "minReplicas"),
    ],
)
def test_validation_errors(engine: dict[str, Any], needle: str) -> None:
    with pytest.raises(ValidationError, match=needle):
        pool(engine)
