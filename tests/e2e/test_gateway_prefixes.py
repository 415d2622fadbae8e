"""Policy gateway.prefixes through a real `barge gateway` and operator: acme's files land under the prefix the admin
named for acme (inside acme's storage), a batch made from them runs to completed, and globex keeps the default
place; the same section naming a prefix outside the tenant's storage stops the gateway at start, naming the key."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from tools.localcluster import Cluster

from tests.e2e import test_gateway as gw
from tests.e2e.conftest import Operator
from tests.e2e.test_gateway import Team, client, ended, line, running_gateway, upload

emu, teams = gw.emu, gw.teams  # the module fixtures of test_gateway.py, by name (two namespaces, their pools)

pytestmark = pytest.mark.cluster


def _policy(operator: Operator, name: str, prefixes: dict[str, str]) -> Path:
    document = yaml.safe_load((operator.workdir / "policy.yaml").read_text())
    document["gateway"] = {"prefixes": prefixes}
    path = operator.workdir / name
    path.write_text(yaml.safe_dump(document))
    return path


@pytest.fixture(scope="module")
def prefixed(cluster: Cluster, operator: Operator, teams: dict[str, Team]) -> Iterator[str]:
    # acme's storage (tests/e2e/conftest.py admin_policy) is file://<workdir>/{tenant}/: a folder under it
    path = _policy(operator, "policy-prefixes.yaml", {"acme": f"file://{operator.workdir}/{{tenant}}/llm-uploads/"})
    with running_gateway(cluster, operator, BARGE_POLICY_FILE=str(path)) as (url, _):
        yield url


def test_a_tenants_files_and_batches_live_under_its_gateway_prefix(
    prefixed: str, teams: dict[str, Team], operator: Operator, tmp_path: Path
) -> None:
    acme = client(prefixed, teams["acme"].token)
    made = upload(acme, tmp_path, [line("p1", "where am I stored?"), line("p2", "and me?")])
    folder = operator.workdir / "acme" / "llm-uploads" / teams["acme"].namespace
    assert (folder / "files" / f"{made.id}.jsonl").is_file()
    assert not (operator.workdir / "acme" / "gateway" / teams["acme"].namespace / "files" / f"{made.id}.jsonl").exists()
    batch = acme.batches.create(input_file_id=made.id, endpoint="/v1/chat/completions", completion_window="24h")
    done = ended(acme, batch.id)
    assert done.status == "completed", done
    assert done.output_file_id is not None
    answered = [
        json.loads(x)["custom_id"] for x in acme.files.content(done.output_file_id).read().decode().splitlines() if x
    ]
    assert sorted(answered) == ["p1", "p2"]
    assert (folder / "batches" / batch.id).is_dir()  # the job's output folder is under the prefix too


def test_a_tenant_without_an_entry_keeps_the_default_place(
    prefixed: str, teams: dict[str, Team], operator: Operator, tmp_path: Path
) -> None:
    made = upload(client(prefixed, teams["globex"].token), tmp_path, [line("d1", "default place")])
    default = operator.workdir / "globex" / "gateway" / teams["globex"].namespace / "files" / f"{made.id}.jsonl"
    assert default.is_file()


def test_a_prefix_outside_the_tenants_storage_stops_the_gateway_naming_the_key(
    cluster: Cluster, operator: Operator
) -> None:
    path = _policy(operator, "policy-bad-prefix.yaml", {"acme": f"file://{operator.workdir}/globex/stolen/"})
    env = {**os.environ, "KUBECONFIG": str(cluster.kubeconfig), "BARGE_POLICY_FILE": str(path)}
    out = subprocess.run(
        [sys.executable, "-m", "barge.cli", "gateway", "--port", "1"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 2
    assert out.stderr.startswith("barge gateway: policy gateway.prefixes.acme: ")  # one line, not a traceback
    assert "is not under one of tenant acme's storage prefixes" in out.stderr
