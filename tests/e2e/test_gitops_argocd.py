"""The GitOps loop with Argo CD itself: its application-controller and repo-server (v3.6.1, built from the Go
module) sync Barge objects from a local Git repository into the real API server, with the Barge operator
running as a process and `barge emulator` as the provider. Argo CD judges health with the health checks from
integrations/argocd/argocd-cm-patch.yaml (the same patch users apply)."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from tools.localcluster import Cluster

from barge.emulator.server import EmulatorThread
from tests.conftest import REPO, kubectl_json, state
from tests.e2e.argocd import ArgoCD, GitRepo, health, node_health, operation, resource, sync_status
from tests.e2e.conftest import Operator, wait_for
from tests.e2e.test_operator import job_manifest, secret

pytestmark = [pytest.mark.cluster, pytest.mark.tools("argocd")]


@pytest.fixture(scope="module")
def argo(cluster: Cluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ArgoCD]:
    cd = ArgoCD(cluster, tmp_path_factory.mktemp("argocd"))
    try:
        cd.start()
        yield cd
    finally:
        cd.stop()


@pytest.fixture
def repo(tmp_path: Path) -> GitRepo:
    return GitRepo(tmp_path / "gitops")


def with_wave(manifest: str, wave: int) -> str:
    doc = yaml.safe_load(manifest)
    doc["metadata"].setdefault("annotations", {})["argocd.argoproj.io/sync-wave"] = str(wave)
    return yaml.safe_dump(doc, sort_keys=False)


def edit(manifest: str, **spec: Any) -> str:
    doc = yaml.safe_load(manifest)
    doc["spec"].update(spec)
    return yaml.safe_dump(doc, sort_keys=False)


def provider_pool(name: str, url: str) -> str:
    return yaml.safe_dump(
        {
            "apiVersion": "barge.dev/v1alpha1",
            "kind": "InferencePool",
            "metadata": {"name": name},
            "spec": {
                "model": "claude-sonnet-4-6",
                "provider": {
                    "type": "anthropic",
                    "model": "claude-sonnet-4-6",
                    "secretRef": {"name": "anthropic"},
                    "baseURL": url,
                },
                "quota": {"tokensPerMinute": 400000, "requestsPerMinute": 2000},
            },
        },
        sort_keys=False,
    )


def on_pool(manifest: str, pool: str) -> str:
    doc = yaml.safe_load(manifest)
    doc["spec"]["provider"] = {"type": "pool", "poolRef": {"name": pool}}
    return yaml.safe_dump(doc, sort_keys=False)


def lbj(cluster: Cluster, namespace: str, name: str) -> dict[str, Any]:
    out = cluster.run_kubectl("-n", namespace, "get", "lbj", name, "-o", "json", check=False)
    return json.loads(out.stdout) if out.returncode == 0 else {}  # type: ignore[no-any-return]


def cond(body: dict[str, Any], type_: str) -> dict[str, Any]:
    return next((c for c in (body.get("status") or {}).get("conditions") or [] if c["type"] == type_), {})


class Watch:
    """Everything the Application showed while a test waited: sync statuses, health, operation phases and the
    resource tree's health of each LLMBatchJob (what the UI shows)."""

    def __init__(self, argo: ArgoCD, name: str) -> None:
        self.argo, self.name = argo, name
        self.sync: list[str] = []
        self.health: list[str] = []
        self.seen: list[tuple[str, str, str]] = []  # (operation phase, job name, "Status: message")
        self.tree: list[dict[str, Any]] = []

    def job(self, name: str) -> dict[str, str]:
        return node_health(self.tree, "LLMBatchJob", name)

    def until(self, check: Callable[[dict[str, Any]], Any], timeout: float, what: str) -> dict[str, Any]:
        def observe(app: dict[str, Any]) -> Any:
            self.tree = self.argo.tree(self.name)
            self.sync.append(sync_status(app))
            self.health.append(health(app))
            for node in self.tree:
                if node.get("kind") == "LLMBatchJob" and (node.get("health") or {}).get("message"):
                    h = node["health"]
                    self.seen.append((operation(app).get("phase", ""), node["name"], f"{h['status']}: {h['message']}"))
            return app if check(app) else None

        return self.argo.wait_app(self.name, observe, timeout, what)

    def failed_sync(self, revision: str, what: str) -> dict[str, Any]:
        """Refresh, then wait until the sync of `revision` ended Failed or Error; the Application then."""
        self.argo.refresh(self.name)
        return self.until(
            lambda a: (
                operation(a).get("syncResult", {}).get("revision") == revision
                and operation(a).get("phase") in ("Failed", "Error")
            ),
            120,
            what,
        )

    def out_of_sync_after_first_synced(self) -> list[str]:
        first = self.sync.index("Synced") if "Synced" in self.sync else len(self.sync)
        return [s for s in self.sync[first:] if s != "Synced"]


