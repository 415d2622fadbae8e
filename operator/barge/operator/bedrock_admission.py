"""A bedrock job's S3 prefixes are storage like any other: they lie under the tenant's storage prefixes.

Where Bedrock reads a job's records and writes its results is named in the job's Secret (inputS3Uri, outputS3Uri,
providers/bedrock_settings.py), not in spec.output: without this check a team could have Bedrock write another
team's bucket, or read from it, with a role that may. Both prefixes must lie under the tenant's storage prefixes
(Admitted=False StoragePolicy, naming the prefix and the allowed ones), and an S3 endpoint the Secret names passes
the endpoint policy as a baseURL does. A Secret that is not Bedrock's JSON is the adapter's to refuse (every call
Fatal, naming what is missing); a missing Secret is reported where every provider's is.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from barge.api.batchjob import LLMBatchJobSpec
from barge.operator.kube import Kube, NotFound
from barge.policy import Policy, check_storage
from barge.providers.bedrock_settings import BedrockSettings

CheckURL = Callable[[Policy, str, str], Awaitable[None]]


async def check_bedrock(
    kube: Kube, policy: Policy, namespace: str, spec: LLMBatchJobSpec, prefixes: tuple[str, ...], check_url: CheckURL
) -> None:
    ref = spec.provider.secret_ref
    if spec.provider.type != "bedrock" or ref is None:
        return
    try:
        text = await kube.secret_value(namespace, ref.name, ref.key)
    except NotFound:
        return
    settings = BedrockSettings.from_secret(text)
    if settings.problem:
        return
    for uri in (settings.input_s3_uri, settings.output_s3_uri):
        check_storage(uri, prefixes)
    if settings.s3_endpoint_url:
        await check_url(policy, "storage", settings.s3_endpoint_url)
