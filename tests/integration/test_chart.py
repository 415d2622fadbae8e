"""The Helm chart and the plain manifests, judged by the real helm (built from its Go module) and API server.

`helm lint --strict` for every ci/*-values.yaml scenario, and each scenario's render through a server-side dry
run; `helm template` output checked object by object (security context, ledger modes, HA, namespaced RBAC, CRDs
equal to crds/); values.schema.json refusing bad values; NOTES.txt; an HA install with its peering hook; and
manifests/install/ fresh and applied to an empty control plane. Installing the chart and running the operator as
its ServiceAccount is tests/e2e's job.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from tools import localcluster

from barge.api.crd import all_crds
from barge.api.peering import peering_crds
from barge.batch import prices
from barge.k8s.rbac import build_rules
from barge.policy import parse as parse_policy

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "charts" / "barge"
CI_VALUES = sorted((CHART / "ci").glob("*-values.yaml"))
HELM_TIMEOUT = 120
PG = {"ledger": {"postgresql": {"enabled": True, "existingSecret": "barge-ledger"}}}


@pytest.fixture(scope="module")
def helm() -> Path:
    return localcluster.build(argocd=False)["helm"]  # argocd is not needed to render the chart


@pytest.fixture(scope="module", autouse=True)
def helm_home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """helm's cache, config and data in the test's own directory, never the user's."""
    home = tmp_path_factory.mktemp("helm-home")
    with pytest.MonkeyPatch.context() as patch:
        for kind in ("CACHE", "CONFIG", "DATA"):
            patch.setenv(f"HELM_{kind}_HOME", str(home / kind.lower()))
        yield


def _run(
    helm: Path, *args: str, values: dict[str, Any] | None = None, tmp: Path | None = None
) -> subprocess.CompletedProcess[str]:
    extra: list[str] = []
    if values is not None:
        assert tmp is not None
        path = tmp / f"values-{len(list(tmp.iterdir()))}.yaml"
        path.write_text(yaml.safe_dump(values))
        extra = ["--values", str(path)]
    return subprocess.run([str(helm), *args, *extra], capture_output=True, text=True, timeout=HELM_TIMEOUT, check=False)


def render(helm: Path, tmp: Path, values: dict[str, Any] | None = None, *args: str) -> list[dict[str, Any]]:
    """The chart as Argo CD renders it (with the chart's crds/ directory: Kopf's peering CRDs)."""
    out = _run(
        helm,
        "template",
        "barge",
        str(CHART),
        "--namespace",
        "barge-system",
        "--include-crds",
        *args,
        values=values,
        tmp=tmp,
    )
    assert out.returncode == 0, out.stderr
    return [d for d in yaml.safe_load_all(out.stdout) if d]


def refused(helm: Path, tmp: Path, values: dict[str, Any]) -> str:
    out = _run(helm, "template", "barge", str(CHART), values=values, tmp=tmp)
    assert out.returncode != 0, f"accepted: {values}"
    return out.stderr


def one(docs: list[dict[str, Any]], kind: str, name: str | None = None) -> dict[str, Any]:
    found = [d for d in docs if d["kind"] == kind and (name is None or d["metadata"]["name"] == name)]
    assert len(found) == 1, f"{kind} {name}: {len(found)} found"
    return found[0]


def kinds(docs: list[dict[str, Any]]) -> list[str]:
    return sorted(d["kind"] for d in docs)


def container(docs: list[dict[str, Any]]) -> dict[str, Any]:
    return one(docs, "Deployment")["spec"]["template"]["spec"]["containers"][0]  # type: ignore[no-any-return]


def env(docs: list[dict[str, Any]]) -> dict[str, Any]:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container(docs)["env"]}


@pytest.fixture
def tmp(tmp_path: Path) -> Path:
    return tmp_path


# --- lint ----------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("values", CI_VALUES, ids=lambda p: p.name)
def test_helm_lint_strict(helm: Path, values: Path) -> None:
    out = _run(helm, "lint", "--strict", str(CHART), "--values", str(values))
    assert out.returncode == 0, out.stdout + out.stderr


def test_every_ci_scenario_exists() -> None:
    names = {p.name for p in CI_VALUES}
    assert names >= {f"{n}-values.yaml" for n in ("default", "postgresql", "namespaced", "ha", "monitoring", "sharded")}


