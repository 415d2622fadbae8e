"""A bedrock job's S3 prefixes (in its Secret) are checked against the tenant's storage prefixes, and its S3
endpoint against the endpoint policy, at admission (operator/bedrock_admission.py)."""

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


def check(value: str | None, job: LLMBatchJobSpec | None = None) -> None:
    kube: Any = Secrets(value)
    asyncio.run(check_bedrock(kube, p.Policy(), "acme", job or spec(), PREFIXES, check_base_url))


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
