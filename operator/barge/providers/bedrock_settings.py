"""Amazon Bedrock's settings and errors: the job Secret's JSON, the endpoint policy on the endpoints it names, and
botocore's exceptions as Barge's domain errors (one map, as providers/errors.py is for the other SDKs)."""

from __future__ import annotations

import socket
from dataclasses import dataclass
from urllib.parse import urlsplit

import orjson
from botocore.exceptions import (  # type: ignore[import-untyped]
    BotoCoreError,
    ClientError,
    ConnectTimeoutError,
    ParamValidationError,
    ReadTimeoutError,
)

from barge.providers.errors import Fatal, Invalid, ProviderError, Transient, classify, retry_after
from barge.providers.guard import Allowed

FATAL_CODES = frozenset(
    {
        "AccessDeniedException",
        "UnrecognizedClientException",
        "ExpiredTokenException",
        "InvalidClientTokenId",
        "AccessDenied",
        "InvalidAccessKeyId",
        "SignatureDoesNotMatch",
    }
)
TRANSIENT_CODES = frozenset(
    {
        "ThrottlingException",
        "ServiceQuotaExceededException",
        "InternalServerException",
        "ServiceUnavailableException",
        "ModelNotReadyException",
        "ModelTimeoutException",
        "SlowDown",
        "RequestTimeout",
    }
)


@dataclass(frozen=True)
class BedrockSettings:
    """What one job's Secret says (a JSON object; keys in camelCase)."""

    access_key_id: str = ""
    secret_access_key: str = ""
    session_token: str = ""
    region: str = "us-east-1"
    role_arn: str = ""
    """roleArn: the IAM service role Bedrock assumes to read the input and write the output."""
    input_s3_uri: str = ""
    """inputS3Uri: the S3 prefix the shards' records are written under (s3://bucket/prefix/)."""
    output_s3_uri: str = ""
    """outputS3Uri: the S3 prefix Bedrock writes the results under."""
    s3_endpoint_url: str = ""
    """s3EndpointURL: an S3 endpoint of its own (moto, a VPC endpoint); empty: the region's."""
    min_records: int = 100
    """minRecordsPerJob: the account's "Minimum number of records per batch inference job" quota."""
    max_records: int = 50_000
    """maxRecordsPerJob: "Records per batch inference job"."""
    problem: str = ""

    @classmethod
    def from_secret(cls, text: str) -> BedrockSettings:
        try:
            raw = orjson.loads(text)
        except orjson.JSONDecodeError:
            raw = None
        if not isinstance(raw, dict):
            return cls(
                problem="bedrock: the Secret's value must be a JSON object (accessKeyId, secretAccessKey, "
                "region, roleArn, inputS3Uri, outputS3Uri)"
            )

        def get(key: str, default: str = "") -> str:
            return str(raw.get(key) or default)

        settings = cls(
            get("accessKeyId"),
            get("secretAccessKey"),
            get("sessionToken"),
            get("region", "us-east-1"),
            get("roleArn"),
            _prefix(get("inputS3Uri")),
            _prefix(get("outputS3Uri")),
            get("s3EndpointURL"),
            int(raw.get("minRecordsPerJob") or 100),
            int(raw.get("maxRecordsPerJob") or 50_000),
        )
        missing = [
            k
            for k, v in (
                ("accessKeyId", settings.access_key_id),
                ("secretAccessKey", settings.secret_access_key),
                ("roleArn", settings.role_arn),
                ("inputS3Uri", settings.input_s3_uri),
                ("outputS3Uri", settings.output_s3_uri),
            )
            if not v
        ]
        if missing:
            return cls(problem=f"bedrock: the Secret's JSON lacks {', '.join(missing)}")
        for uri in (settings.input_s3_uri, settings.output_s3_uri):
            if not uri.startswith("s3://") or len(uri) < 7:
                return cls(problem=f"bedrock: {uri!r} is not an s3:// prefix")
        return settings


def _prefix(uri: str) -> str:
    return uri if not uri or uri.endswith("/") else uri + "/"


def from_boto(exc: BaseException) -> ProviderError:
    """botocore's exceptions as a domain error."""
    if isinstance(exc, ConnectTimeoutError | ReadTimeoutError):
        return Transient(f"timeout: {exc}", error_type="timeout")
    if isinstance(exc, ClientError):
        error = exc.response.get("Error") or {}
        code, message = str(error.get("Code") or ""), str(error.get("Message") or "")
        meta = exc.response.get("ResponseMetadata") or {}
        status = meta.get("HTTPStatusCode")
        wait = retry_after(meta.get("HTTPHeaders") or {})
        kind = code or f"http_{status}"
        cls: type[ProviderError]
        if code in FATAL_CODES:
            cls = Fatal
        elif code in TRANSIENT_CODES:
            cls = Transient
        else:
            cls = classify(status if isinstance(status, int) else None, kind, message)
        return cls(f"{kind}: {message}", error_type=kind, retry_after=wait)
    if isinstance(exc, ParamValidationError):  # botocore refused the request before sending it
        return Invalid(f"invalid request: {exc}", error_type="invalid_request")
    if isinstance(exc, BotoCoreError):
        return Transient(f"connection failed: {exc}", error_type="connection_error")
    return Transient(f"unexpected error: {exc!r}", error_type="unknown")


def refused_endpoint(url: str, guard: Allowed) -> str:
    """Why the endpoint policy refuses `url` (every address its host resolves to is asked), or ""."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    try:
        infos = socket.getaddrinfo(host, parts.port or 443, proto=socket.IPPROTO_TCP)
    except OSError as exc:
        return f"bedrock: {url} does not resolve ({exc})"
    refused = sorted({str(i[4][0]) for i in infos if not guard(host, str(i[4][0]))})
    return f"bedrock: the endpoint policy refuses {host} ({', '.join(refused)})" if refused else ""
