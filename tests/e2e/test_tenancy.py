"""Two teams on one operator: every attack of issue 12's "Why" list, tried by team acme against team globex.

The e2e operator (tests/e2e/conftest.py) runs with an admin policy: tenants acme and globex get only
`file://<workdir>/<tenant>/` and `s3://barge-<tenant>/`; the emulators on 127.0.0.1 are allowlisted (private
addresses allowed for that host), `localhost` is allowlisted by name only. Each namespace is labelled with its
tenant by the "admin" (the test), as a platform team would. S3 is moto's server, started as a real process.
Each test is named after the attack and fails on the code before the tenancy policy (the job ran, read or wrote
what it named, or sent a request where it was told to).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from http.server import ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import yaml
from tools.localcluster import Cluster

from barge.emulator.server import EmulatorThread
from tests.conftest import kubectl_json, state
from tests.e2e.conftest import Operator, credential_secret, free_port, wait_for
from tests.integration.test_endpoint_guard import LEAK, _Hostile

pytestmark = pytest.mark.cluster
GLOBEX_INPUT = "GLOBEX-CONFIDENTIAL-INPUT-7d1e"
GLOBEX_KEY = "sk-globex-DO-NOT-LEAK-91b2"
ACME_KEY = "sk-acme-DO-NOT-LEAK-33c8"
DB_PASSWORD = "db-password-DO-NOT-LEAK-5e0f"
AWS = {"acme": ("AKIAACME0000", "acme-secret-DO-NOT-LEAK"), "globex": ("AKIAGLOBEX00", "globex-secret-DO-NOT-LEAK")}


@dataclass(frozen=True)
class Team:
    tenant: str
    namespace: str
    folder: Path


@pytest.fixture(scope="module")
def moto() -> Iterator[str]:
    """moto's S3 server (from PyPI, a dev dependency) as its own process on a free port."""
    port = free_port()
    server = Path(sys.executable).parent / "moto_server"
    proc = subprocess.Popen(
        [str(server), "-H", "127.0.0.1", "-p", str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    url = f"http://127.0.0.1:{port}"

    def up() -> bool:
        try:
            with urllib.request.urlopen(f"{url}/moto-api/", timeout=1):  # noqa: S310 - loopback
                return True
        except OSError:
            return False

    try:
        wait_for(up, 30, "moto_server")
        yield url
    finally:
        proc.terminate()
        proc.wait(10)


def s3(moto: str, tenant: str) -> Any:
    import boto3

    key, secret = AWS[tenant]
    return boto3.client(
        "s3", endpoint_url=moto, aws_access_key_id=key, aws_secret_access_key=secret, region_name="us-east-1"
    )


@pytest.fixture(scope="module")
def teams(cluster: Cluster, operator: Operator, moto: str) -> dict[str, Team]:
    """Two namespaces labelled as two tenants by the admin, each with its API key, storage Secret and bucket."""
    out = {}
    for tenant, key in (("acme", ACME_KEY), ("globex", GLOBEX_KEY)):
        ns = f"{tenant}-{os.urandom(3).hex()}"
        cluster.run_kubectl("create", "namespace", ns)
        cluster.run_kubectl("label", "namespace", ns, f"barge.dev/tenant={tenant}")
        credential_secret(cluster, ns, "anthropic", {"api-key": key})
        access, secret = AWS[tenant]
        credential_secret(
            cluster,
            ns,
            "storage",
            {"aws_access_key_id": access, "aws_secret_access_key": secret, "endpoint_url": moto, "region": "us-east-1"},
        )
        folder = operator.workdir / tenant
        folder.mkdir(exist_ok=True)
        s3(moto, tenant).create_bucket(Bucket=f"barge-{tenant}")
        out[tenant] = Team(tenant, ns, folder)
    globex = out["globex"]
    data = "".join(json.dumps({"id": str(i), "text": f"{GLOBEX_INPUT} {i}"}) + "\n" for i in range(5))
    (globex.folder / "in.jsonl").write_text(data)
    s3(moto, "globex").put_object(Bucket="barge-globex", Key="in.jsonl", Body=data.encode())
    return out


def job(name: str, base_url: str, output: str, *, url: str = "", creds: str = "", **spec: Any) -> dict[str, Any]:
    """An LLMBatchJob through the Anthropic emulator: input from `url` (else three inline items), results to
    `output`, storage credentials from Secret `creds` for both; `spec` entries are merged over the rest."""
    ref = {"credentialsSecretRef": {"name": creds}} if creds else {}
    source: dict[str, Any] = (
        {"url": url, **ref} if url else {"inline": [{"id": str(i), "text": f"acme item {i}"} for i in range(3)]}
    )
    doc: dict[str, Any] = {
        "apiVersion": "barge.dev/v1alpha1",
        "kind": "LLMBatchJob",
        "metadata": {"name": name},
        "spec": {
            "provider": {
                "type": "anthropic",
                "model": "claude-sonnet-4-6",
                "secretRef": {"name": "anthropic", "key": "api-key"},
                "baseURL": base_url,
            },
            "input": source,
            "request": {"template": "{{ text }}", "maxTokens": 20},
            "output": {"url": output, **ref},
        },
    }
    for key, value in spec.items():
        doc["spec"][key] = {**doc["spec"].get(key, {}), **value} if isinstance(value, dict) else value
    return doc


def apply(cluster: Cluster, ns: str, doc: dict[str, Any], check: bool = True) -> subprocess.CompletedProcess[str]:
    out: subprocess.CompletedProcess[str] = cluster.run_kubectl(
        "-n", ns, "apply", "-f", "-", input=yaml.safe_dump(doc), check=check
    )
    return out


def status(cluster: Cluster, ns: str, name: str) -> dict[str, Any]:
    return kubectl_json(cluster, "-n", ns, "get", "lbj", name).get("status") or {}  # type: ignore[return-value]


def refused(cluster: Cluster, ns: str, name: str, policy: str) -> dict[str, Any]:
    """Wait for Admitted=False with the policy's name as reason; the job stays Pending with nothing done."""

    def admitted() -> dict[str, Any] | None:
        conds = {c["type"]: c for c in status(cluster, ns, name).get("conditions", [])}
        cond = conds.get("Admitted", {})
        return cond if cond.get("status") == "False" and cond.get("reason") == policy else None

    cond: dict[str, Any] = wait_for(admitted, 60, f"Admitted=False {policy} on {name}")
    st = status(cluster, ns, name)
    assert st["phase"] == "Pending"
    assert (st.get("counts") or {}).get("total", 0) == 0
    return cond


def succeeded(cluster: Cluster, ns: str, name: str) -> Callable[[], bool]:
    return lambda: status(cluster, ns, name).get("phase") == "Succeeded"


@pytest.fixture
def hostile() -> Iterator[tuple[str, type[_Hostile]]]:
    handler = type("Handler", (_Hostile,), {"hits": []})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}", handler
    server.shutdown()
    server.server_close()


# --- object storage -----------------------------------------------------------------------------------------
def test_object_storage_of_another_team_is_not_read_with_any_credentials(
    cluster: Cluster, teams: dict[str, Team], emulator: EmulatorThread
) -> None:
    acme = teams["acme"]
    steal = job("steal-s3", emulator.url, "s3://barge-acme/steal/", url="s3://barge-globex/in.jsonl", creds="storage")
    apply(cluster, acme.namespace, steal)
    cond = refused(cluster, acme.namespace, "steal-s3", "StoragePolicy")
    assert "s3://barge-globex/in.jsonl" in cond["message"]
    overwrite = job("overwrite-s3", emulator.url, "s3://barge-globex/", creds="storage")
    apply(cluster, acme.namespace, overwrite)
    refused(cluster, acme.namespace, "overwrite-s3", "StoragePolicy")


def test_object_storage_without_credentials_is_refused_while_ambient_credentials_are_off(
    cluster: Cluster, teams: dict[str, Team], emulator: EmulatorThread
) -> None:
    acme = teams["acme"]
    apply(cluster, acme.namespace, job("ambient", emulator.url, "s3://barge-acme/ambient/"))
    cond = refused(cluster, acme.namespace, "ambient", "CredentialPolicy")
    assert "credentialsSecretRef" in cond["message"]


def test_credentials_secret_ref_reads_and_writes_the_teams_own_bucket(
    cluster: Cluster, teams: dict[str, Team], emulator: EmulatorThread, moto: str
) -> None:
    acme = teams["acme"]
    lines = "".join(json.dumps({"id": str(i), "text": f"acme s3 item {i}"}) + "\n" for i in range(4))
    s3(moto, "acme").put_object(Bucket="barge-acme", Key="in/items.jsonl", Body=lines.encode())
    doc = job("own-bucket", emulator.url, "s3://barge-acme/out/", url="s3://barge-acme/in/items.jsonl", creds="storage")
    apply(cluster, acme.namespace, doc)
    wait_for(succeeded(cluster, acme.namespace, "own-bucket"), 120, "own-bucket Succeeded")
    body = s3(moto, "acme").get_object(Bucket="barge-acme", Key="out/results.jsonl")["Body"].read().decode()
    assert len(body.splitlines()) == 4


# --- file roots ---------------------------------------------------------------------------------------------
def test_file_roots_shared_by_every_namespace_let_one_team_read_anothers_files(
    cluster: Cluster, teams: dict[str, Team], emulator: EmulatorThread
) -> None:
    acme, globex = teams["acme"], teams["globex"]
    doc = job("steal-file", emulator.url, f"file://{acme.folder}/steal/", url=f"file://{globex.folder}/in.jsonl")
    apply(cluster, acme.namespace, doc)
    refused(cluster, acme.namespace, "steal-file", "StoragePolicy")
    apply(cluster, acme.namespace, job("overwrite-file", emulator.url, f"file://{globex.folder}/"))
    refused(cluster, acme.namespace, "overwrite-file", "StoragePolicy")
    (acme.folder / "link-in.jsonl").symlink_to(globex.folder / "in.jsonl")
    doc = job("steal-link", emulator.url, f"file://{acme.folder}/link/", url=f"file://{acme.folder}/link-in.jsonl")
    apply(cluster, acme.namespace, doc)
    wait_for(lambda: status(cluster, acme.namespace, "steal-link").get("conditions"), 60, "a condition")
    st = wait_for(
        lambda: (
            (s := status(cluster, acme.namespace, "steal-link")).get("message")
            and "StoragePolicy" in s["message"]
            and s
        ),
        60,
        "the symlink refused",
    )
    assert GLOBEX_INPUT not in json.dumps(st)


def test_partial_file_planted_as_a_symlink_does_not_overwrite_another_teams_results(
    cluster: Cluster, teams: dict[str, Team], emulator: EmulatorThread
) -> None:
    acme, globex = teams["acme"], teams["globex"]
    victim = globex.folder / "results.jsonl"
    victim.write_text("globex's results\n")
    out = acme.folder / "planted"
    out.mkdir()
    (out / "results.jsonl.partial").symlink_to(victim)
    (out / "failures.jsonl.partial").symlink_to(victim)
    apply(cluster, acme.namespace, job("planted", emulator.url, f"file://{out}/"))
    wait_for(succeeded(cluster, acme.namespace, "planted"), 120, "planted Succeeded")
    assert victim.read_text() == "globex's results\n"
    assert len((out / "results.jsonl").read_text().splitlines()) == 3
    assert not (out / "results.jsonl").is_symlink()


# --- provider endpoints -------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("name", "base_url"),
    [
        ("metadata", "http://169.254.169.254/latest/meta-data/"),
        ("metadata-name", "http://metadata.google.internal/computeMetadata/v1/"),
        ("not-allowlisted", "https://attacker.example.com/v1"),
        ("loopback-by-name", "http://localhost:{port}"),  # allowlisted by name, but not for private addresses
    ],
)
def test_base_url_ssrf_to_loopback_private_or_metadata_is_refused(
    cluster: Cluster, teams: dict[str, Team], start_emulator: Callable[..., EmulatorThread], name: str, base_url: str
) -> None:
    inside = start_emulator()  # an internal service on loopback
    acme = teams["acme"]
    url = base_url.format(port=inside.url.rsplit(":", 1)[1])
    apply(cluster, acme.namespace, job(f"ssrf-{name}", url, f"file://{acme.folder}/ssrf-{name}/"))
    refused(cluster, acme.namespace, f"ssrf-{name}", "EndpointPolicy")
    time.sleep(1)
    assert state(inside)["batches"] == []
    assert inside.store.sync_requests == 0


