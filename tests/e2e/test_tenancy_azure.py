"""Issue 12's storage attacks against Azure Blob Storage: Azurite (the Azure Storage emulator, pinned in
tools/azurite/ and installed by `make deps`) runs as a real process; Barge reaches it through adlfs with the
connection string of a team's credentialsSecretRef.

Azurite serves one account, its well-known development account, so both teams' Secrets hold the same connection
string: what keeps acme out of globex's container is the tenancy policy (`az://barge-{tenant}/` per tenant in the
e2e admin policy, tests/e2e/conftest.py), not the key. The connection string's BlobEndpoint is 127.0.0.1, which
the admin policy allowlists (private addresses allowed for that host) like the other emulators.
"""

from __future__ import annotations

import json
import subprocess
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tools.localcluster import Cluster

from barge.emulator.server import EmulatorThread
from tests.conftest import REPO
from tests.e2e import test_tenancy
from tests.e2e.conftest import credential_secret, free_port, wait_for
from tests.e2e.test_tenancy import GLOBEX_INPUT, Team, apply, job, refused, status, succeeded

pytestmark = pytest.mark.cluster
moto, teams = test_tenancy.moto, test_tenancy.teams  # the two teams (namespaces, Secrets), as in test_tenancy
AZURITE = REPO / "tools" / "azurite" / "node_modules" / ".bin" / "azurite-blob"
#: Azurite's well-known development account (published in its documentation; not a secret).
ACCOUNT = "devstoreaccount1"
ACCOUNT_KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="


@pytest.fixture(scope="module")
def azurite_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Azurite's data and its debug log (every request it served, one line each)."""
    return tmp_path_factory.mktemp("azurite")


@pytest.fixture(scope="module")
def azurite(azurite_dir: Path) -> Iterator[str]:
    """azurite-blob on a free port with its data in a temp dir, no telemetry; yields the account's connection
    string."""
    if not AZURITE.exists():
        pytest.fail(f"{AZURITE} is missing: run `make deps` (npm ci --prefix tools/azurite)")
    port = free_port()
    args = ["--blobHost", "127.0.0.1", "--blobPort", str(port), "--location", str(azurite_dir)]
    args += ["--debug", str(azurite_dir / "debug.log"), "--skipApiVersionCheck", "--loose", "--disableTelemetry"]
    log = (azurite_dir / "azurite.log").open("wb")
    proc = subprocess.Popen([str(AZURITE), *args], stdout=log, stderr=subprocess.STDOUT)
    endpoint = f"http://127.0.0.1:{port}/{ACCOUNT}"

    def up() -> bool:
        try:
            with urllib.request.urlopen(f"{endpoint}?comp=list", timeout=1):  # noqa: S310 - loopback
                return True
        except urllib.error.HTTPError:
            return True  # it answers (unauthenticated: 403), so it is listening
        except OSError:
            return False

    try:
        wait_for(up, 60, "azurite-blob")
        yield (f"DefaultEndpointsProtocol=http;AccountName={ACCOUNT};AccountKey={ACCOUNT_KEY};BlobEndpoint={endpoint};")
    finally:
        proc.terminate()
        proc.wait(10)
        log.close()


def blobs(connection_string: str) -> Any:
    from azure.storage.blob import BlobServiceClient

    return BlobServiceClient.from_connection_string(connection_string)


@pytest.fixture(scope="module")
def az_teams(cluster: Cluster, teams: dict[str, Team], azurite: str) -> dict[str, Team]:
    """Each team's container barge-<tenant> and its Secret `azure` (the connection string); globex's input."""
    service = blobs(azurite)
    for tenant, team in teams.items():
        credential_secret(cluster, team.namespace, "azure", {"connection_string": azurite})
        service.create_container(f"barge-{tenant}")
    data = "".join(json.dumps({"id": str(i), "text": f"{GLOBEX_INPUT} {i}"}) + "\n" for i in range(5))
    service.get_blob_client("barge-globex", "in.jsonl").upload_blob(data.encode())
    return teams


def test_credentials_secret_ref_reads_and_writes_the_teams_own_container(
    cluster: Cluster, az_teams: dict[str, Team], emulator: EmulatorThread, azurite: str
) -> None:
    acme = az_teams["acme"]
    lines = "".join(json.dumps({"id": str(i), "text": f"acme az item {i}"}) + "\n" for i in range(4))
    blobs(azurite).get_blob_client("barge-acme", "in/items.jsonl").upload_blob(lines.encode())
    doc = job(
        "own-container", emulator.url, "az://barge-acme/out/", url="az://barge-acme/in/items.jsonl", creds="azure"
    )
    apply(cluster, acme.namespace, doc)
    wait_for(succeeded(cluster, acme.namespace, "own-container"), 120, "own-container Succeeded")
    body = blobs(azurite).get_blob_client("barge-acme", "out/results.jsonl").download_blob().readall().decode()
    results = [json.loads(line) for line in body.splitlines()]
    assert sorted(r["id"] for r in results) == ["0", "1", "2", "3"]


def test_container_of_another_team_is_not_read_with_any_credentials(
    cluster: Cluster, az_teams: dict[str, Team], emulator: EmulatorThread, azurite: str, azurite_dir: Path
) -> None:
    acme = az_teams["acme"]
    steal = job("steal-az", emulator.url, "az://barge-acme/steal/", url="az://barge-globex/in.jsonl", creds="azure")
    apply(cluster, acme.namespace, steal)
    cond = refused(cluster, acme.namespace, "steal-az", "StoragePolicy")
    assert "az://barge-globex/in.jsonl" in cond["message"]
    overwrite = job("overwrite-az", emulator.url, "az://barge-globex/", creds="azure")
    apply(cluster, acme.namespace, overwrite)
    refused(cluster, acme.namespace, "overwrite-az", "StoragePolicy")
    assert GLOBEX_INPUT not in json.dumps(status(cluster, acme.namespace, "steal-az"))
    served = (azurite_dir / "debug.log").read_text(errors="replace").splitlines()
    barge = [x for x in served if "RequestURL=" in x and "/barge-globex" in x]
    assert [x for x in barge if "adlfs/" in x or "RequestMethod=PUT" not in x] == [], "only the fixture's PUTs"
    assert any("RequestMethod=PUT" in x and "/barge-globex/in.jsonl" in x for x in served), "the log is complete"
    assert not list(blobs(azurite).get_container_client("barge-acme").list_blobs(name_starts_with="steal"))
    assert [b.name for b in blobs(azurite).get_container_client("barge-globex").list_blobs()] == ["in.jsonl"]


def test_container_without_credentials_is_refused_while_ambient_credentials_are_off(
    cluster: Cluster, az_teams: dict[str, Team], emulator: EmulatorThread
) -> None:
    acme = az_teams["acme"]
    doc = job("ambient-az", emulator.url, "az://barge-acme/ambient/", url="az://barge-acme/in/items.jsonl")
    apply(cluster, acme.namespace, doc)
    cond = refused(cluster, acme.namespace, "ambient-az", "CredentialPolicy")
    assert "credentialsSecretRef" in cond["message"]
