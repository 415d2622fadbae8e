"""The admin's model aliases for barge gateway (policy section `gateway`, barge/gateway_policy.py)."""

from __future__ import annotations

from typing import Any

import pytest

from barge import gateway_policy, policy, policy_keys


def test_the_section_parses_a_pool_name_and_a_pool_with_tenants() -> None:
    parsed = policy.parse(
        {
            "gateway": {
                "aliases": {
                    "gpt-4o": "azure-global-batch",
                    "openai/gpt-oss-20b": {"pool": "vllm-oss", "tenants": ["acme", "finance"]},
                }
            }
        }
    )
    assert dict(parsed.gateway.aliases) == {
        "gpt-4o": gateway_policy.Alias("azure-global-batch"),
        "openai/gpt-oss-20b": gateway_policy.Alias("vllm-oss", ("acme", "finance")),
    }


def test_no_section_means_no_alias() -> None:
    assert policy.parse({}).gateway == gateway_policy.DEFAULT
    assert policy.parse({}).gateway.candidates("acme", "gpt-4o") == ("gpt-4o",)


def test_the_documented_example_parses() -> None:
    parsed = policy.parse(policy_keys.example_document())
    assert dict(parsed.gateway.aliases) == {"gpt-4o": gateway_policy.Alias("azure-global-batch", ("acme",))}


@pytest.mark.parametrize(
    ("section", "message"),
    [
        ({"alias": {}}, r"unknown key\(s\) \['alias'\]"),
        ({"aliases": ["gpt-4o"]}, "must be a mapping"),
        ({"aliases": {"gpt-4o": {"pool": "p", "namespace": "other"}}}, r"unknown key\(s\) \['namespace'\]"),
        ({"aliases": {"gpt-4o": {"tenants": ["acme"]}}}, "pool must be an InferencePool name"),
        ({"aliases": {"gpt-4o": "Not_A_Pool"}}, "pool must be an InferencePool name"),
        ({"aliases": {"gpt-4o": {"pool": "p", "tenants": "acme"}}}, "tenants must be a list"),
        ({"aliases": {"": "p"}}, "is not a model name"),
        ({"aliases": {"x" * 257: "p"}}, "is not a model name"),
        ({"aliases": {"gpt-4o": 3}}, "must be a pool name"),
    ],
)
def test_a_bad_section_stops_the_parse_naming_the_key(section: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        policy.parse({"gateway": section})


GATEWAY = gateway_policy.parse(
    {"aliases": {"gpt-4o": "azure-batch", "claude": {"pool": "claude-pool", "tenants": ["acme"]}, "o/x": "vllm"}}
)


@pytest.mark.parametrize(
    ("tenant", "model", "expected"),
    [
        ("acme", "gpt-4o", ("gpt-4o", "azure-batch")),  # the namespace's own pool named gpt-4o first
        ("beta", "gpt-4o", ("gpt-4o", "azure-batch")),  # an alias without tenants is every tenant's
        ("acme", "claude", ("claude", "claude-pool")),
        ("beta", "claude", ("claude",)),  # not listed: only a pool of its own named claude
        ("acme", "o/x", ("vllm",)),  # no pool can be named o/x: the alias only
        ("acme", "unknown", ("unknown",)),
        ("acme", "Bad Name", ()),
    ],
)
def test_a_tenants_own_pool_comes_first_then_the_admins_alias(
    tenant: str, model: str, expected: tuple[str, ...]
) -> None:
    assert GATEWAY.candidates(tenant, model) == expected


def test_an_alias_naming_the_model_itself_is_looked_up_once() -> None:
    assert gateway_policy.parse({"aliases": {"p": "p"}}).candidates("acme", "p") == ("p",)
