"""Argo CD as processes against the local control plane, for the GitOps e2e tests (upstream's own developer
setup, its Procfile): redis-server (Debian), argocd-repo-server and argocd-application-controller from the one
`argocd` binary built from its Go module (tools/argocd), ARGOCD_FAKE_IN_CLUSTER=true so that the in-cluster
destination https://kubernetes.default.svc means our kubeconfig, and a local Git repository read over file://.
No argocd-server: Applications with `syncPolicy.automated` sync without it; a refresh is the annotation a Git
webhook would set.

The Argo CD CRDs (Application, AppProject) come from the argo-cd module in the Go module cache that
`make tools` filled when it built `argocd` (manifests/crds of the same v3.6.1), not from a copy in this repo.
"""

from __future__ import annotations

import gzip
import json
import os
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import redis
import yaml
from tools import localcluster
from tools.localcluster import Cluster

from tests.conftest import REPO, install_crds, kubectl_json
from tests.e2e.conftest import free_port, wait_for

NS = "argocd"
PATCH = REPO / "integrations" / "argocd" / "argocd-cm-patch.yaml"


def argocd_module() -> Path:
    """The argo-cd module's source in the Go module cache: filled by `make tools` when it built argocd, and
    downloaded from the Go module proxy here when the binary came from ~/.cache/barge but the module cache
    was emptied since."""
    module = f"github.com/argoproj/argo-cd/v3@v{localcluster.ARGOCD_VERSION}"
    modcache = subprocess.run(["go", "env", "GOMODCACHE"], capture_output=True, text=True, check=True).stdout.strip()
    path = Path(modcache) / module
    if not path.exists():
        env = {**os.environ, "GOTOOLCHAIN": localcluster.ARGOCD_GOTOOLCHAIN}
        subprocess.run(["go", "mod", "download", module], cwd=localcluster.TOOLS / "argocd", env=env, check=True)
    return path


def argocd_crds() -> list[Path]:
    """Application and AppProject CRDs of the argo-cd module the binary was built from."""
    crds = argocd_module() / "manifests" / "crds"
    paths = [crds / "application-crd.yaml", crds / "appproject-crd.yaml"]
    missing = [p for p in paths if not p.exists()]
    if missing:
        raise FileNotFoundError(f"{missing}: run `make tools` (it builds argocd and fills the Go module cache)")
    return paths


class GitRepo:
    """A local Git repository that Argo CD's repo-server reads over file://."""

    def __init__(self, path: Path) -> None:
        self.path = path
        path.mkdir(parents=True)
        self.git("init", "-q", "-b", "main")
        self.git("config", "user.email", "gitops@barge.test")
        self.git("config", "user.name", "Barge GitOps test")
        self.commit({"README.md": "Barge GitOps test repository\n"}, "init")

    @property
    def url(self) -> str:
        return f"file://{self.path}"

    def git(self, *args: str) -> str:
        return subprocess.run(["git", *args], cwd=self.path, capture_output=True, text=True, check=True).stdout

    def commit(self, files: dict[str, str | None], message: str) -> str:
        """Write (or, for None, delete) files and commit; returns the new revision."""
        for name, content in files.items():
            target = self.path / name
            if content is None:
                self.git("rm", "-q", name)
                continue
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(content)
            self.git("add", name)
        self.git("commit", "-q", "-m", message)
        return self.git("rev-parse", "HEAD").strip()


