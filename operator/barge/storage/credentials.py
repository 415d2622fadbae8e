"""Storage options from a tenant's credentials Secret, and every endpoint those options would connect to.

Why here: a credentials Secret is written by the tenant, and each SDK builds the host it connects to from some of
its keys (an s3 `endpoint_url` and `region`; Azure's `account_name`, or a connection string's `BlobEndpoint`,
`EndpointSuffix` and `DefaultEndpointsProtocol`; a Google key file's `token_uri`). So a key that names or shapes a
host is either refused here, or the URL it produces is returned by `credential_endpoints`, which admission checks
like a provider baseURL (the endpoint policy: an allowlisted host, https unless allowlisted, no private address
unless `private: true`). What is neither is not passed to the SDK: unknown connection-string keys are refused.
"""

from __future__ import annotations

import json
import re
from typing import Any
from urllib.parse import urlsplit

from barge.storage.errors import StorageError

#: Azure's storage account names: lower-case letters and digits, at most 24 (no dot, colon or slash: no host).
AZURE_ACCOUNT = re.compile(r"^[a-z0-9]{1,24}$")
#: The clouds' own storage suffixes: a host under one of them, over https, is Azure's and needs no allowlist entry.
AZURE_SUFFIXES = frozenset({"core.windows.net", "core.chinacloudapi.cn", "core.usgovcloudapi.net"})
AZURE_KEYS = frozenset(
    {
        "defaultendpointsprotocol",
        "accountname",
        "accountkey",
        "sharedaccesssignature",
        "endpointsuffix",
        "blobendpoint",
        "dfsendpoint",
    }
)
AZURE_ENDPOINT_KEYS = ("blobendpoint", "dfsendpoint")
HOST_SUFFIX = re.compile(r"^[a-z0-9]([a-z0-9-]*[a-z0-9])?(\.[a-z0-9]([a-z0-9-]*[a-z0-9])?)+$")
#: A SAS token is a query string: no fragment, user part or path separators that could move the host.
SAS = re.compile(r"^\??[A-Za-z0-9%=&_.:+,-]*$")
S3_REGION = re.compile(r"^[a-z0-9][a-z0-9-]{0,30}[a-z0-9]$")
GOOGLE_TOKEN_URIS = frozenset(
    {
        "https://oauth2.googleapis.com/token",
        "https://accounts.google.com/o/oauth2/token",
        "https://www.googleapis.com/oauth2/v4/token",
    }
)


def parse_connection_string(text: str) -> dict[str, str]:
    """An Azure connection string as lower-cased keys; unknown keys, and keys that would shape a host other than
    through a checked endpoint, are refused."""
    found: dict[str, str] = {}
    for part in text.split(";"):
        if not part.strip():
            continue
        key, sep, value = part.partition("=")
        key = key.strip().lower()
        if not sep or key not in AZURE_KEYS:
            raise StorageError(f"an az connection string may not carry {key or part!r} (allowed: {_keys()})")
        found[key] = value.strip()
    account = found.get("accountname", "")
    if not AZURE_ACCOUNT.match(account):
        raise StorageError("an az connection string needs AccountName: lower-case letters and digits only")
    if found.get("defaultendpointsprotocol", "https").lower() not in ("http", "https"):
        raise StorageError("an az connection string's DefaultEndpointsProtocol must be https (or http)")
    if "endpointsuffix" in found and not HOST_SUFFIX.match(found["endpointsuffix"].lower()):
        raise StorageError("an az connection string's EndpointSuffix must be a DNS suffix (no port, path or user)")
    if not SAS.match(found.get("sharedaccesssignature", "")):
        raise StorageError("an az connection string's SharedAccessSignature is not a query string")
    return found


def _keys() -> str:
    return ", ".join(sorted(AZURE_KEYS))


def _azure_endpoints(opts: dict[str, Any]) -> set[str]:
    text = str(opts.get("connection_string") or "")
    if not text:
        return set()  # account_name (checked) under the public cloud's suffix, https: Azure's own host
    conn = parse_connection_string(text)
    given = {conn[k] for k in AZURE_ENDPOINT_KEYS if conn.get(k)}
    if given:
        return given
    protocol = conn.get("defaultendpointsprotocol", "https").lower()
    suffix = conn.get("endpointsuffix", "core.windows.net").lower()
    if protocol == "https" and suffix in AZURE_SUFFIXES:
        return set()
    return {f"{protocol}://{conn['accountname']}.blob.{suffix}"}


