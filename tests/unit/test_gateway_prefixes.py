"""Policy gateway.prefixes: a tenant's gateway files under a prefix the admin names, which must lie under one of
that tenant's storage prefixes (else the policy is refused at load, naming the key); no entry keeps the default
(<first storage prefix>/gateway/<namespace>/)."""

from __future__ import annotations

from typing import Any, cast

import pytest

from barge import gateway_policy, policy
from barge.gateway.auth import Caller
from barge.gateway.server import Gateway, GatewaySettings
from barge.operator.kube import Kube

STORAGE = {
    "prefixes": ["s3://shared-batches/{namespace}/"],
    "tenants": {"acme": ["s3://acme-llm/", "file:///data/{tenant}/"]},
}


def parsed(prefixes: dict[str, Any]) -> policy.Policy:
    return policy.parse({"storage": STORAGE, "gateway": {"prefixes": prefixes}})


def root(p: policy.Policy, tenant: str, namespace: str) -> str:
    gateway = Gateway(cast(Kube, None), p, GatewaySettings())  # place() asks no API: the policy alone decides
    return gateway.place(Caller("u", "1", (), {}, namespace, tenant)).root


def test_a_tenants_prefix_holds_its_namespaces_folders_and_others_keep_the_default() -> None:
    p = parsed({"acme": "s3://acme-llm/gateway-files", "globex": "s3://shared-batches/{namespace}/gw/"})
    assert p.gateway.prefixes == (
        ("acme", "s3://acme-llm/gateway-files/"),
        ("globex", "s3://shared-batches/{namespace}/gw/"),
    )
    assert root(p, "acme", "team-a") == "s3://acme-llm/gateway-files/team-a"
    assert root(p, "acme", "team-a2") == "s3://acme-llm/gateway-files/team-a2"  # one folder per namespace still
    assert root(p, "globex", "globex-prod") == "s3://shared-batches/globex-prod/gw/globex-prod"
    assert root(p, "initech", "ini") == "s3://shared-batches/ini/gateway/ini"  # no entry: the default
    assert root(parsed({"acme": "s3://acme-llm"}), "acme", "team-a") == "s3://acme-llm/team-a"  # the prefix itself


def test_placeholders_are_filled_per_caller() -> None:
    p = parsed({"acme": "file:///data/{tenant}/gateway/"})
    assert p.gateway.prefix_for("acme", "team-a") == "file:///data/acme/gateway/"
    assert root(p, "acme", "team-a") == "file:///data/acme/gateway/team-a"


def test_no_section_means_the_default_place() -> None:
    p = policy.parse({"storage": STORAGE})
    assert p.gateway.prefixes == ()
    assert root(p, "acme", "team-a") == "s3://acme-llm/gateway/team-a"


@pytest.mark.parametrize(
    ("prefixes", "message"),
    [
        ({"acme": "s3://globex-llm/"}, r"gateway.prefixes.acme: 's3://globex-llm/' is not under one of tenant acme"),
        ({"acme": "s3://acme-llm-other/x/"}, "is not under one of tenant acme"),  # a sibling bucket, not a child
        ({"globex": "s3://acme-llm/gateway/"}, "gateway.prefixes.globex"),  # another tenant's storage
        ({"globex": "s3://shared-batches/gw/"}, "gateway.prefixes.globex"),  # {namespace} left out of the path
        ({"acme": "s3://acme-llm/../globex/"}, "has a . or .. segment"),
        ({"acme": "/data/acme/"}, "must be a storage prefix"),
        ({"acme": "s3://"}, "must be a storage prefix"),
        ({"acme": ["s3://acme-llm/x/"]}, "must be a storage prefix"),
        ({"Not_A_Tenant": "s3://acme-llm/x/"}, "is not a tenant name"),
    ],
)
def test_a_prefix_outside_the_tenants_storage_or_malformed_stops_the_load_naming_the_key(
    prefixes: dict[str, Any], message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        parsed(prefixes)


def test_prefixes_must_be_a_mapping_and_unknown_keys_still_stop_the_parse() -> None:
    with pytest.raises(ValueError, match=r"gateway\.prefixes must be a mapping"):
        gateway_policy.parse({"prefixes": ["s3://acme-llm/x/"]})
    with pytest.raises(ValueError, match=r"unknown key\(s\) \['prefix'\]"):
        gateway_policy.parse({"prefix": {"acme": "s3://acme-llm/x/"}})