def test_base_url_ssrf_through_a_redirect_and_reflected_error_body(
    cluster: Cluster,
    teams: dict[str, Team],
    start_emulator: Callable[..., EmulatorThread],
    hostile: tuple[str, type[_Hostile]],
) -> None:
    inside = start_emulator()
    acme = teams["acme"]
    url, handler = hostile
    handler.redirect_to = f"{inside.url}/v1/messages/batches"
    apply(cluster, acme.namespace, job("redirect", url, f"file://{acme.folder}/redirect/"))
    wait_for(lambda: handler.hits, 60, "the allowlisted host asked")
    time.sleep(2)
    assert state(inside)["batches"] == [], "the redirect was not followed"
    assert inside.store.sync_requests == 0

    handler.redirect_to = ""  # now it answers 500 with a long hostile body
    apply(cluster, acme.namespace, job("reflect", url, f"file://{acme.folder}/reflect/"))
    wait_for(
        lambda: any(e["involvedObject"]["name"] == "reflect" for e in events(cluster, acme.namespace)),
        60,
        "an event about the failing provider",
    )
    seen = json.dumps([e["message"] for e in events(cluster, acme.namespace)]) + json.dumps(
        status(cluster, acme.namespace, "reflect")
    )
    assert "\\u001b" not in seen
    assert "\x1b" not in seen
    assert seen.count(LEAK) <= 20, "only a bounded fragment of the body is repeated"


