"""A vertex job's GCS prefix is storage like any other, and its token and storage endpoints are endpoints like a
baseURL (see operator/bedrock_admission.py for the same rule on Bedrock's S3 prefixes).

Where Vertex reads a job's input and writes its output is the Secret's gcsPrefix (providers/vertex_settings.py),
not spec.output: it must lie under the tenant's storage prefixes (Admitted=False StoragePolicy, naming the prefix
and the allowed ones). The service account key's token_uri and the Secret's storageEndpoint are asked of the
endpoint policy as a baseURL is (the adapter asks again at every connection). A Secret that is not Vertex's JSON is
the adapter's to refuse (every call Fatal, naming what is missing); a missing Secret is reported where every
provider's is.
"""

from __future__ import annotations

from barge.api.batchjob import LLMBatchJobSpec
from barge.operator.bedrock_admission import CheckURL
from barge.operator.kube import Kube, NotFound
from barge.policy import Policy, check_storage
from barge.providers.vertex_settings import GOOGLE_STORAGE, GOOGLE_TOKEN_URI, VertexSettings


async def check_vertex(
    kube: Kube, policy: Policy, namespace: str, spec: LLMBatchJobSpec, prefixes: tuple[str, ...], check_url: CheckURL
) -> None:
    ref = spec.provider.secret_ref
    if spec.provider.type != "vertex" or ref is None:
        return
    try:
        text = await kube.secret_value(namespace, ref.name, ref.key)
    except NotFound:
        return
    settings = VertexSettings.from_secret(text)
    if settings.problem:
        return
    check_storage(settings.gcs_prefix, prefixes)
    for url, default in ((settings.token_uri, GOOGLE_TOKEN_URI), (settings.storage_endpoint, GOOGLE_STORAGE)):
        if url != default:
            await check_url(policy, "vertex", url)