def test_waves_pool_then_job_progressing_then_healthy_and_no_drift_from_the_operator(
    cluster: Cluster,
    namespace: str,
    operator: Operator,
    argo: ArgoCD,
    repo: GitRepo,
    start_emulator: Callable[..., EmulatorThread],
) -> None:
    emu = start_emulator({"batch": {"processingSeconds": 20}})
    secret(cluster, namespace)
    job = on_pool(job_manifest("nightly-2026-11-30", emu.url, operator.workdir, n=1200), "claims")
    repo.commit(
        {
            "waves/pool.yaml": with_wave(provider_pool("claims", emu.url), 0),
            "waves/job.yaml": with_wave(job, 1),
        },
        "claims pool (wave 0) and tonight's job (wave 1)",
    )
    argo.create_app("waves", repo, "waves", namespace)
    watch = Watch(argo, "waves")
    job_name = "nightly-2026-11-30"
    watch.until(lambda a: watch.job(job_name).get("status") == "Progressing", 120, "job Progressing")

    # Wave 0 completed (pool Healthy = kstatus Ready) before wave 1 created the job.
    pool = kubectl_json(cluster, "-n", namespace, "get", "bpool", "claims")
    created = lbj(cluster, namespace, job_name)["metadata"]["creationTimestamp"]
    assert cond(pool, "Ready")["status"] == "True"
    assert cond(pool, "Ready")["lastTransitionTime"] <= created

    app = watch.until(
        lambda a: health(a) == "Healthy" and watch.job(job_name).get("status") == "Healthy", 240, "Healthy"
    )
    assert lbj(cluster, namespace, job_name)["status"]["phase"] == "Succeeded"
    assert "Progressing" in watch.health, "the Application was Progressing while the job ran"
    running = [m for _, n, m in watch.seen if n == job_name and m.startswith("Progressing: Running: ")]
    assert any("/1,200 done, " in m and "in flight" in m for m in running), watch.seen
    # The sync operation does not wait for the last wave's health: it ended while the job still ran.
    assert any(op == "Succeeded" for op, n, m in watch.seen if m.startswith("Progressing: Running: ")), watch.seen
    final = watch.job(job_name)
    assert final["message"].startswith("Succeeded: "), final
    assert "/1,200 done, 0 batches in flight" in final["message"]
    # The operator wrote status, its finalizer and (on the pool) Kopf's annotations: never drift.
    job_now = lbj(cluster, namespace, job_name)
    assert "barge.dev/finalizer" in job_now["metadata"]["finalizers"]
    assert any(k.startswith("barge.dev/") for k in pool["metadata"].get("annotations") or {})
    assert job_now["metadata"]["generation"] == 1, "nobody (Argo CD included) changed the job's spec"
    assert watch.out_of_sync_after_first_synced() == []
    assert sync_status(app) == "Synced"
    assert {r["status"] for r in app["status"]["resources"]} == {"Synced"}


