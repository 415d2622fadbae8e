"""`barge gateway --tls-cert --tls-key`: the callers' port speaks HTTPS, reached by the real openai SDK with the CA
the test made (httpx verify=), on the real API server with the two teams of tests/e2e/test_gateway.py. A client
without the CA is refused by its own verification, a plain-HTTP request gets no answer, and the metrics port
stays plain HTTP."""

from __future__ import annotations

import contextlib
import os
import ssl
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import httpx2 as httpx
import openai
import pytest
from tools.localcluster import Cluster

from tests.e2e import test_gateway as gw
from tests.e2e.conftest import Operator, free_port, wait_for
from tests.e2e.test_gateway import Team, line, upload
from tests.tls_certs import Certs, make_certs

emu, teams = gw.emu, gw.teams  # the module fixtures of test_gateway.py, by name (two namespaces, their pools)

pytestmark = pytest.mark.cluster


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    return make_certs(tmp_path_factory.mktemp("tls"))


@contextlib.contextmanager
def https_gateway(cluster: Cluster, operator: Operator, certs: Certs) -> Iterator[tuple[str, int]]:
    port, metrics_port = free_port(), free_port()
    log = operator.workdir / f"gateway-tls-{port}.log"
    environ = {
        **os.environ,
        "KUBECONFIG": str(cluster.kubeconfig),
        "BARGE_POLICY_FILE": str(operator.workdir / "policy.yaml"),
        "BARGE_GATEWAY_METRICS_PORT": str(metrics_port),
        "BARGE_GATEWAY_TLS_KEY": str(certs.key),  # the key from the environment, as the chart passes it
    }
    args = ["gateway", "--port", str(port), "--tls-cert", str(certs.cert)]
    with log.open("wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "barge.cli", *args], env=environ, stdout=out, stderr=out)
    verified = ssl.create_default_context(cafile=str(certs.ca))

    def healthy() -> bool:
        try:
            with urllib.request.urlopen(f"https://127.0.0.1:{port}/healthz", timeout=1, context=verified):
                return True
        except OSError:
            return False

    try:
        wait_for(healthy, 30, "gateway /healthz over HTTPS")
        yield f"https://127.0.0.1:{port}", metrics_port
    finally:
        if proc.poll() is None:
            proc.terminate()
            proc.wait(10)
        print(log.read_text(errors="replace")[-4000:])


@pytest.fixture(scope="module")
def gateway(cluster: Cluster, operator: Operator, teams: dict[str, Team], certs: Certs) -> Iterator[tuple[str, int]]:
    with https_gateway(cluster, operator, certs) as served:
        yield served


def test_the_openai_sdk_uploads_and_creates_a_batch_over_https_with_the_ca(
    gateway: tuple[str, int], teams: dict[str, Team], certs: Certs, tmp_path: Path
) -> None:
    url, _ = gateway
    assert url.startswith("https://")
    with httpx.Client(verify=ssl.create_default_context(cafile=str(certs.ca))) as http:
        oai = openai.OpenAI(api_key=teams["acme"].token, base_url=f"{url}/v1", max_retries=0, http_client=http)
        made = upload(oai, tmp_path, [line("t1", "over TLS"), line("t2", "still over TLS")])
        assert made.id in {f.id for f in oai.files.list()}
        content = oai.files.content(made.id).read().decode().splitlines()
        assert [c for c in content if c] == [line("t1", "over TLS"), line("t2", "still over TLS")]
        batch = oai.batches.create(input_file_id=made.id, endpoint="/v1/chat/completions", completion_window="24h")
        assert oai.batches.retrieve(batch.id).id == batch.id
        with pytest.raises(openai.AuthenticationError):  # TLS changes nothing about who may call
            openai.OpenAI(api_key="not-a-token", base_url=f"{url}/v1", max_retries=0, http_client=http).files.list()


def test_a_client_without_the_ca_and_plain_http_get_no_answer(gateway: tuple[str, int], teams: dict[str, Team]) -> None:
    url, _ = gateway
    with pytest.raises(openai.APIConnectionError) as refused:  # the system's CAs do not know the test's CA
        openai.OpenAI(api_key=teams["acme"].token, base_url=f"{url}/v1", max_retries=0).files.list()
    assert "CERTIFICATE_VERIFY_FAILED" in repr(refused.value.__cause__) + repr(refused.value.__cause__.__context__)
    with pytest.raises(httpx.TransportError):  # a token sent in clear text to the HTTPS port is never answered
        httpx.get(url.replace("https://", "http://") + "/v1/files", headers={"Authorization": "Bearer x"}, timeout=5)


def test_the_metrics_port_stays_plain_http(gateway: tuple[str, int], certs: Certs) -> None:
    url, metrics_port = gateway
    assert (
        httpx.get(f"{url}/v1/batches", verify=ssl.create_default_context(cafile=str(certs.ca)), timeout=10).status_code
        == 401
    )
    with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=5) as answer:
        text = answer.read().decode()
    assert 'barge_gateway_requests_total{code="401",route="/v1/batches",tenant=""}' in text