# --- defaults ------------------------------------------------------------------------------------------------
def test_defaults_render_the_operator_with_a_sqlite_ledger_on_a_kept_pvc(helm: Path, tmp: Path) -> None:
    docs = render(helm, tmp)
    assert kinds(docs) == sorted(
        [
            "ClusterRole",
            "ClusterRoleBinding",
            *["CustomResourceDefinition"] * len(all_crds()),  # Barge's own, as templates
            *["CustomResourceDefinition"] * len(peering_crds()),  # Kopf's, from the chart's crds/
            "Deployment",
            "PersistentVolumeClaim",
            "Service",
            "ServiceAccount",
        ]
    )
    deploy = one(docs, "Deployment")
    spec = deploy["spec"]
    assert spec["replicas"] == 1
    assert spec["strategy"] == {"type": "Recreate"}
    pod = spec["template"]["spec"]
    assert pod["serviceAccountName"] == "barge"
    c = container(docs)
    assert c["image"] == "ghcr.io/barge-dev/barge:0.1.0"
    assert c["args"] == ["operator", "--all-namespaces", "--metrics-port=8080"]
    assert env(docs) == {
        "BARGE_LEDGER_URL": "/var/lib/barge/ledger.db",
        "BARGE_POLL_SECONDS": "30",
        "BARGE_ADMISSION_GATHER_SECONDS": "5",  # the operator's own defaults (config.OperatorConfig)
        "BARGE_ADMISSION_BACKOFF_SECONDS": "60",
        "BARGE_DELETE_PROVIDER_COPIES": "true",
        "BARGE_OUTPUT_EXPIRES_AFTER_DAYS": "14",
        "BARGE_SHARED_FILE_ROOTS": "false",  # a file root must name {tenant} or {namespace} (M4)
        "BARGE_REQUIRE_TENANT_LABEL": "true",  # new installs: no tenant by namespace name (M3)
        "BARGE_PROMETHEUS_URL": "http://prometheus-operated.monitoring.svc:9090",
        "BARGE_POOL_ENDPOINT_TEMPLATE": "http://{name}.{namespace}.svc:8000/v1",
        "BARGE_WORKER_IMAGE": "ghcr.io/barge-dev/barge:0.1.0",
        # each engine pool's NetworkPolicy admits this release's operator pods (M9; test_chart_pool_network.py)
        "BARGE_POOL_NETWORK_POLICY": '{"enabled":true,"gateways":[],"monitoringNamespaces":["monitoring"],'
        '"operator":{"namespace":"barge-system","podLabels":{"app.kubernetes.io/instance":"barge",'
        '"app.kubernetes.io/name":"barge"}}}',
    }
    pvc = one(docs, "PersistentVolumeClaim")
    assert pvc["metadata"]["annotations"] == {"helm.sh/resource-policy": "keep"}
    assert pvc["spec"]["resources"]["requests"]["storage"] == "1Gi"
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes["ledger"]["persistentVolumeClaim"]["claimName"] == pvc["metadata"]["name"]
    mounts = {m["name"]: m["mountPath"] for m in c["volumeMounts"]}
    assert mounts == {"tmp": "/tmp", "ledger": "/var/lib/barge"}