def test_suspend_selfheal_prune_invalid_and_failed_through_git(
    cluster: Cluster,
    namespace: str,
    operator: Operator,
    argo: ArgoCD,
    repo: GitRepo,
    start_emulator: Callable[..., EmulatorThread],
) -> None:
    slow = start_emulator({"batch": {"processingSeconds": 600, "cancelSeconds": 0.2}})
    broke = start_emulator({"billingError": True})
    secret(cluster, namespace)
    name = "nightly-2026-12-01"
    job = job_manifest(name, slow.url, operator.workdir, n=300, deadline="2099-01-01T00:00:00Z")
    keep = yaml.safe_dump(
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "claims-settings"}, "data": {"team": "claims"}}
    )
    repo.commit({"nightly/job.yaml": job, "nightly/settings.yaml": keep}, "tonight's job")
    argo.create_app("nightly", repo, "nightly", namespace)
    watch = Watch(argo, "nightly")

    def job_health(_: dict[str, Any]) -> dict[str, str]:
        return watch.job(name)

    watch.until(
        lambda a: (
            sync_status(a) == "Synced"
            and job_health(a).get("status") == "Progressing"
            and "in flight" in job_health(a).get("message", "")
            and not job_health(a)["message"].startswith("Submitting")
        ),
        120,
        "running with batches in flight",
    )
    first_batch = state(slow)["batches"][0]["id"]

    # selfHeal: a hand edit of a mutable field is put back, and Barge observes the restored generation.
    before = lbj(cluster, namespace, name)
    cluster.run_kubectl(
        "-n", namespace, "patch", "lbj", name, "--type=merge", "-p", '{"spec":{"deadline":"2030-01-01T00:00:00Z"}}'
    )
    restored = wait_for(
        lambda: (
            (b := lbj(cluster, namespace, name))["metadata"]["generation"] >= before["metadata"]["generation"] + 2 and b
        ),
        60,
        "Argo CD to put the deadline back",
    )
    assert restored["spec"]["deadline"] == "2099-01-01T00:00:00Z"
    wait_for(
        lambda: (b := lbj(cluster, namespace, name))["status"]["observedGeneration"] == b["metadata"]["generation"],
        60,
        "Barge to observe the restored spec",
    )

    # Suspend through Git: in-flight batches are cancelled, the job holds, the Application shows it.
    repo.commit({"nightly/job.yaml": edit(job, suspend=True)}, "hold tonight's job")
    argo.refresh("nightly")
    # The Application's health follows its resources' one refresh later: wait for both, then assert both.
    app = watch.until(
        lambda a: job_health(a).get("message", "").startswith("Suspended") and health(a) == "Healthy",
        120,
        "job suspended and the Application Healthy",
    )
    assert job_health(app)["status"] == "Healthy"
    assert health(app) == "Healthy"
    assert sync_status(app) == "Synced"
    assert lbj(cluster, namespace, name)["status"]["phase"] == "Suspended"
    assert slow.store.batches[first_batch].cancel_at is not None

    # Resume, then delete the job from Git: pruned, and the finalizer cancels the new in-flight batch.
    repo.commit({"nightly/job.yaml": edit(job, suspend=False)}, "resume")
    argo.refresh("nightly")
    wait_for(
        lambda: len(state(slow)["batches"]) >= 2 and lbj(cluster, namespace, name)["status"]["phase"] == "Running",
        120,
        "resumed",
    )
    second = [b["id"] for b in state(slow)["batches"] if b["id"] != first_batch]
    repo.commit({"nightly/job.yaml": None}, "tonight's job is not wanted")
    argo.refresh("nightly")
    wait_for(lambda: not lbj(cluster, namespace, name), 120, "the job pruned")
    assert all(slow.store.batches[b].cancel_at is not None for b in second), "the finalizer cancelled the batch"
    app = watch.until(
        lambda a: sync_status(a) == "Synced" and not resource(a, "LLMBatchJob", name), 60, "Synced after prune"
    )

    # An invalid job (two input sources) fails the sync with the API server's message; nothing else is lost.
    bad = yaml.safe_load(job_manifest("nightly-bad", slow.url, operator.workdir, n=10))
    bad["metadata"]["name"] = "nightly-bad"
    bad["spec"]["input"]["inline"] = [{"id": "1", "text": "x", "policy": "p"}]
    revision = repo.commit({"nightly/bad.yaml": yaml.safe_dump(bad)}, "an invalid job")
    app = watch.failed_sync(revision, "the sync to fail")
    text = json.dumps(operation(app))
    assert "exactly one of spec.input.url, spec.input.configMapRef, spec.input.inline, spec.input.fromJob" in text
    assert kubectl_json(cluster, "-n", namespace, "get", "configmap", "claims-settings")["data"] == {"team": "claims"}
    assert not lbj(cluster, namespace, "nightly-bad")
    repo.commit({"nightly/bad.yaml": None}, "drop the invalid job")

    # A job that Fails makes the Application Degraded, with Barge's reason.
    failing = job_manifest("nightly-unpaid", broke.url, operator.workdir, n=20)
    repo.commit({"nightly/unpaid.yaml": failing}, "a job the provider will refuse to bill")
    argo.refresh("nightly")
    app = watch.until(lambda a: health(a) == "Degraded" and watch.job("nightly-unpaid"), 180, "Degraded")
    res = watch.job("nightly-unpaid")
    assert res["status"] == "Degraded"
    assert res["message"].startswith("Failed: ")
    assert lbj(cluster, namespace, "nightly-unpaid")["status"]["message"] in res["message"]
    assert sync_status(app) == "Synced"

    # Reusing a job's name for another night's input: the API server refuses it, and the sync says why.
    reused = yaml.safe_load(failing)
    reused["spec"]["input"]["url"] = reused["spec"]["input"]["url"].replace("nightly-unpaid", "nightly-2026-12-01")
    revision = repo.commit({"nightly/unpaid.yaml": yaml.safe_dump(reused)}, "same name, tomorrow's input")
    app = watch.failed_sync(revision, "the sync to fail on an immutable field")
    assert "spec.input is immutable after creation" in json.dumps(operation(app))
    assert lbj(cluster, namespace, "nightly-unpaid")["spec"]["input"] == yaml.safe_load(failing)["spec"]["input"]


