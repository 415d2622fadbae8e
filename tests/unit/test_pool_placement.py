"""REVIEW-3 L6: an InferencePool's tolerations and node selector are the admin's to allow (barge/pool_placement.py).
A pool that tolerates the control-plane taint, or one the admin did not list, is refused before any Deployment
exists: admit_pool answers Refused("PlacementPolicy")."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from barge import policy as p
from barge.api.pool import InferencePool
from barge.operator import admission

ADMIN = p.parse(
    {
        "pools": {
            "nodeSelectors": ["gpu.example.com/pool=team-*", "kubernetes.io/arch=amd64"],
            "tolerations": [{"key": "nvidia.com/gpu"}, {"key": "dedicated", "effect": "NoSchedule"}],
        }
    }
)
CONTROL_PLANE = {"key": "node-role.kubernetes.io/control-plane", "operator": "Exists", "effect": "NoSchedule"}


def verdict(policy: p.Policy, selector: dict[str, str], tolerations: list[dict[str, Any]]) -> str:
    try:
        p.check_placement(policy, selector, tolerations)
    except p.Refused as exc:
        return exc.policy
    return "ok"


@pytest.mark.parametrize(
    ("policy", "selector", "tolerations", "expected"),
    [
        (p.Policy(), {}, [], "ok"),
        (p.Policy(), {"any": "label"}, [{"key": "dedicated", "operator": "Exists"}], "ok"),  # no section: open ...
        (p.Policy(), {}, [CONTROL_PLANE], "PlacementPolicy"),  # ... but never onto control-plane nodes
        (p.Policy(), {}, [{"key": "node-role.kubernetes.io/master", "operator": "Exists"}], "PlacementPolicy"),
        (p.Policy(), {}, [{"operator": "Exists"}], "PlacementPolicy"),  # keyless: tolerates every taint
        (ADMIN, {"gpu.example.com/pool": "team-a"}, [{"key": "nvidia.com/gpu", "operator": "Exists"}], "ok"),
        (ADMIN, {"gpu.example.com/pool": "other"}, [], "PlacementPolicy"),
        (ADMIN, {"node-role.kubernetes.io/control-plane": ""}, [], "PlacementPolicy"),
        (ADMIN, {}, [{"key": "dedicated", "value": "team-b", "effect": "NoSchedule"}], "ok"),
        (ADMIN, {}, [{"key": "dedicated", "value": "team-b"}], "PlacementPolicy"),  # every effect: more than listed
        (ADMIN, {}, [{"key": "dedicated", "effect": "NoExecute"}], "PlacementPolicy"),
        (ADMIN, {}, [CONTROL_PLANE], "PlacementPolicy"),
    ],
)
def test_placement_table(
    policy: p.Policy, selector: dict[str, str], tolerations: list[dict[str, Any]], expected: str
) -> None:
    assert verdict(policy, selector, tolerations) == expected


@pytest.mark.parametrize(
    "pools",
    [
        {"nodeSelectors": "gpu=yes"},
        {"nodeSelectors": ["no-equals-sign"]},
        {"tolerations": [{"key": ""}]},
        {"tolerations": [{"key": "a", "value": "b"}]},
        {"tolerations": "nvidia.com/gpu"},
    ],
)
def test_bad_placement_sections_are_refused_at_start(pools: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match="pools"):
        p.parse({"pools": pools})


class Kube:
    """The namespace team-a, labelled with its tenant; no Secret is needed by an engine pool without a token."""

    async def namespace_labels(self, name: str) -> dict[str, str]:
        return {p.TENANT_LABEL: "team-a"}

    def __getattr__(self, name: str) -> Any:
        async def labels(*_: object) -> Any:
            return {"metadata": {"labels": {p.TENANT_LABEL: "team-a"}}}

        return labels


def test_a_pool_tolerating_the_control_plane_is_not_admitted() -> None:
    pool = InferencePool.model_validate(
        {
            "metadata": {"namespace": "team-a", "name": "vllm"},
            "spec": {
                "model": "meta-llama/Llama-3.1-8B-Instruct",
                "engine": {
                    "image": "vllm/vllm-openai:v0.11.0",
                    "nodeSelector": {"node-role.kubernetes.io/control-plane": ""},
                    "tolerations": [CONTROL_PLANE],
                },
            },
        }
    )
    with pytest.raises(p.Refused) as refused:
        asyncio.run(admission.admit_pool(Kube(), p.Policy(), pool))  # type: ignore[arg-type]
    assert refused.value.policy == "PlacementPolicy"