def events(cluster: Cluster, ns: str) -> list[dict[str, Any]]:
    return list(kubectl_json(cluster, "-n", ns, "get", "events")["items"])  # type: ignore[call-overload]


# --- Secrets ------------------------------------------------------------------------------------------------
def test_secret_ref_to_an_unmarked_secret_sends_no_value_anywhere(
    cluster: Cluster, teams: dict[str, Team], start_emulator: Callable[..., EmulatorThread], operator: Operator
) -> None:
    catcher = start_emulator()  # "a host they control"
    acme = teams["acme"]
    credential_secret(cluster, acme.namespace, "db-credentials", {"password": DB_PASSWORD}, marked=False)
    doc = job(
        "exfiltrate",
        catcher.url,
        f"file://{acme.folder}/exfiltrate/",
        provider={"secretRef": {"name": "db-credentials", "key": "password"}},
    )
    apply(cluster, acme.namespace, doc)
    cond = refused(cluster, acme.namespace, "exfiltrate", "SecretPolicy")
    assert "barge.dev/credential" in cond["message"]
    time.sleep(1)
    assert state(catcher)["batches"] == []
    assert catcher.store.sync_requests == 0
    assert DB_PASSWORD not in operator.output()


# --- names --------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["../../{globex}/inferencepools/gpu", "gpu/status", "GPU"])
def test_pool_ref_name_that_is_a_path_is_rejected_by_the_api_server(
    cluster: Cluster, teams: dict[str, Team], emulator: EmulatorThread, name: str
) -> None:
    acme = teams["acme"]
    doc = job("traverse", emulator.url, f"file://{acme.folder}/traverse/")
    doc["spec"]["provider"] = {"type": "pool", "poolRef": {"name": name.format(globex=teams["globex"].namespace)}}
    out = apply(cluster, acme.namespace, doc, check=False)
    assert out.returncode != 0
    assert "spec.provider.poolRef.name" in out.stderr


