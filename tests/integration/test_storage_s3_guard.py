"""s3 storage with an endpoint from a credentials Secret, against moto's S3 server on loopback (REVIEW-3 H1): the
endpoint was checked once at admission, then s3fs connected wherever the name resolved later (DNS rebinding). Now
every connection asks the admin's endpoint policy (barge.netguard through aiobotocore's resolver), and a literal
address is checked before any connection."""

from __future__ import annotations

from collections.abc import Iterator

import boto3
import pytest
from moto.server import ThreadedMotoServer

from barge import policy as p
from barge.netguard import AddressCheck
from barge.storage import StorageError, StoragePolicy, credential_options, read_lines, write_lines
from tests.conftest import free_port

SECRET = {"aws_access_key_id": "testing", "aws_secret_access_key": "testing", "region": "us-east-1"}


@pytest.fixture(scope="module")
def moto_port() -> Iterator[int]:
    port = free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    s3 = boto3.client("s3", endpoint_url=f"http://127.0.0.1:{port}", region_name="us-east-1", **_keys())
    s3.create_bucket(Bucket="shared")
    s3.put_object(Bucket="shared", Key="acme/in.jsonl", Body=b'{"id":1}\n')
    yield port
    server.stop()


def _keys() -> dict[str, str]:
    return {"aws_access_key_id": "testing", "aws_secret_access_key": "testing"}


def _storage(endpoint: str, policy: p.Policy) -> StoragePolicy:
    options = credential_options("s3", {**SECRET, "endpoint_url": endpoint})
    return StoragePolicy(prefixes=("s3://shared/acme/",), options=options, addresses=AddressCheck(policy))


def test_an_endpoint_name_is_checked_at_every_connection(moto_port: int) -> None:
    """`localhost` stands in for a name that resolved to a public address at admission and to a private one now."""
    closed = _storage(f"http://localhost:{moto_port}", p.Policy())
    with pytest.raises(StorageError, match="endpoint policy"):
        list(read_lines("s3://shared/acme/in.jsonl", closed))
    with pytest.raises(StorageError, match="endpoint policy"):
        write_lines("s3://shared/acme/out.jsonl", [b"x"], closed)


def test_a_literal_endpoint_address_is_checked_before_connecting(moto_port: int) -> None:
    closed = _storage(f"http://127.0.0.1:{moto_port}", p.Policy())
    with pytest.raises(StorageError, match="endpoint policy"):
        list(read_lines("s3://shared/acme/in.jsonl", closed))


def test_an_allowlisted_private_endpoint_works(moto_port: int) -> None:
    opened = p.Policy(endpoints=(p.Endpoint("localhost", private=True),))
    storage = _storage(f"http://localhost:{moto_port}", opened)
    assert list(read_lines("s3://shared/acme/in.jsonl", storage)) == [(1, b'{"id":1}')]
    assert write_lines("s3://shared/acme/out.jsonl", [b'{"ok":true}'], storage) == 1
    assert list(read_lines("s3://shared/acme/out.jsonl", storage)) == [(1, b'{"ok":true}')]
