"""A remote input with no credentials is a one-line StorageError naming the URL, not an SDK traceback: what a
newcomer sees first when `barge plan manifests/samples/llmbatchjob-anthropic.yaml` reads its s3:// input. Nothing
leaves loopback: the instance-metadata lookup is off and the s3 endpoint is a closed loopback port."""

from __future__ import annotations

import pytest

from barge.storage import StorageError, StoragePolicy, read_lines

AWS = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE",
       "AWS_CONTAINER_CREDENTIALS_FULL_URI", "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI", "AWS_WEB_IDENTITY_TOKEN_FILE",
       "AWS_ROLE_ARN")  # fmt: skip
AZURE = ("AZURE_STORAGE_CONNECTION_STRING", "AZURE_STORAGE_ACCOUNT_NAME", "AZURE_STORAGE_ACCOUNT_KEY",
         "AZURE_STORAGE_SAS_TOKEN")  # fmt: skip


def test_s3_without_credentials_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in AWS:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    monkeypatch.setenv("AWS_CONFIG_FILE", "/dev/null")
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", "/dev/null")
    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", "http://127.0.0.1:9")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    with pytest.raises(StorageError) as caught:
        list(read_lines("s3://claims-bucket/claims.jsonl", StoragePolicy()))
    assert str(caught.value).startswith("cannot open s3://claims-bucket/claims.jsonl: no credentials for it")


def test_az_without_an_account_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in AZURE:
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(StorageError) as caught:
        list(read_lines("az://contracts/clauses.jsonl", StoragePolicy()))
    assert str(caught.value).startswith("cannot use az://contracts/clauses.jsonl:")
    assert "account_name" in str(caught.value)