def test_restricted_pod_security_and_health_probes(helm: Path, tmp: Path) -> None:
    docs = render(helm, tmp)
    pod = one(docs, "Deployment")["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    c = container(docs)
    sc = c["securityContext"]
    assert sc["allowPrivilegeEscalation"] is False
    assert sc["readOnlyRootFilesystem"] is True
    assert sc["capabilities"] == {"drop": ["ALL"]}
    assert {v["name"]: v for v in pod["volumes"]}["tmp"]["emptyDir"]
    for probe in ("livenessProbe", "readinessProbe"):
        assert c[probe]["httpGet"] == {"path": "/healthz", "port": "metrics"}
    assert c["ports"] == [{"name": "metrics", "containerPort": 8080, "protocol": "TCP"}]
    service = one(docs, "Service")
    assert service["spec"]["ports"][0]["targetPort"] == "metrics"
    assert service["spec"]["selector"] == one(docs, "Deployment")["spec"]["selector"]["matchLabels"]


def barge_crds(docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [d for d in docs if d["kind"] == "CustomResourceDefinition" and d["spec"]["group"] == "barge.dev"]


def test_chart_crds_are_the_generated_crds_and_kept(helm: Path, tmp: Path) -> None:
    everything = render(helm, tmp)
    docs = barge_crds(everything)
    assert {d["metadata"]["name"]: d["spec"] for d in docs} == {
        c["metadata"]["name"]: c["spec"] for c in all_crds().values()
    }
    kopf = {d["metadata"]["name"]: d for d in everything if d["kind"] == "CustomResourceDefinition" and d not in docs}
    assert kopf == {c["metadata"]["name"]: c for c in peering_crds().values()}
    for d in docs:
        assert d["metadata"]["annotations"] == {"helm.sh/resource-policy": "keep"}
        assert d["metadata"]["labels"]["app.kubernetes.io/part-of"] == "barge"
    # The Jinja example in a description survives Helm's own templating.
    assert "{{ text }}" in json.dumps(docs)


def test_crds_can_be_left_out_or_left_unkept(helm: Path, tmp: Path) -> None:
    assert barge_crds(render(helm, tmp, {"crds": {"install": False}})) == []
    unkept = barge_crds(render(helm, tmp, {"crds": {"keep": False}}))
    assert len(unkept) == len(all_crds())
    assert all("annotations" not in d["metadata"] for d in unkept)


def test_cluster_role_is_the_rbac_table(helm: Path, tmp: Path) -> None:
    docs = render(helm, tmp)
    role = one(docs, "ClusterRole")
    assert role["rules"] == build_rules("cluster") + build_rules("watched")
    binding = one(docs, "ClusterRoleBinding")
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "barge", "namespace": "barge-system"}]
    text = json.dumps(role)
    assert "*" not in text
    for rule in role["rules"]:
        if "secrets" in rule["resources"]:
            # get by name, and create for an engine pool's own API key Secret (M9); never list, update or delete
            assert rule["verbs"] == ["get", "create"]


# --- the PostgreSQL ledger, HA ---------------------------------------------------------------------------------
def test_postgresql_ledger_url_comes_from_the_secret_and_no_pvc(helm: Path, tmp: Path) -> None:
    docs = render(helm, tmp, {"ledger": {"postgresql": {"enabled": True, "existingSecret": "pg", "secretKey": "dsn"}}})
    assert env(docs)["BARGE_LEDGER_URL"] == {"secretKeyRef": {"name": "pg", "key": "dsn"}}
    assert "PersistentVolumeClaim" not in kinds(docs)
    assert "strategy" not in one(docs, "Deployment")["spec"]
    assert [m["name"] for m in container(docs)["volumeMounts"]] == ["tmp"]


def test_ha_turns_on_peering_with_its_crds_rbac_object_and_a_pdb(helm: Path, tmp: Path) -> None:
    docs = render(helm, tmp, {"replicas": 2, **PG})
    deploy = one(docs, "Deployment")
    assert deploy["spec"]["replicas"] == 2
    assert "--peering=barge" in container(docs)["args"]
    assert env(docs)["BARGE_PEERING_PRIORITY"] == "auto"
    assert env(docs)["POD_NAME"] == {"fieldRef": {"fieldPath": "metadata.name"}}  # what `auto` hashes
    peering = one(docs, "ClusterKopfPeering")
    assert peering["metadata"]["name"] == "barge"
    # An ordinary object of the release, never a hook: a hook is deleted and recreated empty on every upgrade.
    assert "annotations" not in peering["metadata"]
    role = one(docs, "ClusterRole")
    assert build_rules("peering-cluster")[0] in role["rules"]
    assert build_rules("peering-watched")[0] not in role["rules"]
    pdb = one(docs, "PodDisruptionBudget")
    assert pdb["spec"] == {"minAvailable": 1, "selector": deploy["spec"]["selector"]}


