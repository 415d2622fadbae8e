"""A bedrock job's S3 prefixes (in its Secret) are checked against the tenant's storage prefixes, its S3 endpoint
against the endpoint policy, and its role against the admin's bedrock.roles, at admission
(operator/bedrock_admission.py, barge/bedrock_policy.py)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from barge import policy as p
from barge.api.batchjob import LLMBatchJobSpec
from barge.operator.admission import check_base_url
from barge.operator.bedrock_admission import check_bedrock
from barge.operator.kube import NotFound

PREFIXES = ("s3://barge-acme/",)


class Secrets:
    def __init__(self, value: str | None) -> None:
        self.value = value

    async def secret_value(self, namespace: str, name: str, key: str) -> str:
        if self.value is None:
            raise NotFound(f"Secret {name!r} not found")
        return self.value


def spec(kind: str = "bedrock") -> LLMBatchJobSpec:
    return LLMBatchJobSpec.model_validate(
        {
            "provider": {"type": kind, "model": "anthropic.claude-haiku-4-5-20251001-v1:0", "secretRef": {"name": "b"}},
            "input": {"url": "s3://barge-acme/in.jsonl"},
            "output": {"url": "s3://barge-acme/out/"},
            "request": {"template": "{{ text }}", "maxTokens": 10},
        }
    )


def secret(**over: str) -> str:
    base = {
        "accessKeyId": "AKIA1",
        "secretAccessKey": "s",
        "roleArn": "arn:aws:iam::123456789012:role/r",
        "inputS3Uri": "s3://barge-acme/bedrock/in/",
        "outputS3Uri": "s3://barge-acme/bedrock/out/",
    }
    return json.dumps({**base, **over})


def check(value: str | None, job: LLMBatchJobSpec | None = None, policy: p.Policy | None = None) -> None:
    kube: Any = Secrets(value)
    asyncio.run(check_bedrock(kube, policy or p.Policy(), "acme", job or spec(), PREFIXES, check_base_url, "acme"))


def test_prefixes_under_the_tenants_storage_are_admitted() -> None:
    check(secret())
    check(None)  # no Secret: reported where every provider's is
    check("not json")  # the adapter's to refuse, naming what is missing
    check(secret(outputS3Uri="s3://barge-globex/x/"), spec("anthropic"))  # not a bedrock job: not read


@pytest.mark.parametrize("key", ["inputS3Uri", "outputS3Uri"])
def test_a_prefix_of_another_tenant_is_refused(key: str) -> None:
    with pytest.raises(p.Refused, match=r"StoragePolicy: s3://barge-globex/x/ is outside this tenant's storage"):
        check(secret(**{key: "s3://barge-globex/x/"}))


def test_an_s3_endpoint_is_checked_as_a_base_url_is() -> None:
    with pytest.raises(p.Refused, match=r"169\.254\.169\.254"):
        check(secret(s3EndpointURL="http://169.254.169.254"))


ROLES = {
    "*": ["arn:aws:iam::123456789012:role/shared-batch"],
    "acme": ["arn:aws:iam::123456789012:role/r"],
    "globex": ["arn:aws:iam::123456789012:role/globex-batch"],
}


def test_with_bedrock_roles_set_only_a_role_listed_for_the_tenant_is_admitted() -> None:
    policy = p.parse({"bedrock": {"roles": ROLES}})
    check(secret(), policy=policy)  # acme's own
    check(secret(roleArn="arn:aws:iam::123456789012:role/shared-batch"), policy=policy)  # every tenant's
    with pytest.raises(
        p.Refused, match=r"ProviderPolicy: the bedrock Secret's roleArn .*role/globex-batch is not"
    ) as e:
        check(secret(roleArn="arn:aws:iam::123456789012:role/globex-batch"), policy=policy)  # another tenant's
    assert "role/r, arn:aws:iam::123456789012:role/shared-batch" in str(e.value)  # the allowed ones, named
    check(secret(roleArn="arn:aws:iam::123456789012:role/anything"))  # no bedrock.roles: AWS's PassRole decides
    only_shared = p.parse({"bedrock": {"roles": {"globex": ROLES["globex"]}}})
    with pytest.raises(p.Refused, match=r"\(none for this tenant\)"):
        check(secret(), policy=only_shared)


@pytest.mark.parametrize(
    ("section", "reason"),
    [
        ({"role": {}}, "unknown policy bedrock key"),
        ({"roles": ["arn:aws:iam::123456789012:role/r"]}, "must map a tenant"),
        ({"roles": {"Not A Label": ["arn:aws:iam::123456789012:role/r"]}}, "is not a tenant"),
        ({"roles": {"acme": "arn:aws:iam::123456789012:role/r"}}, "must be a list of role ARNs"),
        ({"roles": {"acme": ["arn:aws:s3:::bucket"]}}, "is not an IAM role ARN"),
    ],
)
def test_a_bad_bedrock_section_stops_the_policy_naming_why(section: dict[str, Any], reason: str) -> None:
    with pytest.raises(ValueError, match=reason):
        p.parse({"bedrock": section})