def credential_endpoints(options: dict[str, dict[str, Any]]) -> list[str]:
    """Every non-default endpoint URL that storage options would connect to (checked like a provider baseURL):
    an s3 `endpoint_url`; an az connection string's `BlobEndpoint`/`DfsEndpoint`, or the account URL its
    `EndpointSuffix` and `DefaultEndpointsProtocol` make when that is not Azure's own https host."""
    found: set[str] = set()
    for protocol, opts in options.items():
        endpoint = (opts.get("client_kwargs") or {}).get("endpoint_url")
        if endpoint:
            found.add(str(endpoint))
        if protocol in ("az", "abfs"):
            found |= _azure_endpoints(opts)
    return sorted(found)


def _s3(secret: dict[str, str]) -> dict[str, dict[str, Any]]:
    opts: dict[str, Any] = {"key": secret.get("aws_access_key_id"), "secret": secret.get("aws_secret_access_key")}
    if not opts["key"] or not opts["secret"]:
        raise StorageError("an s3 credentials Secret needs aws_access_key_id and aws_secret_access_key")
    if secret.get("aws_session_token"):
        opts["token"] = secret["aws_session_token"]
    client: dict[str, str] = {}
    if secret.get("endpoint_url"):
        parts = urlsplit(secret["endpoint_url"])
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise StorageError("an s3 credentials Secret's endpoint_url must be an http(s) URL with a host")
        client["endpoint_url"] = secret["endpoint_url"]
    if secret.get("region"):
        if not S3_REGION.match(secret["region"]):
            raise StorageError("an s3 credentials Secret's region must be a region name (it becomes part of a host)")
        client["region_name"] = secret["region"]
    if client:
        opts["client_kwargs"] = client
    return {"s3": opts}


def _az(secret: dict[str, str]) -> dict[str, dict[str, Any]]:
    keys = ("account_name", "account_key", "sas_token", "connection_string")
    az = {k: secret[k] for k in keys if secret.get(k)}
    if not az.get("connection_string") and not (
        az.get("account_name") and (az.get("account_key") or az.get("sas_token"))
    ):
        raise StorageError(
            "an az credentials Secret needs connection_string, or account_name with account_key or sas_token"
        )
    if az.get("connection_string"):
        parse_connection_string(az["connection_string"])
    if "account_name" in az and not AZURE_ACCOUNT.match(az["account_name"]):
        raise StorageError("an az credentials Secret's account_name must be lower-case letters and digits only")
    if not SAS.match(az.get("sas_token", "")):
        raise StorageError("an az credentials Secret's sas_token is not a query string")
    return {"az": dict(az), "abfs": dict(az)}


def _gs(secret: dict[str, str]) -> dict[str, dict[str, Any]]:
    if not secret.get("service_account.json"):
        raise StorageError("a gs credentials Secret needs service_account.json")
    try:
        account = json.loads(secret["service_account.json"])
    except ValueError as exc:
        raise StorageError(f"a gs credentials Secret's service_account.json is not JSON: {exc}") from None
    if not isinstance(account, dict) or account.get("type", "service_account") != "service_account":
        raise StorageError("a gs credentials Secret's service_account.json must be a service account key")
    if "token_uri" in account and account["token_uri"] not in GOOGLE_TOKEN_URIS:
        raise StorageError("a gs key's token_uri must be Google's (google-auth posts a signed assertion to it)")
    if account.get("universe_domain", "googleapis.com") != "googleapis.com":
        raise StorageError("a gs key's universe_domain must be googleapis.com")
    return {"gcs": {"token": account}}


def credential_options(scheme: str, secret: dict[str, str]) -> dict[str, dict[str, Any]]:
    """fsspec options for one storage scheme from a credentials Secret's keys (see the README for the keys)."""
    scheme = {"abfs": "az", "gcs": "gs"}.get(scheme, scheme)
    if scheme == "s3":
        return _s3(secret)
    if scheme == "az":
        return _az(secret)
    if scheme == "gs":
        return _gs(secret)
    return {}