def test_shards_get_a_deployment_pdb_and_peering_each_with_disjoint_selectors(helm: Path, tmp: Path) -> None:
    docs = render(helm, tmp, {"sharding": {"shards": 3}, "replicas": 2, "hostNetwork": True, **PG})
    deployments = sorted((d for d in docs if d["kind"] == "Deployment"), key=lambda d: d["metadata"]["name"])
    assert [d["metadata"]["name"] for d in deployments] == ["barge-shard-0", "barge-shard-1", "barge-shard-2"]
    selectors = []
    for i, deploy in enumerate(deployments):
        spec = deploy["spec"]
        assert spec["replicas"] == 2
        selector = spec["selector"]["matchLabels"]
        assert selector["barge.dev/shard"] == str(i)
        assert spec["template"]["metadata"]["labels"].items() >= selector.items()
        selectors.append(selector)
        (box,) = spec["template"]["spec"]["containers"]
        values = {e["name"]: e.get("value") for e in box["env"]}
        assert values["BARGE_SHARD"] == f"{i}/3"
        assert "--peering=barge" in box["args"]  # the operator derives barge-shard-i itself
        # on the node's network the shards may share a node: each its own port
        assert f"--metrics-port={8080 + i}" in box["args"]
        assert box["ports"][0]["containerPort"] == 8080 + i
    assert len({tuple(sorted(s.items())) for s in selectors}) == 3  # no Deployment adopts another's pods
    pdbs = {
        d["metadata"]["name"]: d["spec"]["selector"]["matchLabels"] for d in docs if d["kind"] == "PodDisruptionBudget"
    }
    assert pdbs == {f"barge-shard-{i}": selectors[i] for i in range(3)}
    peerings = sorted(d["metadata"]["name"] for d in docs if d["kind"] == "ClusterKopfPeering")
    assert peerings == ["barge", "barge-shard-1", "barge-shard-2"]
    # the metrics Service spans every shard's pods (each reports its own jobs; only shard 0 the ledger-wide ones)
    service = one(docs, "Service", "barge-metrics")
    assert all(set(service["spec"]["selector"].items()) <= set(s.items()) for s in selectors)


def test_one_shard_keeps_the_unsharded_names_and_no_shard_setting(helm: Path, tmp: Path) -> None:
    docs = render(helm, tmp, {"sharding": {"shards": 1}, "replicas": 2, **PG})
    deploy = one(docs, "Deployment", "barge")
    assert "barge.dev/shard" not in deploy["spec"]["selector"]["matchLabels"]
    assert "BARGE_SHARD" not in env(docs)
    assert one(docs, "PodDisruptionBudget")["metadata"]["name"] == "barge"
    assert one(docs, "ClusterKopfPeering")["metadata"]["name"] == "barge"


def test_namespaced_shards_get_a_kopf_peering_per_shard_in_each_namespace(helm: Path, tmp: Path) -> None:
    docs = render(
        helm,
        tmp,
        {"watch": {"allNamespaces": False, "namespaces": ["team-a", "team-b"]}, "sharding": {"shards": 2},
         "peering": {"enabled": True}, **PG},
    )  # fmt: skip
    peerings = sorted((d["metadata"]["namespace"], d["metadata"]["name"]) for d in docs if d["kind"] == "KopfPeering")
    assert peerings == [
        ("team-a", "barge"),
        ("team-a", "barge-shard-1"),
        ("team-b", "barge"),
        ("team-b", "barge-shard-1"),
    ]
    assert "PodDisruptionBudget" not in kinds(docs)  # one replica per shard


def test_namespaced_watch_gets_a_role_per_namespace_and_only_the_cluster_minimum(helm: Path, tmp: Path) -> None:
    docs = render(
        helm, tmp, {"watch": {"allNamespaces": False, "namespaces": ["team-a", "team-b"]}, "replicas": 2, **PG}
    )
    assert container(docs)["args"][:3] == ["operator", "--namespace=team-a", "--namespace=team-b"]
    assert one(docs, "ClusterRole")["rules"] == build_rules("cluster") + build_rules("cluster-namespaced")
    roles = {d["metadata"]["namespace"]: d for d in docs if d["kind"] == "Role"}
    assert set(roles) == {"team-a", "team-b"}
    for role in roles.values():
        assert role["rules"] == build_rules("watched") + build_rules("peering-watched")
    bindings = [d for d in docs if d["kind"] == "RoleBinding"]
    assert {b["metadata"]["namespace"] for b in bindings} == {"team-a", "team-b"}
    assert all(b["subjects"][0]["namespace"] == "barge-system" for b in bindings)
    peerings = [d for d in docs if d["kind"] == "KopfPeering"]
    assert {p["metadata"]["namespace"] for p in peerings} == {"team-a", "team-b"}
    assert "ClusterKopfPeering" not in kinds(docs)


