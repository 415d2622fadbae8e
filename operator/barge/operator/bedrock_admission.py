"""A bedrock job's S3 prefixes are storage like any other: they lie under the tenant's storage prefixes.

Where Bedrock reads a job's records and writes its results is named in the job's Secret (inputS3Uri, outputS3Uri,
providers/bedrock_settings.py), not in spec.output: without this check a team could have Bedrock write another
team's bucket, or read from it, with a role that may. Both prefixes must lie under the tenant's storage prefixes
(Admitted=False StoragePolicy, naming the prefix and the allowed ones), and an S3 endpoint the Secret names passes
the endpoint policy as a baseURL does. With the admin's `bedrock.roles` set (barge/bedrock_policy.py), the Secret's
roleArn must be one listed for the tenant (or under "*"): else Admitted=False ProviderPolicy. A Secret that is not
Bedrock's JSON is the adapter's to refuse (every call Fatal, naming what is missing); a missing Secret is reported
where every provider's is.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from barge.api.batchjob import LLMBatchJobSpec
from barge.operator.kube import Kube, NotFound
from barge.policy import Policy, Refused, check_storage
from barge.providers.bedrock_settings import BedrockSettings

CheckURL = Callable[[Policy, str, str], Awaitable[None]]


async def check_bedrock(
    kube: Kube,
    policy: Policy,
    namespace: str,
    spec: LLMBatchJobSpec,
    prefixes: tuple[str, ...],
    check_url: CheckURL,
    tenant: str = "",
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
    check_role(policy, tenant, settings.role_arn)
    for uri in (settings.input_s3_uri, settings.output_s3_uri):
        check_storage(uri, prefixes)
    if settings.s3_endpoint_url:
        await check_url(policy, "storage", settings.s3_endpoint_url)


def check_role(policy: Policy, tenant: str, role: str) -> None:
    allowed = policy.bedrock.allowed(tenant)
    if allowed is None or role in allowed:
        return
    shown = ", ".join(allowed) or "(none for this tenant)"
    raise Refused(
        "ProviderPolicy",
        f"the bedrock Secret's roleArn {role} is not a role the admin allows tenant {tenant!r} "
        f"(bedrock.roles): {shown}",
    )