class ArgoCD:
    """redis-server, argocd-repo-server and argocd-application-controller as processes; logs under workdir."""

    def __init__(self, cluster: Cluster, workdir: Path) -> None:
        self.cluster, self.workdir = cluster, workdir
        self.binary = localcluster.build()["argocd"]
        self.procs: list[subprocess.Popen[bytes]] = []
        self.redis_port = 0

    def _spawn(self, name: str, argv: list[str], env: dict[str, str]) -> subprocess.Popen[bytes]:
        log = (self.workdir / f"{name}.log").open("wb")
        proc = subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        self.procs.append(proc)
        return proc

    def install(self, extra_cm: dict[str, str] | None = None) -> None:
        install_crds(self.cluster, *argocd_crds())
        self.cluster.run_kubectl("create", "namespace", NS, check=False)
        cm = yaml.safe_load(PATCH.read_text())
        cm["data"].update(
            {
                "timeout.reconciliation": "5s",  # poll Git often; tests also set the refresh annotation
                "timeout.reconciliation.jitter": "0s",
                **(extra_cm or {}),
            }
        )
        docs: list[dict[str, Any]] = [
            cm,
            {
                "apiVersion": "v1",
                "kind": "Secret",
                "metadata": {
                    "name": "argocd-secret",
                    "namespace": NS,
                    "labels": {"app.kubernetes.io/part-of": "argocd"},
                },
                "stringData": {"server.secretkey": os.urandom(16).hex()},
            },
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {
                    "name": "argocd-rbac-cm",
                    "namespace": NS,
                    "labels": {"app.kubernetes.io/part-of": "argocd"},
                },
            },
            {
                # Normally made by argocd-server, which does not run here.
                "apiVersion": "argoproj.io/v1alpha1",
                "kind": "AppProject",
                "metadata": {"name": "default", "namespace": NS},
                "spec": {
                    "sourceRepos": ["*"],
                    "destinations": [{"server": "*", "namespace": "*"}],
                    "clusterResourceWhitelist": [{"group": "*", "kind": "*"}],
                },
            },
        ]
        self.cluster.run_kubectl(
            "apply",
            "--server-side",
            "--force-conflicts",
            "-f",
            "-",
            input=json.dumps({"apiVersion": "v1", "kind": "List", "items": docs}),
        )

    def start(self) -> None:
        self.install()
        redis_port, repo_port = free_port(), free_port()
        self.redis_port = redis_port
        home = self.workdir / "home"
        for sub in ("tls", "ssh", "gpg"):
            (home / sub).mkdir(parents=True, exist_ok=True)
        helm = localcluster.binaries()["helm"]
        # The repo-server runs upstream's hack/git-verify-wrapper.sh on every revision (its image ships it).
        bin_dir = home / "bin"
        bin_dir.mkdir(exist_ok=True)
        wrapper = bin_dir / "git-verify-wrapper.sh"
        wrapper.write_bytes((argocd_module() / "hack" / "git-verify-wrapper.sh").read_bytes())
        wrapper.chmod(0o755)
        base = {
            "PATH": f"{bin_dir}:{helm.parent}:/usr/local/bin:/usr/bin:/bin",
            "HOME": str(home),
            "KUBECONFIG": str(self.cluster.kubeconfig),
            "ARGOCD_FAKE_IN_CLUSTER": "true",
            "ARGOCD_TLS_DATA_PATH": str(home / "tls"),
            "ARGOCD_SSH_DATA_PATH": str(home / "ssh"),
            "ARGOCD_GNUPGHOME": str(home / "gpg"),
            "ARGOCD_GPG_ENABLED": "false",
        }
        self._spawn(
            "redis",
            ["redis-server", "--port", str(redis_port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
            base,
        )
        wait_for(lambda: self._port_open(redis_port), 20, "redis-server")
        redis = f"127.0.0.1:{redis_port}"
        self._spawn(
            "repo-server",
            [str(self.binary), "--port", str(repo_port), "--redis", redis,
             "--metrics-port", str(free_port()), "--loglevel", "info"],
            {**base, "ARGOCD_BINARY_NAME": "argocd-repo-server"},
        )  # fmt: skip
        wait_for(lambda: self._port_open(repo_port), 60, "argocd-repo-server")
        self._spawn(
            "application-controller",
            [str(self.binary), "--redis", redis, "--repo-server", f"127.0.0.1:{repo_port}",
             "--metrics-port", str(free_port()), "--namespace", NS, "--status-processors", "4",
             "--operation-processors", "4", "--self-heal-timeout-seconds", "2", "--loglevel", "info",
             # Refresh every 5 s (default 120 s): a job's progress message changes the health message but not
             # the status, and Argo CD's ignoreResourceUpdates (on by default) refreshes only on status changes.
             "--app-resync", "5", "--app-resync-jitter", "0"],
            {**base, "ARGOCD_BINARY_NAME": "argocd-application-controller", "HOSTNAME": "barge-e2e-controller-0"},
        )  # fmt: skip
        time.sleep(1)
        for proc in self.procs:
            if proc.poll() is not None:
                raise RuntimeError(f"an Argo CD process exited with {proc.returncode}: see {self.workdir}/*.log")

    @staticmethod
    def _port_open(port: int) -> bool:
        import socket

        with socket.socket() as sock:
            return sock.connect_ex(("127.0.0.1", port)) == 0

    def stop(self) -> None:
        for proc in reversed(self.procs):
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
        for proc in self.procs:
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(5)

    def logs(self) -> str:
        return "".join(p.read_text(errors="replace")[-4000:] for p in sorted(self.workdir.glob("*.log")))

    # --- Applications -------------------------------------------------------------------------------------
    def create_app(self, name: str, repo: GitRepo, path: str, namespace: str, *, helm: bool = False) -> None:
        source: dict[str, Any] = {"repoURL": repo.url, "targetRevision": "main", "path": path}
        if helm:
            source["helm"] = {"releaseName": name}
        app = {
            "apiVersion": "argoproj.io/v1alpha1",
            "kind": "Application",
            "metadata": {"name": name, "namespace": NS},
            "spec": {
                "project": "default",
                "source": source,
                "destination": {"server": "https://kubernetes.default.svc", "namespace": namespace},
                # Background: Argo CD's default foreground prune waits for the garbage collector, which does not
                # run on this control plane; Barge's own finalizer still runs either way.
                "syncPolicy": {
                    "automated": {"prune": True, "selfHeal": True},
                    "syncOptions": ["PrunePropagationPolicy=background"],
                    # One quick retry (Argo CD 3 retries a failed automated sync 5 times over minutes by default).
                    "retry": {"limit": 1, "backoff": {"duration": "1s", "factor": 1, "maxDuration": "2s"}},
                },
            },
        }
        self.cluster.run_kubectl("apply", "-f", "-", input=json.dumps(app))

    def app(self, name: str) -> dict[str, Any]:
        return kubectl_json(self.cluster, "-n", NS, "get", "applications.argoproj.io", name)

    def tree(self, name: str) -> list[dict[str, Any]]:
        """The Application's resource tree as the UI and `argocd app get` show it: Argo CD 3 keeps resource
        health there (in Redis, gzipped JSON), not in the Application's status."""
        client = redis.Redis(port=self.redis_port)
        try:
            nodes: list[dict[str, Any]] = []
            for key in client.scan_iter(match=f"app|resources-tree|{name}|*"):
                raw = client.get(key)
                if isinstance(raw, bytes):
                    nodes += json.loads(gzip.decompress(raw)).get("nodes") or []
            return nodes
        finally:
            client.close()

    def refresh(self, name: str) -> None:
        """What a Git webhook does: ask the controller to compare with the newest revision now."""
        self.cluster.run_kubectl(
            "-n", NS, "annotate", "applications.argoproj.io", name, "argocd.argoproj.io/refresh=normal", "--overwrite"
        )

    def wait_app(self, name: str, check: Callable[[dict[str, Any]], Any], timeout: float, what: str) -> Any:
        try:
            return wait_for(lambda: check(self.app(name)), timeout, what)
        except TimeoutError as exc:
            status = self.app(name).get("status", {})
            summary = {k: status.get(k) for k in ("sync", "health", "operationState", "conditions")}
            raise TimeoutError(f"{exc}; application status: {json.dumps(summary)[:3000]}") from exc


def node_health(tree: list[dict[str, Any]], kind: str, name: str) -> dict[str, str]:
    """Health of one resource in the resource tree: {status, message}, empty when not (yet) there."""
    for node in tree:
        if node.get("kind") == kind and node.get("name") == name:
            return node.get("health") or {}  # type: ignore[no-any-return]
    return {}


def resource(app: dict[str, Any], kind: str, name: str) -> dict[str, Any]:
    """The Application's status entry for one resource (its sync status)."""
    for res in (app.get("status") or {}).get("resources") or []:
        if res.get("kind") == kind and res.get("name") == name:
            return res  # type: ignore[no-any-return]
    return {}


def sync_status(app: dict[str, Any]) -> str:
    return str(((app.get("status") or {}).get("sync") or {}).get("status") or "")


def health(app: dict[str, Any]) -> str:
    return str(((app.get("status") or {}).get("health") or {}).get("status") or "")


def operation(app: dict[str, Any]) -> dict[str, Any]:
    return (app.get("status") or {}).get("operationState") or {}  # type: ignore[no-any-return]
