"""`barge gateway` with the real `openai` SDK: two namespaces as two teams, real ServiceAccount tokens checked by the
real API server (TokenReview, SubjectAccessReview through RBAC), the e2e operator running each batch as an
LLMBatchJob on an InferencePool that points at `barge emulator`."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anthropic
import openai
import pytest
import yaml
from tools.localcluster import Cluster

from barge.emulator.profile import parse_profile
from barge.emulator.server import EmulatorThread
from tests.e2e.conftest import Operator, credential_secret, free_port, wait_for

pytestmark = pytest.mark.cluster
POOL = "gpt-fast"
CLAUDE = "claude-fast"


@dataclass(frozen=True)
class Team:
    namespace: str
    token: str
    reader: str


def _role(namespace: str, name: str, verbs: list[str]) -> list[dict[str, Any]]:
    rule = {"apiGroups": ["barge.dev"], "resources": ["llmbatchjobs"], "verbs": verbs}
    return [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": name, "namespace": namespace}},
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "Role",
            "metadata": {"name": f"batches-{name}", "namespace": namespace},
            "rules": [rule],
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": {"name": f"batches-{name}", "namespace": namespace},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": f"batches-{name}"},
            "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": namespace}],
        },
    ]


def _token(cluster: Cluster, namespace: str, name: str, audience: str = "barge") -> str:
    out = cluster.run_kubectl("-n", namespace, "create", "token", name, f"--audience={audience}", "--duration=1h")
    return out.stdout.strip()


@pytest.fixture(scope="module")
def emu() -> Iterator[EmulatorThread]:
    emulator = EmulatorThread(parse_profile({"batch": {"processingSeconds": 1}, "sync": {"latencyMs": 1}})).start()
    yield emulator
    emulator.stop()


@pytest.fixture(scope="module")
def teams(cluster: Cluster, operator: Operator, emu: EmulatorThread) -> dict[str, Team]:
    out = {}
    for tenant in ("acme", "globex"):
        ns = f"gw-{tenant}-{os.urandom(3).hex()}"
        cluster.run_kubectl("create", "namespace", ns)
        cluster.run_kubectl("label", "namespace", ns, f"barge.dev/tenant={tenant}")
        (operator.workdir / tenant).mkdir(exist_ok=True)
        credential_secret(cluster, ns, "openai", {"api-key": "sk-gateway-e2e"})
        pool = {
            "apiVersion": "barge.dev/v1alpha1",
            "kind": "InferencePool",
            "metadata": {"name": POOL, "namespace": ns},
            "spec": {
                "model": "gpt-4o-mini",
                "provider": {
                    "type": "openai",
                    "model": "gpt-4o-mini",
                    "secretRef": {"name": "openai", "key": "api-key"},
                    "baseURL": f"{emu.url}/v1",
                },
            },
        }
        claude = {
            "apiVersion": "barge.dev/v1alpha1",
            "kind": "InferencePool",
            "metadata": {"name": CLAUDE, "namespace": ns},
            "spec": {
                "model": "claude-sonnet-4-6",
                "provider": {
                    "type": "anthropic",
                    "model": "claude-sonnet-4-6",
                    "secretRef": {"name": "openai", "key": "api-key"},
                    "baseURL": emu.url,
                },
            },
        }
        docs = [
            pool,
            claude,
            *_role(ns, "app", ["create", "get", "list", "delete", "patch"]),
            *_role(ns, "reader", ["get", "list"]),
        ]
        cluster.run_kubectl("apply", "-f", "-", input=yaml.safe_dump_all(docs))
        out[tenant] = Team(ns, _token(cluster, ns, "app"), _token(cluster, ns, "reader"))
    return out


@contextlib.contextmanager
def running_gateway(cluster: Cluster, operator: Operator, **env: str) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    port = free_port()
    log = operator.workdir / f"gateway-{port}.log"
    policy = str(operator.workdir / "policy.yaml")  # the e2e operator's admin policy: the same prefixes
    environ = {**os.environ, "KUBECONFIG": str(cluster.kubeconfig), "BARGE_POLICY_FILE": policy, **env}
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "barge.cli", "gateway", "--port", str(port), "--max-upload-bytes", "200000"],
            env=environ,
            stdout=out,
            stderr=subprocess.STDOUT,
        )

    def healthy() -> bool:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=1):
                return True
        except OSError:
            return False

    try:
        wait_for(healthy, 30, "gateway /healthz")
        yield f"http://127.0.0.1:{port}", proc
    finally:
        if proc.poll() is None:
            proc.terminate()
            proc.wait(10)
        print(log.read_text(errors="replace")[-4000:])


@pytest.fixture(scope="module")
def gateway(cluster: Cluster, operator: Operator, teams: dict[str, Team]) -> Iterator[str]:
    with running_gateway(cluster, operator) as (url, _):
        yield url


def client(base: str, key: str) -> openai.OpenAI:
    return openai.OpenAI(api_key=key, base_url=f"{base}/v1", max_retries=0, timeout=30)


def line(custom_id: str, text: str, model: str = POOL, **body: Any) -> str:
    request = {"model": model, "messages": [{"role": "user", "content": text}], **body}
    return json.dumps({"custom_id": custom_id, "method": "POST", "url": "/v1/chat/completions", "body": request})


def upload(oai: openai.OpenAI, tmp_path: Path, lines: list[str], name: str = "in.jsonl") -> Any:
    path = tmp_path / name
    path.write_text("".join(x + "\n" for x in lines))
    with path.open("rb") as handle:
        return oai.files.create(file=handle, purpose="batch")


def ended(oai: openai.OpenAI, batch_id: str, timeout: float = 180) -> Any:
    final = ("completed", "failed", "expired", "cancelled")
    return wait_for(lambda: (b := oai.batches.retrieve(batch_id)).status in final and b, timeout, f"{batch_id} ended")


def test_openai_sdk_round_trip_through_the_operator(
    gateway: str, teams: dict[str, Team], cluster: Cluster, tmp_path: Path
) -> None:
    oai = client(gateway, teams["acme"].token)
    good = [line(f"req/{n}", f"question {n}", temperature=0.1) for n in range(12)]
    reserved = line("too-many", "four answers please", n=4)  # passes the file check, refused per line by Barge
    file = upload(oai, tmp_path, [*good, reserved])
    assert file.id.startswith("file-")
    assert file.bytes > 0
    assert oai.files.retrieve(file.id).filename == "in.jsonl"
    assert oai.files.content(file.id).read().decode().splitlines()[0] == good[0]

    batch = oai.batches.create(
        input_file_id=file.id, endpoint="/v1/chat/completions", completion_window="24h", metadata={"run": "e2e"}
    )
    assert batch.status == "validating"
    assert batch.metadata == {"run": "e2e"}
    job = json.loads(
        cluster.run_kubectl("-n", teams["acme"].namespace, "get", "lbj", "-l", "barge.dev/gateway", "-o", "json").stdout
    )
    assert f"gw-{batch.id.removeprefix('batch_')}" in [j["metadata"]["name"] for j in job["items"]]

    done = ended(oai, batch.id)
    assert done.status == "completed", done
    assert done.request_counts is not None
    assert (done.request_counts.total, done.request_counts.completed, done.request_counts.failed) == (13, 12, 1)
    assert done.output_file_id is not None
    assert done.error_file_id is not None

    outputs = [json.loads(x) for x in oai.files.content(done.output_file_id).read().decode().splitlines()]
    assert sorted(o["custom_id"] for o in outputs) == sorted(f"req/{n}" for n in range(12))  # each answered once
    first = outputs[0]
    assert set(first) == {"id", "custom_id", "response", "error"}
    assert first["error"] is None
    assert first["response"]["status_code"] == 200
    assert first["response"]["body"]["object"] == "chat.completion"
    assert first["response"]["body"]["choices"][0]["message"]["content"]

    errors = [json.loads(x) for x in oai.files.content(done.error_file_id).read().decode().splitlines()]
    assert [(e["custom_id"], e["response"], e["error"]["code"]) for e in errors] == [("too-many", None, "reserved_key")]
    assert "line 13" in errors[0]["error"]["message"]
    assert "body.n" in errors[0]["error"]["message"]


def test_a_refused_file_names_its_lines_and_is_not_kept(gateway: str, teams: dict[str, Team], tmp_path: Path) -> None:
    oai = client(gateway, teams["acme"].token)
    before = {f.id for f in oai.files.list()}
    lines = [
        line("a", "fine"),
        line("b", "fine"),
        line("a", "the same custom_id again"),
        "{not json",
        json.dumps({"custom_id": "c", "method": "POST", "url": "/v1/chat/completions", "body": {"model": "other"}}),
    ]
    with pytest.raises(openai.BadRequestError) as caught:
        upload(oai, tmp_path, lines)
    message = str(caught.value)
    assert "line 3: custom_id 'a' is used by an earlier line" in message
    assert "line 4: not JSON" in message
    assert "line 5: body.model 'other' differs" in message
    assert "line 1:" not in message
    assert "line 2:" not in message
    assert {f.id for f in oai.files.list()} == before


def test_an_upload_over_the_limit_is_413(gateway: str, teams: dict[str, Team], tmp_path: Path) -> None:
    oai = client(gateway, teams["acme"].token)
    with pytest.raises(openai.APIStatusError) as caught:
        upload(oai, tmp_path, [line(f"x{n}", "y" * 1000) for n in range(300)])  # ~330 KB over the 200 KB limit
    assert caught.value.status_code == 413


def test_unknown_token_and_token_for_another_audience_are_401(
    gateway: str, teams: dict[str, Team], cluster: Cluster
) -> None:
    for key in (
        "not-a-token",
        _token(cluster, teams["acme"].namespace, "app", "https://kubernetes.default.svc.cluster.local"),
    ):
        with pytest.raises(openai.AuthenticationError):
            client(gateway, key).batches.list()


def test_a_verb_rbac_does_not_grant_is_403(gateway: str, teams: dict[str, Team], tmp_path: Path) -> None:
    reader = client(gateway, teams["acme"].reader)
    assert reader.batches.list().data is not None  # list is granted
    with pytest.raises(openai.PermissionDeniedError):
        upload(reader, tmp_path, [line("a", "hello")])


def test_another_namespaces_ids_are_404(gateway: str, teams: dict[str, Team], tmp_path: Path) -> None:
    acme, globex = client(gateway, teams["acme"].token), client(gateway, teams["globex"].token)
    file = upload(acme, tmp_path, [line("a", "acme's secret question")])
    batch = acme.batches.create(input_file_id=file.id, endpoint="/v1/chat/completions", completion_window="24h")
    for call in (
        lambda: globex.files.retrieve(file.id),
        lambda: globex.files.content(file.id),
        lambda: globex.files.delete(file.id),
        lambda: globex.batches.retrieve(batch.id),
        lambda: globex.batches.cancel(batch.id),
        lambda: globex.batches.create(input_file_id=file.id, endpoint="/v1/chat/completions", completion_window="24h"),
    ):
        with pytest.raises(openai.NotFoundError):
            call()
    assert batch.id not in [b.id for b in globex.batches.list()]
    assert file.id not in [f.id for f in globex.files.list()]
    assert acme.files.retrieve(file.id).id == file.id  # still there for its owner


def test_list_pagination_idempotency_cancel_and_file_delete(
    gateway: str, teams: dict[str, Team], tmp_path: Path
) -> None:
    oai = client(gateway, teams["globex"].token)
    file = upload(oai, tmp_path, [line(f"q{n}", f"q {n}") for n in range(3)])
    args = {"input_file_id": file.id, "endpoint": "/v1/chat/completions", "completion_window": "24h"}
    key = os.urandom(8).hex()
    first = oai.batches.create(**args, extra_headers={"Idempotency-Key": key})
    again = oai.batches.create(**args, extra_headers={"Idempotency-Key": key})
    assert again.id == first.id
    other = oai.batches.create(**args)
    assert other.id != first.id  # no key: a second batch, as the providers do

    page = oai.batches.list(limit=1)
    assert len(page.data) == 1
    assert page.has_more
    second = oai.batches.list(limit=1, after=page.data[0].id)
    assert len(second.data) == 1
    assert second.data[0].id != page.data[0].id
    assert {b.id for b in oai.batches.list(limit=100)} >= {first.id, other.id}

    cancelled = oai.batches.cancel(other.id)
    assert cancelled.status in ("cancelling", "cancelled")
    assert ended(oai, other.id).status == "cancelled"

    assert oai.files.delete(file.id).deleted
    with pytest.raises(openai.NotFoundError):
        oai.files.retrieve(file.id)


def test_the_same_file_format_routed_by_alias_to_an_anthropic_pool(
    gateway: str, teams: dict[str, Team], tmp_path: Path
) -> None:
    oai = client(gateway, teams["acme"].token)
    system = {"role": "system", "content": "answer briefly"}
    lines = [
        json.dumps(
            {
                "custom_id": f"c{n}",
                "method": "POST",
                "url": "/v1/chat/completions",
                "body": {"model": CLAUDE, "messages": [system, {"role": "user", "content": f"q {n}"}], "stop": "END"},
            }
        )
        for n in range(4)
    ]
    seeded = line("seeded", "a seed", model=CLAUDE, seed=7)  # no Anthropic equal: an error line naming the key
    file = upload(oai, tmp_path, [*lines, seeded])
    batch = oai.batches.create(input_file_id=file.id, endpoint="/v1/chat/completions", completion_window="24h")
    done = ended(oai, batch.id)
    assert done.status == "completed", done
    assert done.output_file_id is not None
    assert done.error_file_id is not None
    outputs = [json.loads(x) for x in oai.files.content(done.output_file_id).read().decode().splitlines()]
    assert sorted(o["custom_id"] for o in outputs) == ["c0", "c1", "c2", "c3"]
    errors = [json.loads(x) for x in oai.files.content(done.error_file_id).read().decode().splitlines()]
    assert [(e["custom_id"], e["error"]["code"]) for e in errors] == [("seeded", "unconvertible")]
    assert "seed" in errors[0]["error"]["message"]


def test_anthropic_sdk_round_trip(gateway: str, teams: dict[str, Team]) -> None:
    ant = anthropic.Anthropic(api_key=teams["globex"].token, base_url=gateway, max_retries=0, timeout=30)
    requests = [
        {
            "custom_id": f"m{n}",
            "params": {
                "model": POOL,  # an alias: here an OpenAI pool, converted from Anthropic's params
                "max_tokens": 64,
                "system": "be brief",
                "messages": [{"role": "user", "content": [{"type": "text", "text": f"question {n}"}]}],
                "stop_sequences": ["END"],
            },
        }
        for n in range(5)
    ]
    batch = ant.messages.batches.create(requests=requests)  # type: ignore[arg-type]
    assert batch.id.startswith("msgbatch_")
    assert batch.processing_status == "in_progress"
    assert batch.id in [b.id for b in ant.messages.batches.list()]
    done = wait_for(
        lambda: (b := ant.messages.batches.retrieve(batch.id)).processing_status == "ended" and b, 180, "ended"
    )
    assert done.request_counts.succeeded == 5
    assert done.request_counts.errored == 0
    results = list(ant.messages.batches.results(batch.id))
    assert sorted(r.custom_id for r in results) == [f"m{n}" for n in range(5)]
    for r in results:
        assert r.result.type == "succeeded"
        assert r.result.message.content[0].type == "text"
    other = anthropic.Anthropic(api_key=teams["acme"].token, base_url=gateway, max_retries=0)
    with pytest.raises(anthropic.NotFoundError):
        other.messages.batches.retrieve(batch.id)
    assert ant.messages.batches.delete(batch.id).type == "message_batch_deleted"
    with pytest.raises(anthropic.NotFoundError):
        ant.messages.batches.retrieve(batch.id)


def test_anthropic_requests_that_cannot_convert_refuse_the_batch_naming_them(
    gateway: str, teams: dict[str, Team]
) -> None:
    ant = anthropic.Anthropic(api_key=teams["globex"].token, base_url=gateway, max_retries=0)
    ok = {"model": POOL, "max_tokens": 10, "messages": [{"role": "user", "content": "hi"}]}
    requests = [
        {"custom_id": "a", "params": ok},
        {"custom_id": "b", "params": {**ok, "top_k": 5}},
        {"custom_id": "a", "params": ok},
        {"custom_id": "c", "params": {**ok, "model": CLAUDE}},
    ]
    with pytest.raises(anthropic.BadRequestError) as caught:
        ant.messages.batches.create(requests=requests)  # type: ignore[arg-type]
    message = str(caught.value)
    assert "requests[1]: params keys ['top_k'] have no OpenAI equal" in message
    assert "requests[2]: custom_id 'a' is used by an earlier request" in message
    assert "requests[3]: params.model 'claude-fast' differs" in message
    assert "requests[0]" not in message
    with pytest.raises(anthropic.AuthenticationError):
        anthropic.Anthropic(api_key="nope", base_url=gateway, max_retries=0).messages.batches.list()


def test_a_model_alias_that_names_no_pool_is_refused_at_create(
    gateway: str, teams: dict[str, Team], tmp_path: Path
) -> None:
    oai = client(gateway, teams["acme"].token)
    file = upload(oai, tmp_path, [line("a", "hello", model="no-such-pool")])
    with pytest.raises(openai.BadRequestError, match="no-such-pool"):
        oai.batches.create(input_file_id=file.id, endpoint="/v1/chat/completions", completion_window="24h")


def test_a_gateway_killed_after_create_leaves_one_job_that_the_retry_finds(
    gateway: str, teams: dict[str, Team], cluster: Cluster, operator: Operator, tmp_path: Path
) -> None:
    team = teams["globex"]
    oai = client(gateway, team.token)
    file = upload(oai, tmp_path, [line(f"k{n}", f"q {n}") for n in range(3)])
    args: Any = {"input_file_id": file.id, "endpoint": "/v1/chat/completions", "completion_window": "24h"}
    key = {"Idempotency-Key": os.urandom(8).hex()}
    with running_gateway(cluster, operator, BARGE_FAILPOINT="gateway-after-create") as (doomed, proc):
        with pytest.raises(openai.APIConnectionError):
            client(doomed, team.token).batches.create(**args, extra_headers=key)
        assert proc.wait(10) == -9  # SIGKILLed after the job was created, before it answered
    labelled = "barge.dev/gateway=openai"
    before = kubectl_names(cluster, team.namespace, labelled)
    retry = oai.batches.create(**args, extra_headers=key)  # the application's retry, on a healthy gateway
    assert f"gw-{retry.id.removeprefix('batch_')}" in before  # the job the killed gateway made
    assert kubectl_names(cluster, team.namespace, labelled) == before  # and no second one
    assert ended(oai, retry.id).status == "completed"


def test_an_anthropic_create_under_an_idempotency_key_is_made_once_even_if_the_gateway_dies(
    gateway: str, teams: dict[str, Team], cluster: Cluster, operator: Operator
) -> None:
    """The Anthropic door honours Idempotency-Key as the OpenAI one does: a gateway SIGKILLed after it made the job
    leaves one job, which the application's retry under the same key finds; the same key again (input not
    rewritten) answers the same batch, in another team's namespace it names another, and a new key makes a new one."""
    team = teams["globex"]
    requests: Any = [
        {"custom_id": f"i{n}", "params": {"model": POOL, "max_tokens": 16,
                                          "messages": [{"role": "user", "content": f"q {n}"}]}}
        for n in range(3)
    ]  # fmt: skip
    key = {"Idempotency-Key": os.urandom(8).hex()}
    labelled = "barge.dev/gateway=anthropic"
    before = kubectl_names(cluster, team.namespace, labelled)
    with running_gateway(cluster, operator, BARGE_FAILPOINT="gateway-after-create") as (doomed, proc):
        doomed_client = anthropic.Anthropic(api_key=team.token, base_url=doomed, max_retries=0, timeout=30)
        with pytest.raises(anthropic.APIConnectionError):
            doomed_client.messages.batches.create(requests=requests, extra_headers=key)
        assert proc.wait(10) == -9  # SIGKILLed after the job was created, before it answered
    made = kubectl_names(cluster, team.namespace, labelled) - before
    assert len(made) == 1, made
    ant = anthropic.Anthropic(api_key=team.token, base_url=gateway, max_retries=0, timeout=30)
    retry = ant.messages.batches.create(requests=requests, extra_headers=key)
    assert made == {f"gw-{retry.id.removeprefix('msgbatch_')}"}  # the job the killed gateway made
    assert ant.messages.batches.create(requests=requests, extra_headers=key).id == retry.id
    assert kubectl_names(cluster, team.namespace, labelled) - before == made  # and no second one
    elsewhere = anthropic.Anthropic(api_key=teams["acme"].token, base_url=gateway, max_retries=0, timeout=30)
    assert elsewhere.messages.batches.create(requests=requests, extra_headers=key).id != retry.id
    fresh = ant.messages.batches.create(requests=requests, extra_headers={"Idempotency-Key": os.urandom(8).hex()})
    assert fresh.id != retry.id
    done = wait_for(
        lambda: (b := ant.messages.batches.retrieve(retry.id)).processing_status == "ended" and b, 180, "ended"
    )
    assert done.request_counts.succeeded == 3


def test_a_gateway_killed_mid_upload_stores_no_file(
    gateway: str, teams: dict[str, Team], cluster: Cluster, operator: Operator, tmp_path: Path
) -> None:
    team = teams["acme"]
    before = {f.id for f in client(gateway, team.token).files.list()}
    with running_gateway(cluster, operator, BARGE_FAILPOINT="gateway-mid-upload") as (doomed, proc):
        with pytest.raises(openai.APIConnectionError):
            upload(client(doomed, team.token), tmp_path, [line(f"u{n}", "x" * 500) for n in range(300)])
        assert proc.wait(10) == -9
    assert {f.id for f in client(gateway, team.token).files.list()} == before


def kubectl_names(cluster: Cluster, namespace: str, selector: str) -> set[str]:
    out = cluster.run_kubectl("-n", namespace, "get", "lbj", "-l", selector, "-o", "name").stdout
    return {n.rsplit("/", 1)[-1] for n in out.split()}