def test_rbac_and_service_account_can_be_brought_by_the_user(helm: Path, tmp: Path) -> None:
    docs = render(helm, tmp, {"rbac": {"create": False}, "serviceAccount": {"create": False, "name": "mine"}})
    assert not {"ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding", "ServiceAccount"} & set(kinds(docs))
    assert one(docs, "Deployment")["spec"]["template"]["spec"]["serviceAccountName"] == "mine"


# --- the rest of the values --------------------------------------------------------------------------------------
def test_operator_settings_image_digest_prices_and_pod_placement(helm: Path, tmp: Path) -> None:
    digest = "sha256:" + "ab" * 32
    docs = render(
        helm,
        tmp,
        {
            "image": {"digest": digest},
            "operator": {
                "pollSeconds": 5,
                "allowedFileRoots": ["/data/in/{tenant}", "/data/out/{tenant}"],
                "prices": "version: x\nmodels: {}\n",
                "workerImage": "registry.local/worker:1",
                "retention": {"deleteProviderCopies": False, "outputExpiresAfterDays": 30},
                "admission": {"gatherSeconds": 0, "backoffSeconds": 120},
            },
            "extraEnv": [{"name": "BARGE_MIN_BATCH_WINDOW", "value": "600"}],
            "nodeSelector": {"pool": "ops"},
            "tolerations": [{"key": "ops", "operator": "Exists", "effect": "NoSchedule"}],
            "priorityClassName": "system-cluster-critical",
            "podAnnotations": {"a": "b"},
            "podLabels": {"team": "platform"},
            "resources": {"limits": {"cpu": "1", "memory": "1Gi"}},
        },
    )
    c = container(docs)
    assert c["image"] == f"ghcr.io/barge-dev/barge@{digest}"
    e = env(docs)
    assert e["BARGE_POLL_SECONDS"] == "5"
    assert e["BARGE_ALLOWED_FILE_ROOTS"] == "/data/in/{tenant}:/data/out/{tenant}"
    assert e["BARGE_PRICES"] == "/etc/barge/config/prices.yaml"
    assert "BARGE_POLICY_FILE" not in e
    assert e["BARGE_WORKER_IMAGE"] == "registry.local/worker:1"
    assert e["BARGE_MIN_BATCH_WINDOW"] == "600"
    assert (e["BARGE_DELETE_PROVIDER_COPIES"], e["BARGE_OUTPUT_EXPIRES_AFTER_DAYS"]) == ("false", "30")
    assert (e["BARGE_ADMISSION_GATHER_SECONDS"], e["BARGE_ADMISSION_BACKOFF_SECONDS"]) == ("0", "120")
    config = one(docs, "ConfigMap")
    assert config["data"] == {"prices.yaml": "version: x\nmodels: {}\n"}
    assert {"name": "config", "mountPath": "/etc/barge/config", "readOnly": True} in c["volumeMounts"]
    assert c["resources"]["limits"] == {"cpu": "1", "memory": "1Gi"}
    pod = one(docs, "Deployment")["spec"]["template"]
    assert pod["spec"]["nodeSelector"] == {"pool": "ops"}
    assert pod["spec"]["tolerations"][0]["key"] == "ops"
    assert pod["spec"]["priorityClassName"] == "system-cluster-critical"
    assert pod["metadata"]["annotations"]["a"] == "b"
    assert pod["metadata"]["labels"]["team"] == "platform"


def test_ci_policy_and_prices_reach_the_operator_as_files_it_accepts(helm: Path, tmp: Path) -> None:
    values = yaml.safe_load((CHART / "ci" / "postgresql-values.yaml").read_text())
    docs = render(helm, tmp, values)
    e = env(docs)
    assert e["BARGE_POLICY_FILE"] == "/etc/barge/config/policy.yaml"
    assert e["BARGE_PRICES"] == "/etc/barge/config/prices.yaml"
    data = one(docs, "ConfigMap", "barge-config")["data"]
    policy = parse_policy(yaml.safe_load(data["policy.yaml"]))
    assert policy.storage_prefixes == ("s3://claims-bucket/{namespace}/",)
    table = prices.parse(yaml.safe_load(data["prices.yaml"]))
    assert table.version == "2026-11-01-negotiated"
    annotations = one(docs, "Deployment")["spec"]["template"]["metadata"]["annotations"]
    values["operator"]["policy"] += "    extraFlags: [--enable-lora]\n"
    changed = one(render(helm, tmp, values), "Deployment")["spec"]["template"]["metadata"]["annotations"]
    assert changed["checksum/config"] != annotations["checksum/config"], "a policy change rolls the pods"