# --- metering -----------------------------------------------------------------------------------------------
def test_spec_tenant_cannot_meter_spend_to_another_team(
    cluster: Cluster, teams: dict[str, Team], emulator: EmulatorThread, operator: Operator
) -> None:
    acme = teams["acme"]
    apply(cluster, acme.namespace, job("bill-globex", emulator.url, f"file://{acme.folder}/bill/", tenant="globex"))
    cond = refused(cluster, acme.namespace, "bill-globex", "TenantPolicy")
    assert "globex" in cond["message"]
    assert "acme" in cond["message"]
    apply(cluster, acme.namespace, job("bill-self", emulator.url, f"file://{acme.folder}/self/", tenant="acme"))
    wait_for(succeeded(cluster, acme.namespace, "bill-self"), 120, "bill-self Succeeded")
    requests = [x for x in operator.metrics().splitlines() if x.startswith("barge_requests_total{")]
    assert any('tenant="acme"' in x for x in requests)
    assert not any(
        'tenant="globex"' in x and f'namespace="{acme.namespace}"' in x for x in operator.metrics().splitlines()
    )


# --- nothing of team B reaches team A -----------------------------------------------------------------------
def test_nothing_of_one_team_reaches_the_other(
    cluster: Cluster, teams: dict[str, Team], emulator: EmulatorThread, operator: Operator
) -> None:
    acme, globex = teams["acme"], teams["globex"]
    doc = job("globex-own", emulator.url, f"file://{globex.folder}/out/", url=f"file://{globex.folder}/in.jsonl")
    apply(cluster, globex.namespace, doc)
    wait_for(succeeded(cluster, globex.namespace, "globex-own"), 120, "globex-own Succeeded")
    assert len((globex.folder / "out" / "results.jsonl").read_text().splitlines()) == 5
    seen = ""
    for path in acme.folder.rglob("*"):
        if path.is_file() and not path.is_symlink():
            seen += path.read_text(errors="replace")
    seen += cluster.run_kubectl("-n", acme.namespace, "get", "events", "-o", "yaml").stdout
    seen += cluster.run_kubectl("-n", acme.namespace, "get", "lbj", "-o", "yaml").stdout
    seen += "\n".join(x for x in operator.metrics().splitlines() if acme.namespace in x or 'tenant="acme"' in x)
    for secret in (GLOBEX_INPUT, GLOBEX_KEY, AWS["globex"][1], DB_PASSWORD):
        assert secret not in seen, f"{secret} reached team acme"
    assert globex.namespace not in seen
    assert GLOBEX_KEY not in operator.output()
    assert ACME_KEY not in operator.output()


