"""The Helm chart on the real control plane (with kube-controller-manager), its release's life in order: `helm
install` creates every object and Established CRDs; the operator, run as a local process (no kubelet runs the
Deployment's Pod) with the chart's args and env and authenticated as the chart's ServiceAccount (a TokenRequest
token), takes the claims-nightly sample to Succeeded, builds a pool's children and a worker's ScaledObject and
deletes a job through its finalizer; what the role does not grant is refused with 403; `helm upgrade` to a
namespaced watch takes effect (Roles instead of the cluster-wide grant, and the operator works with them); an
upgrade to two replicas on PostgreSQL peers them through the chart's KopfPeering under its RBAC (one works, one
waits); `helm uninstall` removes the operator's objects and keeps the CRDs and the users' jobs. Tests run in file
order: each step starts from the release the previous one left."""

from __future__ import annotations

import base64
import ssl
import subprocess
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from tools import localcluster
from tools.localcluster import Cluster

from barge.emulator.server import EmulatorThread
from tests.conftest import REPO, fresh_database, kubectl_json
from tests.e2e.conftest import SECRET, Operator, credential_secret, own_control_plane, wait_for
from tests.e2e.test_ha import working
from tests.e2e.test_operator import apply, job_manifest, phase_is, secret
from tests.e2e.test_pools import children

pytestmark = pytest.mark.cluster

CHART = REPO / "charts" / "barge"
SAMPLES = REPO / "manifests" / "samples"
RELEASE, SYSTEM = "barge", "barge-system"
TEAM = "claims"  # the users' namespace


@pytest.fixture(scope="module")
def helm_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """Without Barge's CRDs (the chart installs them), with kube-controller-manager."""
    with own_control_plane(tmp_path_factory.mktemp("helm") / "cluster", controllers=True, barge_crds=False) as cluster:
        cluster.run_kubectl("create", "namespace", TEAM)
        # the chart requires the admin's tenant label on every namespace that runs jobs (requireTenantLabel, M3)
        cluster.run_kubectl("label", "namespace", TEAM, f"barge.dev/tenant={TEAM}")
        yield cluster


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("install")


def helm(cluster: Cluster, workdir: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    home = workdir / "helm-home"  # helm's cache, config and data: nothing outside the test's directory
    env = {
        **cluster.env(),
        "HELM_CACHE_HOME": str(home / "cache"),
        "HELM_CONFIG_HOME": str(home / "config"),
        "HELM_DATA_HOME": str(home / "data"),
    }
    out = subprocess.run(
        [str(localcluster.binaries()["helm"]), *args], env=env, text=True, capture_output=True, check=False
    )
    if check and out.returncode != 0:
        raise AssertionError(f"helm {' '.join(args)} failed: {out.stderr}")
    return out


def values_file(workdir: Path, vllm: EmulatorThread, **overrides: Any) -> Path:
    values: dict[str, Any] = {
        "operator": {
            "pollSeconds": 0.5,
            "allowedFileRoots": [str(workdir)],
            "sharedFileRoots": True,  # one team's workdir for every file this test writes (M4)
            "poolEndpointTemplate": f"{vllm.url}/v1",
        },
        **overrides,
    }
    path = workdir / f"values-{len(list(workdir.glob('values-*.yaml')))}.yaml"
    path.write_text(yaml.safe_dump(values))
    return path


@pytest.fixture(scope="module")
def release(helm_cluster: Cluster, workdir: Path, vllm: EmulatorThread) -> str:
    values = values_file(workdir, vllm)
    helm(helm_cluster, workdir, "install", RELEASE, str(CHART), "-n", SYSTEM, "--create-namespace", "-f", str(values))
    return helm(helm_cluster, workdir, "get", "manifest", RELEASE, "-n", SYSTEM).stdout


def rendered(manifest: str) -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all(manifest) if doc]


