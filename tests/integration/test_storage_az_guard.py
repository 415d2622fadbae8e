"""az:// storage against Azurite (the Azure Storage emulator, tools/azurite, a real process on loopback) (REVIEW-3
H1): a BlobEndpoint from a credentials Secret was checked once at admission, then azure-core connected wherever
the name resolved later, through any proxy of the environment. Now every connection asks the admin's endpoint
policy (barge.storage.azure on barge.netguard)."""

from __future__ import annotations

import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from barge import policy as p
from barge.netguard import AddressCheck
from barge.storage import StorageError, StoragePolicy, credential_options, read_lines, write_lines
from tests.conftest import REPO, free_port

AZURITE = REPO / "tools" / "azurite" / "node_modules" / ".bin" / "azurite-blob"
ACCOUNT = "devstoreaccount1"
#: Azurite's well-known development account key (published in its documentation; not a secret).
ACCOUNT_KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="


@pytest.fixture(scope="module")
def azurite(tmp_path_factory: pytest.TempPathFactory) -> Iterator[int]:
    if not AZURITE.exists():
        pytest.fail(f"{AZURITE} is missing: run `make deps` (npm ci --prefix tools/azurite)")
    data: Path = tmp_path_factory.mktemp("azurite")
    port = free_port()
    args = ["--blobHost", "127.0.0.1", "--blobPort", str(port), "--location", str(data)]
    args += ["--skipApiVersionCheck", "--loose", "--disableTelemetry"]
    with (data / "azurite.log").open("wb") as log:
        proc = subprocess.Popen([str(AZURITE), *args], stdout=log, stderr=subprocess.STDOUT)
        try:
            for _ in range(600):
                try:
                    urllib.request.urlopen(f"http://127.0.0.1:{port}/{ACCOUNT}?comp=list", timeout=1)
                    break
                except urllib.error.HTTPError:
                    break  # it answers (403 unauthenticated): listening
                except OSError:
                    time.sleep(0.1)
            from azure.storage.blob import BlobServiceClient

            service = BlobServiceClient.from_connection_string(_connection(f"http://127.0.0.1:{port}"))
            service.create_container("barge-acme")
            service.get_blob_client("barge-acme", "in.jsonl").upload_blob(b'{"id":1}\n')
            yield port
        finally:
            proc.terminate()
            proc.wait(10)


def _connection(host: str) -> str:
    return (
        f"DefaultEndpointsProtocol=http;AccountName={ACCOUNT};AccountKey={ACCOUNT_KEY};BlobEndpoint={host}/{ACCOUNT};"
    )


def _storage(host: str, policy: p.Policy) -> StoragePolicy:
    options = credential_options("az", {"connection_string": _connection(host)})
    return StoragePolicy(prefixes=("az://barge-acme/",), options=options, addresses=AddressCheck(policy))


def test_a_blob_endpoint_name_is_checked_at_every_connection(azurite: int) -> None:
    """`localhost` stands in for a name that resolved to an allowed address at admission and to another now."""
    closed = _storage(f"http://localhost:{azurite}", p.Policy())
    with pytest.raises(StorageError, match="endpoint policy"):
        list(read_lines("az://barge-acme/in.jsonl", closed))
    with pytest.raises(StorageError, match="endpoint policy"):
        write_lines("az://barge-acme/out.jsonl", [b"x"], closed)


def test_an_allowlisted_blob_endpoint_works_and_ignores_env_proxies(
    azurite: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("HTTP_PROXY", "http_proxy", "HTTPS_PROXY", "https_proxy"):
        monkeypatch.setenv(name, "http://127.0.0.1:9")  # discard: a proxy would fail every call
    monkeypatch.setenv("NO_PROXY", "")
    opened = p.Policy(endpoints=(p.Endpoint("localhost", private=True),))
    storage = _storage(f"http://localhost:{azurite}", opened)
    assert list(read_lines("az://barge-acme/in.jsonl", storage)) == [(1, b'{"id":1}')]
    assert write_lines("az://barge-acme/out.jsonl", [b'{"ok":true}'], storage) == 1
    assert list(read_lines("az://barge-acme/out.jsonl", storage)) == [(1, b'{"ok":true}')]