def test_network_policy_lets_only_the_listed_namespaces_scrape(helm: Path, tmp: Path) -> None:
    assert "NetworkPolicy" not in kinds(render(helm, tmp))
    policy = one(
        render(helm, tmp, {"networkPolicy": {"enabled": True, "metricsFromNamespaces": ["monitoring"]}}),
        "NetworkPolicy",
    )
    assert policy["spec"]["policyTypes"] == ["Ingress"]
    (rule,) = policy["spec"]["ingress"]
    assert rule["ports"] == [{"port": "metrics", "protocol": "TCP"}]
    assert rule["from"] == [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}]
    own = one(render(helm, tmp, {"networkPolicy": {"enabled": True}}), "NetworkPolicy")
    assert own["spec"]["ingress"][0]["from"][0]["namespaceSelector"]["matchLabels"] == {
        "kubernetes.io/metadata.name": "barge-system"
    }


def test_ephemeral_sqlite_is_accepted_when_asked_for(helm: Path, tmp: Path) -> None:
    docs = render(helm, tmp, {"ledger": {"sqlite": {"persistence": {"enabled": False}, "ephemeral": True}}})
    assert "PersistentVolumeClaim" not in kinds(docs)
    volumes = {v["name"]: v for v in one(docs, "Deployment")["spec"]["template"]["spec"]["volumes"]}
    assert volumes["ledger"] == {"name": "ledger", "emptyDir": {}}


def notes(helm: Path, tmp: Path, values: dict[str, Any]) -> str:
    """NOTES.txt as `helm install` prints it (a client-side dry run: no cluster)."""
    out = _run(helm, "install", "barge", str(CHART), "-n", "barge-system", "--dry-run=client", values=values, tmp=tmp)
    assert out.returncode == 0, out.stderr
    return out.stdout.split("NOTES:", 1)[1]


def test_notes_give_next_steps_for_the_installed_mode(helm: Path, tmp: Path) -> None:
    default = notes(helm, tmp, {})
    assert "watching every namespace" in default
    assert "SQLite on PersistentVolumeClaim barge-ledger (kept on uninstall)" in default
    assert "kubectl -n barge-system rollout status deployment/barge" in default
    assert "kubectl -n claims apply -f manifests/samples/llmbatchjob-anthropic.yaml" in default
    assert "For production, use a PostgreSQL ledger" in default
    ha = notes(helm, tmp, {"replicas": 2, "watch": {"allNamespaces": False, "namespaces": ["team-a"]}, **PG})
    assert '2 replicas, Kopf peering "barge"' in ha
    assert "PostgreSQL (URL from Secret barge-ledger, key url)" in ha
    assert "kubectl -n team-a create secret generic anthropic" in ha
    assert "For production" not in ha
    ephemeral = notes(helm, tmp, {"ledger": {"sqlite": {"persistence": {"enabled": False}, "ephemeral": True}}})
    assert "DEVELOPMENT ONLY" in ephemeral


# --- the schema refuses ------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("values", "says"),
    [
        ({"replica": 2}, "replica"),
        ({"image": {"tags": "x"}}, "tags"),
        ({"ledger": {"sqlite": {"persistence": {"enabled": False}}}}, "/ledger/sqlite/ephemeral"),
        ({"replicas": 2}, "/ledger/postgresql/enabled"),
        (
            {"replicas": 2, "ledger": {"sqlite": {"persistence": {"enabled": False}, "ephemeral": True}}},
            "/ledger/postgresql/enabled",
        ),
        ({"ledger": {"postgresql": {"enabled": True}}}, "existingSecret"),
        ({"watch": {"allNamespaces": False}}, "namespaces"),
        ({"replicas": 0}, "replicas"),
        ({"sharding": {"shards": 2}}, "/ledger/postgresql/enabled"),
        ({"sharding": {"shards": 0}}, "shards"),
        ({"image": {"pullPolicy": "Sometimes"}}, "pullPolicy"),
        ({"metrics": {"serviceMonitor": {"enabled": True, "labels": {}}}}, "labels"),
    ],
    ids=[
        "unknown-key",
        "unknown-nested-key",
        "sqlite-without-persistence",
        "replicas-2-with-sqlite",
        "replicas-2-with-ephemeral-sqlite",
        "postgresql-without-secret",
        "namespaced-without-namespaces",
        "zero-replicas",
        "shards-with-sqlite",
        "zero-shards",
        "bad-enum",
        "unknown-monitoring-key",
    ],
)
def test_schema_refuses(helm: Path, tmp: Path, values: dict[str, Any], says: str) -> None:
    assert says in refused(helm, tmp, values)


