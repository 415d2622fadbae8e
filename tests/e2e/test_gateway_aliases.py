"""`barge gateway` with the admin's model aliases (policy `gateway.aliases`): the same two teams, pools and real
tokens as tests/e2e/test_gateway.py, a gateway whose policy adds the alias table. A team's own pool named like the
model wins; an alias resolves only in the caller's namespace; a tenant-limited alias is 400 for the others."""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import anthropic
import openai
import pytest
import yaml
from tools.localcluster import Cluster

from tests.e2e import test_gateway as gw
from tests.e2e.conftest import Operator, free_port
from tests.e2e.test_gateway import CLAUDE, POOL, Team, client, ended, line, running_gateway, upload

emu, teams = gw.emu, gw.teams  # the module fixtures of test_gateway.py, by name (two namespaces, their pools)

pytestmark = pytest.mark.cluster
ACME_ONLY = "acme-only"  # a pool that exists in acme's namespace only


@pytest.fixture(scope="module")
def aliased(cluster: Cluster, operator: Operator, teams: dict[str, Team]) -> Iterator[str]:
    shown = cluster.run_kubectl("-n", teams["acme"].namespace, "get", "inferencepool", POOL, "-o", "json")
    pool = json.loads(shown.stdout)
    extra = {
        "apiVersion": "barge.dev/v1alpha1",
        "kind": "InferencePool",
        "metadata": {"name": ACME_ONLY, "namespace": teams["acme"].namespace},
        "spec": pool["spec"],
    }
    cluster.run_kubectl("apply", "-f", "-", input=yaml.safe_dump(extra))
    document = yaml.safe_load((operator.workdir / "policy.yaml").read_text())
    document["gateway"] = {
        "aliases": {
            "gpt-4o": POOL,  # every tenant
            CLAUDE: POOL,  # shadowed: both namespaces have a pool named claude-fast
            "anthropic/claude": {"pool": CLAUDE, "tenants": ["acme"]},
            "shared-model": ACME_ONLY,  # resolves in the caller's namespace only
        }
    }
    path = operator.workdir / "policy-aliases.yaml"
    path.write_text(yaml.safe_dump(document))
    with running_gateway(cluster, operator, BARGE_POLICY_FILE=str(path)) as (url, _):
        yield url


def _pool_of(cluster: Cluster, namespace: str, batch_id: str) -> str:
    name = "gw-" + batch_id.split("_", 1)[1]  # batch_<hex> and msgbatch_<hex> alike
    job = json.loads(cluster.run_kubectl("-n", namespace, "get", "lbj", name, "-o", "json").stdout)
    return str(job["spec"]["provider"]["poolRef"]["name"])


def _create(oai: openai.OpenAI, tmp_path: Path, model: str) -> openai.types.Batch:
    file = upload(oai, tmp_path, [line(f"r{n}", f"question {n}", model=model) for n in range(3)])
    return oai.batches.create(input_file_id=file.id, endpoint="/v1/chat/completions", completion_window="24h")


def test_an_admin_alias_runs_on_the_pool_it_names_and_the_batch_keeps_the_alias(
    aliased: str, teams: dict[str, Team], cluster: Cluster, tmp_path: Path
) -> None:
    oai = client(aliased, teams["globex"].token)
    batch = _create(oai, tmp_path, "gpt-4o")
    assert batch.model == "gpt-4o"
    assert _pool_of(cluster, teams["globex"].namespace, batch.id) == POOL
    done = ended(oai, batch.id)
    assert done.status == "completed", done
    assert done.request_counts is not None
    assert done.request_counts.completed == 3
    assert done.output_file_id is not None
    outputs = [json.loads(x) for x in oai.files.content(done.output_file_id).read().decode().splitlines()]
    assert sorted(o["custom_id"] for o in outputs) == ["r0", "r1", "r2"]


def test_a_teams_own_pool_named_like_the_model_wins_over_the_alias(
    aliased: str, teams: dict[str, Team], cluster: Cluster, tmp_path: Path
) -> None:
    batch = _create(client(aliased, teams["acme"].token), tmp_path, CLAUDE)
    assert _pool_of(cluster, teams["acme"].namespace, batch.id) == CLAUDE


def test_a_tenant_limited_alias_is_400_for_another_tenant(
    aliased: str, teams: dict[str, Team], cluster: Cluster, tmp_path: Path
) -> None:
    batch = _create(client(aliased, teams["acme"].token), tmp_path, "anthropic/claude")
    assert _pool_of(cluster, teams["acme"].namespace, batch.id) == CLAUDE
    with pytest.raises(openai.BadRequestError, match="anthropic/claude") as refused:
        _create(client(aliased, teams["globex"].token), tmp_path, "anthropic/claude")
    assert "looked up: none" in str(refused.value)


def test_an_alias_never_resolves_to_another_namespaces_pool(
    aliased: str, teams: dict[str, Team], cluster: Cluster, tmp_path: Path
) -> None:
    mine = _create(client(aliased, teams["acme"].token), tmp_path, "shared-model")
    assert _pool_of(cluster, teams["acme"].namespace, mine.id) == ACME_ONLY
    with pytest.raises(openai.BadRequestError, match=f"looked up: 'shared-model' or '{ACME_ONLY}'") as refused:
        _create(client(aliased, teams["globex"].token), tmp_path, "shared-model")
    assert teams["globex"].namespace in str(refused.value)


def test_the_anthropic_face_resolves_the_same_alias(aliased: str, teams: dict[str, Team], cluster: Cluster) -> None:
    claude = anthropic.Anthropic(api_key=teams["globex"].token, base_url=aliased, max_retries=0)
    request = {"model": "gpt-4o", "max_tokens": 64, "messages": [{"role": "user", "content": "hello"}]}
    made = claude.messages.batches.create(requests=[{"custom_id": "a1", "params": request}])  # type: ignore[list-item]
    assert _pool_of(cluster, teams["globex"].namespace, made.id) == POOL
    with pytest.raises(anthropic.BadRequestError, match="anthropic/claude"):
        claude.messages.batches.create(
            requests=[{"custom_id": "a1", "params": {**request, "model": "anthropic/claude"}}]  # type: ignore[list-item]
        )


def test_the_metrics_port_counts_requests_by_tenant_route_and_code_and_upload_bytes(
    cluster: Cluster, operator: Operator, teams: dict[str, Team], tmp_path: Path
) -> None:
    port = free_port()
    with running_gateway(cluster, operator, BARGE_GATEWAY_METRICS_PORT=str(port)) as (url, _):
        made = upload(client(url, teams["acme"].token), tmp_path, [line("m1", "hello")])
        with pytest.raises(openai.AuthenticationError):
            client(url, "not-a-token").batches.list()
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as answer:
            text = answer.read().decode()
        with pytest.raises(urllib.error.HTTPError):  # the callers' port serves no metrics
            urllib.request.urlopen(f"{url}/metrics", timeout=5)  # noqa: S310
    assert 'barge_gateway_requests_total{code="200",route="/v1/files",tenant="acme"} 1.0' in text
    assert 'barge_gateway_requests_total{code="401",route="/v1/batches",tenant=""} 1.0' in text
    assert f'barge_gateway_upload_bytes_total{{tenant="acme"}} {float(made.bytes)}' in text