# --- InferencePools -------------------------------------------------------------------------------------------
def pool_doc(name: str, **engine: Any) -> dict[str, Any]:
    return {
        "apiVersion": "barge.dev/v1alpha1",
        "kind": "InferencePool",
        "metadata": {"name": name},
        "spec": {"model": "meta-llama/Llama-3.1-8B-Instruct", "engine": {"gpus": 1, **engine}},
    }


def pool_reason(cluster: Cluster, ns: str, name: str, reason: str) -> Callable[[], dict[str, Any] | None]:
    def found() -> dict[str, Any] | None:
        st = kubectl_json(cluster, "-n", ns, "get", "bpool", name).get("status") or {}
        conds = st.get("conditions", []) if isinstance(st, dict) else []
        return next((c for c in conds if c.get("reason") == reason), None)

    return found


@pytest.mark.parametrize(
    ("name", "engine", "reason"),
    [
        ("miner", {"image": "attacker/miner:latest"}, "ImagePolicy"),
        ("flags", {"args": {"extra": ["--trust-remote-code"]}}, "ImagePolicy"),
        ("hf-token", {"hfTokenSecretRef": {"name": "db-credentials", "key": "password"}}, "SecretPolicy"),
    ],
)
def test_inference_pool_with_any_image_flags_or_secret_is_refused(
    cluster: Cluster, teams: dict[str, Team], name: str, engine: dict[str, Any], reason: str
) -> None:
    acme = teams["acme"]
    credential_secret(cluster, acme.namespace, "db-credentials", {"password": DB_PASSWORD}, marked=False)
    apply(cluster, acme.namespace, pool_doc(name, **engine))
    wait_for(pool_reason(cluster, acme.namespace, name, reason), 60, f"{reason} on pool {name}")
    deployments = kubectl_json(cluster, "-n", acme.namespace, "get", "deployments")["items"]  # type: ignore[index]
    assert not [d for d in deployments if d["metadata"]["name"].startswith(f"{name}-")], "nothing was created"


def test_server_side_apply_does_not_take_over_an_existing_service_of_the_same_name(
    cluster: Cluster, teams: dict[str, Team]
) -> None:
    acme = teams["acme"]
    theirs = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "shared-name", "labels": {"owner": "someone-else"}},
        "spec": {"selector": {"app": "billing"}, "ports": [{"port": 443, "targetPort": 8443}]},
    }
    apply(cluster, acme.namespace, theirs)
    apply(cluster, acme.namespace, pool_doc("shared-name"))
    cond = wait_for(pool_reason(cluster, acme.namespace, "shared-name", "NameConflict"), 60, "NameConflict")
    assert "Service 'shared-name'" in cond["message"]
    svc = kubectl_json(cluster, "-n", acme.namespace, "get", "service", "shared-name")
    assert svc["spec"]["selector"] == {"app": "billing"}  # type: ignore[index]
    assert [p["port"] for p in svc["spec"]["ports"]] == [443]  # type: ignore[index]
    assert not svc["metadata"].get("ownerReferences")  # type: ignore[union-attr]
    managers = {m["manager"] for m in svc["metadata"].get("managedFields", [])}  # type: ignore[union-attr]
    assert "barge" not in managers