@pytest.mark.parametrize("values", CI_VALUES, ids=lambda p: p.name)
def test_every_ci_scenario_renders_objects_the_api_server_accepts(
    helm: Path, tmp: Path, cluster: localcluster.Cluster, namespace: str, values: Path
) -> None:
    """Server-side dry run of each scenario's render (types, enums, RBAC rules, PDB, NetworkPolicy ...), in a fresh
    namespace that also stands in for the watched ones."""
    scenario = yaml.safe_load(values.read_text()) or {}
    if scenario.get("watch", {}).get("allNamespaces") is False:
        scenario["watch"]["namespaces"] = [namespace]
    out = _run(helm, "template", "barge", str(CHART), "--namespace", namespace, values=scenario, tmp=tmp)
    assert out.returncode == 0, out.stderr
    applied = cluster.run_kubectl(
        "apply", "--server-side", "--dry-run=server", "-f", "-", input=out.stdout, check=False
    )
    assert applied.returncode == 0, applied.stderr
    assert len(applied.stdout.splitlines()) == len([d for d in yaml.safe_load_all(out.stdout) if d])


def test_the_operator_pod_passes_restricted_pod_security_admission(
    helm: Path, tmp: Path, cluster: localcluster.Cluster, namespace: str
) -> None:
    """No kubelet or ReplicaSet controller runs here, so the Deployment's pod template is created as a Pod
    (server-side dry run) in a namespace that enforces the restricted Pod Security Standard; a pod without the
    chart's security context is refused there, so the admission is really on."""
    cluster.run_kubectl("label", "namespace", namespace, "pod-security.kubernetes.io/enforce=restricted")
    template = one(render(helm, tmp), "Deployment")["spec"]["template"]
    metadata = {**template["metadata"], "name": "barge", "namespace": namespace}
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": template["spec"]}
    ok = cluster.run_kubectl("create", "--dry-run=server", "-f", "-", input=json.dumps(pod), check=False)
    assert ok.returncode == 0, ok.stderr
    bare = json.loads(json.dumps(pod))
    del bare["spec"]["securityContext"]
    del bare["spec"]["containers"][0]["securityContext"]
    refused_pod = cluster.run_kubectl("create", "--dry-run=server", "-f", "-", input=json.dumps(bare), check=False)
    assert refused_pod.returncode != 0
    assert "violates PodSecurity" in refused_pod.stderr


# --- HA on a real API server -------------------------------------------------------------------------------------
@pytest.fixture
def bare_cluster() -> Iterator[localcluster.Cluster]:
    """A control plane of its own with no CRDs yet: here Helm must create and own them (in the session's cluster
    the fixture has already applied crds/, which a release cannot adopt)."""
    with tempfile.TemporaryDirectory(prefix="barge-helm-") as tmp:
        running = localcluster.up(Path(tmp) / "cluster")
        try:
            yield running
        finally:
            localcluster.down(Path(tmp) / "cluster")


