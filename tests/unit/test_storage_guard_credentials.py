"""A tenant's credentials Secret cannot point the operator's storage client at a host outside the endpoint policy
(REVIEW-3 H1): every host the client would connect to is either refused in the Secret or listed by
`credential_endpoints`, which admission checks like a provider baseURL. The clients are only constructed here."""

from __future__ import annotations

import warnings
from typing import Any
from urllib.parse import urlsplit

import pytest

from barge.storage import StorageError, credential_endpoints, credential_options

KEY = "a2V5a2V5"
HOSTILE_AZ: list[dict[str, str]] = [
    {"account_name": "acct.10.0.0.12.nip.io:8443/x?", "account_key": KEY},
    {"account_name": "169.254.169.254/latest/meta-data?", "sas_token": "sv=1"},
    {"account_name": "acct", "sas_token": "sv=1#@169.254.169.254/"},
    {
        "connection_string": "DefaultEndpointsProtocol=http;AccountName=x;AccountKey=a2V5a2V5;"
        "EndpointSuffix=10.0.0.12.nip.io"
    },
    {
        "connection_string": f"DefaultEndpointsProtocol=http;AccountName=x;AccountKey={KEY};"
        "EndpointSuffix=attacker.example:9200"
    },
    {"connection_string": f"DefaultEndpointsProtocol=http;AccountName=x;AccountKey={KEY}"},
    {"connection_string": f"AccountName=x.evil.example/;AccountKey={KEY}"},
    {"connection_string": f"AccountName=x;AccountKey={KEY};SecondaryBlobEndpoint=http://169.254.169.254/"},
    {"connection_string": f"AccountName=x;AccountKey={KEY};BlobEndpoint=http://169.254.169.254/a"},
]


def _hosts_the_client_uses(options: dict[str, Any]) -> set[str]:
    import adlfs

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fs = adlfs.AzureBlobFileSystem(skip_instance_cache=True, **options["az"])
    client = fs.service_client
    urls = {client.url, client.primary_endpoint}  # the secondary is used only with location_mode="secondary"
    return {f"{urlsplit(u).scheme}://{urlsplit(u).netloc}".lower() for u in urls}


def _origins(endpoints: list[str]) -> set[str]:
    return {f"{urlsplit(e).scheme}://{urlsplit(e).netloc}".lower() for e in endpoints}


@pytest.mark.parametrize("secret", HOSTILE_AZ, ids=range(len(HOSTILE_AZ)))
def test_every_azure_host_is_refused_or_checked(secret: dict[str, str]) -> None:
    try:
        options = credential_options("az", secret)
    except StorageError:
        return  # refused in the Secret itself: nothing to connect to
    used = _hosts_the_client_uses(options)
    public = {o for o in used if o.startswith("https://") and o.endswith(".blob.core.windows.net")}
    checked = _origins(credential_endpoints(options))
    assert used - public <= checked, f"the client would connect to {used - public - checked}, which nobody checks"


def test_plain_azure_accounts_still_work() -> None:
    for secret in (
        {"account_name": "acct01", "account_key": KEY},
        {"account_name": "acct01", "sas_token": "?sv=2024-01-01&sig=abc%2Bdef%3D"},
        {
            "connection_string": f"DefaultEndpointsProtocol=https;AccountName=acct01;AccountKey={KEY};"
            "EndpointSuffix=core.windows.net"
        },
    ):
        options = credential_options("az", secret)
        assert credential_endpoints(options) == []
        assert _hosts_the_client_uses(options) == {"https://acct01.blob.core.windows.net"}


def test_azurite_blob_endpoint_is_listed_for_the_endpoint_policy() -> None:
    conn = (
        "DefaultEndpointsProtocol=http;AccountName=devstoreaccount1;AccountKey=" + KEY + ";"
        "BlobEndpoint=http://127.0.0.1:10000/devstoreaccount1;"
    )
    options = credential_options("az", {"connection_string": conn})
    assert credential_endpoints(options) == ["http://127.0.0.1:10000/devstoreaccount1"]


@pytest.mark.parametrize(
    "secret",
    [
        {"aws_access_key_id": "A", "aws_secret_access_key": "S", "region": "x.evil.example/"},
        {"aws_access_key_id": "A", "aws_secret_access_key": "S", "endpoint_url": "ftp://evil.example/"},
    ],
)
def test_s3_overrides_are_refused_or_checked(secret: dict[str, str]) -> None:
    try:
        options = credential_options("s3", secret)
    except StorageError:
        return
    endpoint = secret.get("endpoint_url")
    assert endpoint is None or endpoint in credential_endpoints(options)
    assert "region" not in secret, "a region is part of the host botocore builds: it must be a region name"


@pytest.mark.parametrize(
    "token_uri",
    [
        "http://169.254.169.254/computeMetadata/v1/",
        "https://evil.example/token",
        "https://oauth2.googleapis.com.evil/t",
    ],
)
def test_gcs_token_uri_must_be_googles(token_uri: str) -> None:
    """google-auth POSTs a signed assertion to the key file's token_uri: it is an endpoint like any other."""
    account = {"type": "service_account", "client_email": "a@b.iam.gserviceaccount.com", "token_uri": token_uri}
    import json

    with pytest.raises(StorageError, match="token_uri"):
        credential_options("gs", {"service_account.json": json.dumps(account)})


def test_gcs_default_token_uri_is_fine() -> None:
    import json

    account = {"type": "service_account", "token_uri": "https://oauth2.googleapis.com/token"}
    assert credential_options("gs", {"service_account.json": json.dumps(account)})["gcs"]["token"] == account