def deployment_container(cluster: Cluster) -> dict[str, Any]:
    deployment = kubectl_json(cluster, "-n", SYSTEM, "get", "deployment", RELEASE)
    return deployment["spec"]["template"]["spec"]["containers"][0]  # type: ignore[index,no-any-return]


def service_account(cluster: Cluster) -> str:
    deployment = kubectl_json(cluster, "-n", SYSTEM, "get", "deployment", RELEASE)
    return str(deployment["spec"]["template"]["spec"]["serviceAccountName"])  # type: ignore[index]


def sa_kubeconfig(cluster: Cluster, workdir: Path) -> tuple[Path, str]:
    """A kubeconfig holding a token the TokenRequest API minted for the chart's ServiceAccount."""
    token = cluster.token(SYSTEM, service_account(cluster))
    ca = cluster.dir / "pki" / "apiserver.crt"
    path = workdir / "sa-kubeconfig"
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [
                    {"name": "local", "cluster": {"server": server(cluster), "certificate-authority": str(ca)}}
                ],
                "users": [{"name": "barge", "user": {"token": token}}],
                "contexts": [{"name": "barge", "context": {"cluster": "local", "user": "barge", "namespace": SYSTEM}}],
                "current-context": "barge",
            }
        )
    )
    path.chmod(0o600)
    return path, token


def server(cluster: Cluster) -> str:
    return str(yaml.safe_load(cluster.kubeconfig.read_text())["clusters"][0]["cluster"]["server"])


def chart_operator(cluster: Cluster, workdir: Path, vllm: EmulatorThread, name: str) -> Operator:
    """`barge operator` with the Deployment's own args and env, as the chart's ServiceAccount. Resolved as the
    kubelet would: `secretKeyRef` from the Secret, `fieldRef: metadata.name` to `name` (the pod's name). Replaced,
    because it points into the Pod: a SQLite ledger's path on the Pod's volume, and the metrics port."""
    container = deployment_container(cluster)
    assert container["args"][0] == "operator"
    args = [a for a in container["args"][1:] if not a.startswith("--metrics-port")]
    env: dict[str, str] = {}
    for var in container.get("env", []):
        source = var.get("valueFrom", {})
        if "value" in var:
            env[var["name"]] = var["value"]
        elif "secretKeyRef" in source:
            ref = source["secretKeyRef"]
            data = kubectl_json(cluster, "-n", SYSTEM, "get", "secret", ref["name"])["data"]
            env[var["name"]] = base64.b64decode(data[ref["key"]]).decode()  # type: ignore[index]
        elif source.get("fieldRef", {}).get("fieldPath") == "metadata.name":
            env[var["name"]] = name
        else:
            raise AssertionError(f"an env var this test cannot resolve: {var}")
    if not env["BARGE_LEDGER_URL"].startswith("postgresql://"):
        env["BARGE_LEDGER_URL"] = str(workdir / f"{name}-ledger.db")
    kubeconfig, _ = sa_kubeconfig(cluster, workdir)
    env["KUBECONFIG"] = str(kubeconfig)
    return Operator(cluster, workdir, f"{vllm.url}/v1", args=args, env=env, name=name)


@pytest.fixture(scope="module")
def sa_operator(helm_cluster: Cluster, release: str, workdir: Path, vllm: EmulatorThread) -> Iterator[Operator]:
    op = chart_operator(helm_cluster, workdir, vllm, "sa-operator")
    op.start()
    yield op
    op.stop()


def api_status(cluster: Cluster, token: str, path: str) -> int:
    """The HTTP status the API server answers a GET with this bearer token."""
    ctx = ssl.create_default_context(cafile=str(cluster.dir / "pki" / "apiserver.crt"))
    req = urllib.request.Request(server(cluster) + path, headers={"Authorization": f"Bearer {token}"})  # noqa: S310
    try:
        with urllib.request.urlopen(req, timeout=10, context=ctx) as resp:  # noqa: S310 - loopback API server
            return int(resp.status)
    except urllib.error.HTTPError as err:
        return err.code