def test_ha_install_creates_kopf_peering_crds_and_object_upgrade_keeps_it_uninstall_keeps_the_crds(
    helm: Path, bare_cluster: localcluster.Cluster
) -> None:
    def run_helm(*args: str) -> str:
        out = subprocess.run(
            [str(helm), *args, "--namespace", "barge-system"],
            env=bare_cluster.env(),
            capture_output=True,
            text=True,
            timeout=HELM_TIMEOUT,
            check=False,
        )
        assert out.returncode == 0, out.stderr
        return out.stdout

    def names(kind: str, *args: str) -> set[str]:
        out = bare_cluster.run_kubectl("get", kind, *args, "-o", "name", check=False)
        return set(out.stdout.split())

    # A first install: the peering CRD (chart crds/) and an object of that kind come in one release.
    run_helm("install", "barge", str(CHART), "--create-namespace", "--values", str(CHART / "ci" / "ha-values.yaml"))
    crds = [c["metadata"]["name"] for c in {**all_crds(), **peering_crds()}.values()]
    bare_cluster.run_kubectl("wait", "--for=condition=Established", "--timeout=60s", *[f"crd/{c}" for c in crds])
    assert names("clusterkopfpeerings") == {"clusterkopfpeering.kopf.dev/barge"}
    assert names("poddisruptionbudgets", "-n", "barge-system") == {"poddisruptionbudget.policy/barge"}
    # An upgrade leaves the peering object (and the peers the replicas wrote into it) alone.
    uid = bare_cluster.run_kubectl("get", "clusterkopfpeering", "barge", "-o", "jsonpath={.metadata.uid}").stdout
    bare_cluster.run_kubectl(
        "patch", "clusterkopfpeering", "barge", "--type=merge", "-p", '{"status":{"peer-a":{"priority":7}}}'
    )
    run_helm("upgrade", "barge", str(CHART), "--reuse-values", "--set", "operator.pollSeconds=10")
    after = json.loads(bare_cluster.run_kubectl("get", "clusterkopfpeering", "barge", "-o", "json").stdout)
    assert after["metadata"]["uid"] == uid
    assert after["status"] == {"peer-a": {"priority": 7}}
    # Switching to a namespace list: a KopfPeering (and a Role) in each watched namespace.
    bare_cluster.run_kubectl("create", "namespace", "team-a")
    run_helm(
        "upgrade", "barge", str(CHART), "--reuse-values", "--set", "watch.allNamespaces=false,watch.namespaces={team-a}"
    )
    assert names("kopfpeerings", "-n", "team-a") == {"kopfpeering.kopf.dev/barge"}
    assert names("roles", "-n", "team-a") == {"role.rbac.authorization.k8s.io/barge"}
    run_helm("uninstall", "barge")
    assert names("deployments", "-n", "barge-system") == set()
    assert names("roles", "-n", "team-a") == set()
    assert names("crd") == {f"customresourcedefinition.apiextensions.k8s.io/{c}" for c in crds}


# --- manifests/install ---------------------------------------------------------------------------------------------
def test_install_manifests_are_the_fresh_default_render() -> None:
    out = subprocess.run(
        [sys.executable, str(REPO / "tools" / "manifests.py"), "--check"], capture_output=True, text=True, check=False
    )
    assert out.returncode == 0, out.stderr
    docs = [d for d in yaml.safe_load_all((REPO / "manifests" / "install" / "barge.yaml").read_text()) if d]
    assert docs[0] == {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {
            "name": "barge-system",
            "labels": {"app.kubernetes.io/part-of": "barge", "pod-security.kubernetes.io/enforce": "restricted"},
        },
    }
    assert "CustomResourceDefinition" in kinds(docs)
    assert one(docs, "Deployment")["metadata"]["namespace"] == "barge-system"


def test_install_manifests_apply_to_a_fresh_control_plane(bare_cluster: localcluster.Cluster) -> None:
    """The README's command, for real, on a control plane with nothing installed; then again with -k (no change)."""
    source = str(REPO / "manifests" / "install")
    out = bare_cluster.run_kubectl("apply", "--server-side", "-f", source, check=False)
    assert out.returncode == 0, out.stderr
    docs = [d for d in yaml.safe_load_all((REPO / "manifests" / "install" / "barge.yaml").read_text()) if d]
    assert len(out.stdout.splitlines()) == len(docs)
    crds = [c["metadata"]["name"] for c in all_crds().values()]
    bare_cluster.run_kubectl("wait", "--for=condition=Established", "--timeout=60s", *[f"crd/{c}" for c in crds])
    for kind, name in (("deployment", "barge"), ("serviceaccount", "barge"), ("pvc", "barge-ledger")):
        bare_cluster.run_kubectl("-n", "barge-system", "get", kind, name)
    again = bare_cluster.run_kubectl("apply", "--server-side", "-k", source, check=False)
    assert again.returncode == 0, again.stderr
    assert len(again.stdout.splitlines()) == len(docs), "kustomize sees the same objects"
