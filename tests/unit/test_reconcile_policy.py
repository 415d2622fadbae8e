"""The policy's `reconcile` section (barge/reconcile_policy.py): defaults, admin keys, and refusals."""

from __future__ import annotations

from decimal import Decimal

import pytest

from barge import policy, reconcile_policy


def test_absent_means_off_with_the_defaults() -> None:
    rules = policy.parse({}).reconcile
    assert rules == reconcile_policy.DEFAULT
    assert rules.providers == ()
    assert (rules.threshold_usd, rules.interval_seconds, rules.days) == (Decimal("0.01"), 86400.0, 3)


def test_admin_keys_name_a_secret_and_an_optional_base_url() -> None:
    rules = policy.parse(
        {
            "reconcile": {
                "thresholdUSD": "2.5",
                "intervalSeconds": 3600,
                "days": 7,
                "providers": {
                    "openai": {"secretRef": {"namespace": "barge-system", "name": "oa", "key": "k"}},
                    "anthropic": {"secretRef": {"namespace": "barge-system", "name": "an"}, "baseURL": "http://x"},
                },
            }
        }
    ).reconcile
    assert rules.threshold_usd == Decimal("2.5")
    assert (rules.interval_seconds, rules.days) == (3600.0, 7)
    assert rules.providers == (
        reconcile_policy.AdminKey("openai", "barge-system", "oa", "k"),
        reconcile_policy.AdminKey("anthropic", "barge-system", "an", "adminKey", "http://x"),
    )


def test_azure_names_a_service_principal_and_a_scope_and_mistral_needs_no_key() -> None:
    rules = policy.parse(
        {
            "reconcile": {
                "providers": {
                    "azure-openai": {
                        "secretRef": {"namespace": "barge-system", "name": "az"},
                        "tenantId": "tenant-1",
                        "clientId": "client-1",
                        "scope": "/subscriptions/sub-1/resourceGroups/llm",
                        "baseURL": "http://mgmt",
                        "loginURL": "http://login",
                    },
                    "mistral": {},
                }
            }
        }
    ).reconcile
    assert rules.providers == (
        reconcile_policy.AdminKey(
            "azure-openai",
            "barge-system",
            "az",
            "clientSecret",
            "http://mgmt",
            "tenant-1",
            "client-1",
            "/subscriptions/sub-1/resourceGroups/llm",
            "http://login",
        ),
        reconcile_policy.AdminKey("mistral", "", ""),
    )


@pytest.mark.parametrize(
    ("section", "message"),
    [
        ({"providers": {"bedrock": {}}}, "bedrock"),
        ({"providers": {"mistral": {"secretRef": {"namespace": "ns", "name": "m"}}}}, "secretRef"),
        ({"providers": {"azure-openai": {"secretRef": {"namespace": "ns", "name": "az"}}}}, "tenantId, clientId"),
        (
            {
                "providers": {
                    "azure-openai": {
                        "secretRef": {"namespace": "ns", "name": "az"},
                        "tenantId": "t",
                        "clientId": "c",
                        "scope": "resourceGroups/x",
                    }
                }
            },
            "scope /subscriptions",
        ),
        ({"providers": {"openai": {"secretRef": {"namespace": "ns", "name": "oa"}, "tenantId": "t"}}}, "tenantId"),
        ({"providers": {"openai": {"secretRef": {"name": "oa"}}}}, "namespace and a name"),
        ({"providers": {"openai": {"secretRef": {"namespace": "ns", "name": "oa"}, "apiKey": "sk"}}}, "apiKey"),
        ({"thresholdUSD": "lots"}, "thresholdUSD"),
        ({"thresholdUSD": -1}, "thresholdUSD >= 0"),
        ({"days": 0}, "days 1..31"),
        ({"intervalSeconds": 0}, "intervalSeconds > 0"),
        ({"every": "day"}, "every"),
        ("yes", "mapping"),
    ],
)
def test_a_malformed_section_stops_the_operator(section: object, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        policy.parse({"reconcile": section})