# --- install ------------------------------------------------------------------------------------------------
def test_install_creates_every_object_and_the_crds_are_established(helm_cluster: Cluster, release: str) -> None:
    docs = rendered(release)
    kinds = {d["kind"] for d in docs}
    assert {"Deployment", "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "CustomResourceDefinition"} <= kinds
    for doc in docs:
        ns = doc["metadata"].get("namespace")
        where = ["-n", ns] if ns else []
        kind = doc["kind"] if "." not in doc["apiVersion"] else f"{doc['kind']}.{doc['apiVersion'].split('/')[0]}"
        got = helm_cluster.run_kubectl(*where, "get", kind, doc["metadata"]["name"], "-o", "name", check=False)
        assert got.returncode == 0, f"{doc['kind']}/{doc['metadata']['name']} not created: {got.stderr}"
    crds = [d["metadata"]["name"] for d in docs if d["kind"] == "CustomResourceDefinition"]
    assert {"llmbatchjobs.barge.dev", "inferencepools.barge.dev"} <= set(crds)
    for crd in crds:
        helm_cluster.run_kubectl("wait", "--for=condition=Established", "--timeout=60s", f"crd/{crd}")
        annotations = kubectl_json(helm_cluster, "get", "crd", crd)["metadata"]["annotations"]  # type: ignore[index]
        assert annotations["helm.sh/resource-policy"] == "keep"
    # kube-controller-manager turns the Deployment into a ReplicaSet and a Pod, which stays Pending (no kubelet).
    pods = wait_for(lambda: kubectl_json(helm_cluster, "-n", SYSTEM, "get", "pods")["items"], 60, "the operator's Pod")
    assert pods[0]["status"]["phase"] == "Pending"  # type: ignore[index]
    for role in (d for d in docs if d["kind"] in ("ClusterRole", "Role")):
        for rule in role["rules"]:
            assert "*" not in rule.get("verbs", []) + rule.get("resources", []) + rule.get("apiGroups", [])


# --- the operator as the chart's ServiceAccount ---------------------------------------------------------------
def test_claims_nightly_succeeds_as_the_chart_service_account(
    helm_cluster: Cluster, sa_operator: Operator, emulator: EmulatorThread
) -> None:
    cluster = helm_cluster
    secret(cluster, TEAM)
    apply(cluster, TEAM, job_manifest("claims-nightly", emulator.url, sa_operator.workdir, n=400))
    wait_for(phase_is(cluster, TEAM, "claims-nightly", "Succeeded"), 120, "Succeeded")
    assert "forbidden" not in sa_operator.output().lower()
    assert SECRET not in sa_operator.output()


def test_pool_children_and_worker_scaled_object_as_the_chart_service_account(
    helm_cluster: Cluster, sa_operator: Operator
) -> None:
    cluster = helm_cluster
    credential_secret(cluster, TEAM, "openai", {"api-key": SECRET})
    cluster.run_kubectl("-n", TEAM, "apply", "-f", str(SAMPLES / "inferencepool-engine-interactive.yaml"))
    cluster.run_kubectl("-n", TEAM, "apply", "-f", str(SAMPLES / "inferencepool-provider-redis-worker.yaml"))
    expected = {
        "Deployment/llama-interactive-vllm",
        "Service/llama-interactive",
        "PersistentVolumeClaim/llama-interactive-model-cache",
        "PodDisruptionBudget/llama-interactive-vllm",
        "Deployment/ingest-mini-doc-ingest-worker",
        "ScaledObject/ingest-mini-doc-ingest-worker",
    }
    wait_for(lambda: expected <= set(children(cluster, TEAM)), 60, "the pools' children")
    worker_cm = kubectl_json(cluster, "-n", TEAM, "get", "configmap", "ingest-mini-doc-ingest-worker")
    assert worker_cm["metadata"]["ownerReferences"][0]["name"] == "ingest-mini"  # type: ignore[index]
    assert "forbidden" not in sa_operator.output().lower()


def test_delete_with_the_finalizer_as_the_chart_service_account(
    helm_cluster: Cluster, sa_operator: Operator, start_emulator: Any
) -> None:
    cluster = helm_cluster
    slow = start_emulator({"batch": {"processingSeconds": 120, "cancelSeconds": 0.2}})
    apply(cluster, TEAM, job_manifest("doomed", slow.url, sa_operator.workdir, n=20))
    wait_for(phase_is(cluster, TEAM, "doomed", "Running"), 60, "Running")
    job = kubectl_json(cluster, "-n", TEAM, "get", "lbj", "doomed")
    assert "barge.dev/finalizer" in job["metadata"]["finalizers"]  # type: ignore[index]
    cluster.run_kubectl("-n", TEAM, "delete", "lbj", "doomed", "--wait=true", "--timeout=60s")
    assert slow.store.batches[next(iter(slow.store.batches))].cancel_at is not None


def test_what_the_role_does_not_grant_is_forbidden(helm_cluster: Cluster, release: str, workdir: Path) -> None:
    _, token = sa_kubeconfig(helm_cluster, workdir)
    assert api_status(helm_cluster, token, f"/api/v1/namespaces/{TEAM}/secrets/anthropic") == 200
    assert api_status(helm_cluster, token, "/api/v1/namespaces/kube-system/secrets") == 403
    assert api_status(helm_cluster, token, f"/api/v1/namespaces/{TEAM}/secrets") == 403
    assert api_status(helm_cluster, token, "/api/v1/nodes") == 403


# --- upgrade and uninstall ------------------------------------------------------------------------------------
def test_upgrade_to_a_namespaced_watch_takes_effect(
    helm_cluster: Cluster, sa_operator: Operator, workdir: Path, vllm: EmulatorThread, emulator: EmulatorThread
) -> None:
    cluster = helm_cluster
    sa_operator.stop()
    values = values_file(workdir, vllm, watch={"allNamespaces": False, "namespaces": [TEAM]})
    helm(cluster, workdir, "upgrade", RELEASE, str(CHART), "-n", SYSTEM, "-f", str(values))
    args = deployment_container(cluster)["args"]
    assert "--all-namespaces" not in args
    assert f"--namespace={TEAM}" in args
    kubectl_json(cluster, "-n", TEAM, "get", "role", RELEASE)
    cluster_rules = kubectl_json(cluster, "get", "clusterrole", RELEASE)["rules"]
    assert {"apiGroups": [""], "resources": ["namespaces"], "verbs": ["list", "watch"]} in cluster_rules  # type: ignore[operator]
    _, token = sa_kubeconfig(cluster, workdir)
    assert api_status(cluster, token, f"/apis/barge.dev/v1alpha1/namespaces/{TEAM}/llmbatchjobs") == 200
    assert api_status(cluster, token, "/apis/barge.dev/v1alpha1/llmbatchjobs") == 403
    assert api_status(cluster, token, "/apis/barge.dev/v1alpha1/namespaces/default/llmbatchjobs") == 403

    namespaced = chart_operator(cluster, workdir, vllm, "namespaced-operator")
    namespaced.start()
    try:
        apply(cluster, TEAM, job_manifest("after-upgrade", emulator.url, workdir, n=100))
        wait_for(phase_is(cluster, TEAM, "after-upgrade", "Succeeded"), 120, "Succeeded under the Roles")
        assert "forbidden" not in namespaced.output().lower()
    finally:
        namespaced.stop()


def test_upgrade_to_two_replicas_peers_them_under_the_chart_rbac(
    helm_cluster: Cluster, workdir: Path, vllm: EmulatorThread, emulator: EmulatorThread, postgres_url: str
) -> None:
    cluster = helm_cluster
    url = fresh_database(postgres_url)
    cluster.run_kubectl("-n", SYSTEM, "create", "secret", "generic", "barge-ledger", f"--from-literal=url={url}")
    values = values_file(
        workdir,
        vllm,
        replicas=2,
        watch={"allNamespaces": False, "namespaces": [TEAM]},
        ledger={"postgresql": {"enabled": True, "existingSecret": "barge-ledger"}},
    )
    helm(cluster, workdir, "upgrade", RELEASE, str(CHART), "-n", SYSTEM, "-f", str(values))
    kubectl_json(cluster, "-n", TEAM, "get", "kopfpeering", "barge")  # the chart made the peering object
    pods = [chart_operator(cluster, workdir, vllm, f"barge-{n}") for n in ("x7k2p", "q9w4z")]
    assert "--peering=barge" in pods[0].args
    try:
        for pod in pods:
            pod.start()

        def records() -> dict[str, object]:
            return kubectl_json(cluster, "-n", TEAM, "get", "kopfpeering", "barge").get("status") or {}

        # both records first: a replica still starting up (a loaded machine) leaves the first one working alone
        wait_for(lambda: len(records()) == 2, 90, "both replicas keep their record in the KopfPeering")
        wait_for(lambda: [working(p) for p in pods].count(True) == 1, 60, "one replica working, one paused")
        assert len(records()) == 2, f"both replicas keep their record in the KopfPeering: {records()}"
        apply(cluster, TEAM, job_manifest("two-replicas", emulator.url, workdir, n=100))
        wait_for(phase_is(cluster, TEAM, "two-replicas", "Succeeded"), 120, "Succeeded with two replicas")
        for pod in pods:
            assert "forbidden" not in pod.output().lower()
            assert "Possibly conflicting operators" not in pod.output()
    finally:
        for pod in pods:
            pod.stop()


def test_uninstall_keeps_the_crds_the_ledger_and_the_jobs(helm_cluster: Cluster, release: str, workdir: Path) -> None:
    cluster = helm_cluster
    docs = rendered(helm(cluster, workdir, "get", "manifest", RELEASE, "-n", SYSTEM).stdout)
    helm(cluster, workdir, "uninstall", RELEASE, "-n", SYSTEM)
    kept = set()
    for doc in docs:
        meta = doc["metadata"]
        kind = doc["kind"] if "." not in doc["apiVersion"] else f"{doc['kind']}.{doc['apiVersion'].split('/')[0]}"
        where = ["-n", meta["namespace"]] if meta.get("namespace") else []

        def gone(kind: str = kind, where: list[str] = where, name: str = meta["name"]) -> bool:
            return cluster.run_kubectl(*where, "get", kind, name, check=False).returncode != 0

        if (meta.get("annotations") or {}).get("helm.sh/resource-policy") == "keep":
            assert not gone(), f"{doc['kind']}/{meta['name']} is annotated keep but was deleted"
            kept.add(doc["kind"])
        else:
            wait_for(gone, 60, f"{doc['kind']}/{meta['name']} to go with the release")
    assert "CustomResourceDefinition" in kept
    # the SQLite ledger's PVC of the first install: kept when the upgrade to PostgreSQL dropped it, and now
    kubectl_json(cluster, "-n", SYSTEM, "get", "pvc", f"{RELEASE}-ledger")
    jobs = kubectl_json(cluster, "-n", TEAM, "get", "lbj")["items"]
    nightly = next(j for j in jobs if j["metadata"]["name"] == "claims-nightly")  # type: ignore[union-attr]
    assert nightly["status"]["phase"] == "Succeeded"
    # the garbage collector removes the Deployment's ReplicaSet and Pod
    wait_for(lambda: not kubectl_json(cluster, "-n", SYSTEM, "get", "pods,replicasets")["items"], 60, "Pods gone")