def test_an_application_of_the_chart_installs_barge(
    cluster: Cluster, namespace: str, argo: ArgoCD, repo: GitRepo
) -> None:
    """Argo CD's repo-server renders charts/barge with helm (4.3.2, from its Go module) from the Git repository
    and the controller applies it. No kubelet runs here, so the operator's Deployment stays Progressing."""
    files = {
        str(path.relative_to(REPO)): path.read_text()
        for path in sorted((REPO / "charts" / "barge").rglob("*"))
        if path.is_file()
    }
    repo.commit(files, "the Barge chart")
    argo.create_app("barge", repo, "charts/barge", namespace, helm=True)
    watch = Watch(argo, "barge")
    app = watch.until(
        lambda a: sync_status(a) == "Synced" and operation(a).get("phase") == "Succeeded", 240, "the chart synced"
    )
    resources = app["status"]["resources"]
    kinds = {r["kind"] for r in resources}
    assert {"Deployment", "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "CustomResourceDefinition"} <= kinds
    for res in resources:
        assert res["status"] == "Synced", res
        where = ["-n", res["namespace"]] if res.get("namespace") else []
        kind = f"{res['kind'].lower()}.{res['group']}" if res.get("group") else res["kind"].lower()
        found = cluster.run_kubectl(*where, "get", kind, res["name"], "-o", "name", check=False)
        assert found.returncode == 0, f"{res['kind']}/{res['name']} is missing: {found.stderr}"
    deployment = next(r for r in resources if r["kind"] == "Deployment")
    assert node_health(watch.tree, "Deployment", deployment["name"]).get("status") == "Progressing"
    assert health(app) == "Progressing", "no kubelet: the operator's pod never runs here"
