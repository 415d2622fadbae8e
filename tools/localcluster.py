"""A real, local Kubernetes control plane (etcd + kube-apiserver) on loopback, for tests and the demo; helm, argocd.

Why: an operator is only judged honestly by a real API server (structural schemas, CEL, server-side
apply, RBAC). Docker does not run here and no binaries may be downloaded, so etcd, kube-apiserver,
kubectl, kube-controller-manager, helm and argocd are built from their Go modules (tools/etcd, tools/k8s,
tools/helm, tools/argocd), cached under ~/.cache/barge/bin keyed by version and by a hash of the wrapper
module, and started as plain processes.

kube-controller-manager is opt-in (`up(controllers=True)`, `up --controllers`): it runs the garbage
collector, namespace deletion, Deployment -> ReplicaSet -> Pod, ServiceAccounts and kube-root-ca.crt
(CONTROLLERS). Opt-in because it costs a process, and because its Deployment controller owns Deployment
status: tests that make a Deployment look ready by patching its status need a control plane without it.
There is never a kubelet or a scheduler: Pods stay Pending.

Usage (stdlib only, so it runs before any virtualenv exists):
    python3 tools/localcluster.py build        # build or reuse the cached binaries
    python3 tools/localcluster.py up [--dir D] [--controllers]  # etcd + kube-apiserver (+ controllers)
    python3 tools/localcluster.py down [--dir D]
    python3 tools/localcluster.py token NAMESPACE SERVICEACCOUNT   # mint a ServiceAccount token
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import hashlib
import json
import os
import shutil
import socket
import ssl
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

try:  # tools/localnode.py, beside this file: `tools.localnode` when imported as a package (tests), else by path
    from tools import localnode
except ImportError:
    import localnode  # type: ignore[no-redef]

K8S_VERSION = "1.34.4"
ETCD_VERSION = "3.6.16"
HELM_VERSION = "4.3.2"
ARGOCD_VERSION = "3.6.1"
KEDA_VERSION = "2.21.0"
ACTIONLINT_VERSION = "1.7.12"
ARGOCD_GOTOOLCHAIN = "go1.27.3"  # argo-cd v3.6 needs go >= 1.27; the toolchain comes from the module proxy

# Without these every binary reports v0.0.0-master+$Format:%H$, which `kubectl version` and the kubelet's node
# registration cannot parse.
K8S_LDFLAGS = " ".join(
    f"-X k8s.io/component-base/version.{key}={value}"
    for key, value in (
        ("gitVersion", f"v{K8S_VERSION}"),
        ("gitMajor", K8S_VERSION.split(".")[0]),
        ("gitMinor", K8S_VERSION.split(".")[1]),
        ("gitTreeState", "clean"),
    )
)

TOOLS = Path(__file__).resolve().parent
REPO = TOOLS.parent
CACHE = Path(os.environ.get("BARGE_CACHE", Path.home() / ".cache" / "barge")) / "bin"
DEFAULT_DIR = REPO / ".barge" / "cluster"

# The controllers that make a namespace, an owner, a Deployment and a PVC behave as on a cluster. Left out: anything
# that needs a kubelet, a scheduler, a cloud or metrics (node lifecycle, HPA, PV binding, ...).
CONTROLLERS = (
    "garbage-collector-controller",
    "namespace-controller",
    "deployment-controller",
    "replicaset-controller",
    "persistentvolumeclaim-protection-controller",  # PVCs carry its finalizer (admission adds it)
    "serviceaccount-controller",
    "serviceaccount-token-controller",
    "root-ca-certificate-publisher-controller",
)

ADMIN_TOKEN_NAME = "admin-token"  # noqa: S105 - file name under the state dir; the token itself is random per cluster


def _module_hash(module: Path) -> str:
    digest = hashlib.sha256()
    for path in sorted(module.rglob("*")):
        if path.is_file() and path.suffix in {".go", ".mod", ".sum"}:
            digest.update(path.relative_to(module).as_posix().encode())
            digest.update(path.read_bytes())
    return digest.hexdigest()[:12]


def _bin_dir(name: str, version: str, module: str = "") -> Path:
    return CACHE / f"{name}-v{version}-{_module_hash(TOOLS / (module or name))}"


def binaries() -> dict[str, Path]:
    k8s = _bin_dir("k8s", K8S_VERSION)
    node = _bin_dir("k8s-node", K8S_VERSION, module="k8s")  # a build of its own: only the node uses them
    return {
        "etcd": _bin_dir("etcd", ETCD_VERSION) / "etcd",
        "kube-apiserver": k8s / "kube-apiserver",
        "kubectl": k8s / "kubectl",
        "kube-controller-manager": k8s / "kube-controller-manager",
        "kubelet": node / "kubelet",
        "kube-scheduler": node / "kube-scheduler",
        "helm": _bin_dir("helm", HELM_VERSION) / "helm",
        "argocd": _bin_dir("argocd", ARGOCD_VERSION) / "argocd",
        "actionlint": _bin_dir("actionlint", ACTIONLINT_VERSION) / "actionlint",
        "keda-operator": _bin_dir("keda", KEDA_VERSION) / "operator",
        "keda-adapter": _bin_dir("keda", KEDA_VERSION) / "adapter",
    }


def _go_build(
    module: str,
    out: Path,
    packages: list[str],
    ldflags: str = "",
    binary: str = "",
    toolchain: str = "",
    optimize: bool = True,
) -> None:
    """Build packages of the wrapper module tools/<module> into out/ (one binary per package's last path
    element, or the single package into out/<binary>), unless they are already there. `optimize=False` for tools
    whose speed no test depends on (see compile_flags)."""
    names = [binary] if binary else [Path(p).name for p in packages]
    if all((out / n).exists() for n in names):
        return
    CACHE.mkdir(parents=True, exist_ok=True)
    with (CACHE / f".{module}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # several test sessions may ask for the same build at once
        if not all((out / n).exists() for n in names):
            _go_build_locked(module, out, packages, ldflags, names, toolchain, optimize)


def link_flags(ldflags: str) -> str:
    """`-s -w` (no symbol table, no DWARF: these binaries are never debugged here; Go's stack traces need neither)
    before the caller's `-X` version flags. Measured on etcd from an empty build cache: 199 s of CPU instead of
    256 s (-22%); a cold `make tools` is CPU-bound on 2 cores."""
    return f"-s -w {ldflags}".strip()


def compile_flags(optimize: bool) -> list[str]:
    """`-gcflags=all=-N -l` (no optimisation, no inlining) for the tools only the tests' set-up runs (helm,
    actionlint, argocd, KEDA): their speed is nowhere near any test's critical path, and the compiler's back end is
    most of a cold build's CPU (etcd from an empty build cache: 155 s of CPU instead of 256 s). The control plane
    (etcd, kube-apiserver, ...) stays optimised: every test waits on it."""
    return [] if optimize else ["-gcflags=all=-N -l"]


def _go_build_locked(
    module: str, out: Path, packages: list[str], ldflags: str, names: list[str], toolchain: str, optimize: bool
) -> None:
    tmp = out.with_name(out.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    started = time.monotonic()
    print(f"building {', '.join(names)} from Go modules (first time only) ...", flush=True)
    flags = [f"-ldflags={link_flags(ldflags)}", *compile_flags(optimize)]
    target = str(tmp / names[0]) if len(names) == 1 and names[0] != Path(packages[0]).name else str(tmp) + "/"
    env = {**os.environ, "GOTOOLCHAIN": toolchain} if toolchain else None
    subprocess.run(
        ["go", "build", "-trimpath", *flags, "-o", target, *packages], cwd=TOOLS / module, check=True, env=env
    )
    shutil.rmtree(out, ignore_errors=True)
    tmp.rename(out)
    print(f"built {module} in {time.monotonic() - started:.0f}s -> {out}", flush=True)


def build_keda() -> None:
    """KEDA's operator and metrics adapter, for the local node (~12 min cold with the Kubernetes modules cached)."""
    bins = binaries()
    _go_build(
        "keda",
        bins["keda-operator"].parent,
        ["github.com/kedacore/keda/v2/cmd/operator", "github.com/kedacore/keda/v2/cmd/adapter"],
        ldflags=f"-X github.com/kedacore/keda/v2/version.Version={KEDA_VERSION}",
        optimize=False,
    )


def build_keda_group() -> None:
    """KEDA as the tests run it: build_keda, then its adapter relinked to bind its metrics port on loopback only
    (tools/localkeda.py, ~30 s once KEDA's packages are in Go's build cache)."""
    build_keda()
    try:
        from tools import localkeda  # imported from the tests (localkeda imports this module: a late import)
    except ImportError:  # run as a script: tools/ is sys.path[0]
        import localkeda  # type: ignore[no-redef,import-not-found,unused-ignore]
    localkeda.loopback_adapter()


def build_node() -> None:
    """kubelet and kube-scheduler, for `up --node` only: a build of their own after the control plane's (the
    packages they share come from Go's build cache), so that neither the demo nor the tests without a node wait
    for them."""
    bins = binaries()
    _go_build("k8s", bins["kubelet"].parent, ["./cmd/kubelet", "./cmd/kube-scheduler"], ldflags=K8S_LDFLAGS)


#: What the control plane runs (etcd's and k8s's builds): `up`, `kubectl-path` and the demo need no more.
CONTROL_PLANE = ("etcd", "kube-apiserver", "kubectl", "kube-controller-manager")
#: What the node adds (build_node): `up --node` only.
NODE = ("kubelet", "kube-scheduler")


def build_argocd() -> None:
    # Upstream's single binary (its role comes from ARGOCD_BINARY_NAME): the CLI for offline health-check
    # evaluation, and application-controller + repo-server for the GitOps e2e tests. ~2,300 packages.
    _go_build(
        "argocd",
        binaries()["argocd"].parent,
        ["github.com/argoproj/argo-cd/v3/cmd"],
        ldflags=f"-X github.com/argoproj/argo-cd/v3/common.version={ARGOCD_VERSION}",
        binary="argocd",
        toolchain=ARGOCD_GOTOOLCHAIN,
        optimize=False,
    )


def build_control_plane() -> None:
    bins = binaries()
    _go_build("etcd", bins["etcd"].parent, ["./cmd/etcd"])
    _go_build(
        "k8s",
        bins["kube-apiserver"].parent,
        ["./cmd/kube-apiserver", "./cmd/kubectl", "./cmd/kube-controller-manager"],
        ldflags=K8S_LDFLAGS,
    )


def build_dev_tools() -> None:
    bins = binaries()
    _go_build(
        "helm",
        bins["helm"].parent,
        ["./cmd/helm"],
        ldflags=f"-X helm.sh/helm/v4/internal/version.version=v{HELM_VERSION}",
        optimize=False,
    )
    _go_build(
        "actionlint",
        bins["actionlint"].parent,
        ["github.com/rhysd/actionlint/cmd/actionlint"],
        ldflags=f"-X github.com/rhysd/actionlint.version=v{ACTIONLINT_VERSION}",
        optimize=False,
    )


#: The builds by name, for `build --only` (.ci/run builds the control plane and dev tools first, the rest beside
#: the tests that do not need them) and for the tests' `tools` marker (tests/conftest.py).
GROUPS = {
    "control": build_control_plane,
    "dev": build_dev_tools,
    "node": build_node,
    "argocd": build_argocd,
    "keda": build_keda_group,
}


def build(argocd: bool = True, keda: bool = False, dev_tools: bool = True, node: bool = False) -> dict[str, Path]:
    """Build (or reuse) the tools asked for; the control plane always. `argocd=False` for callers that only need
    the control plane and helm; `dev_tools=False` (with argocd=False) for the control plane alone: no helm, no
    actionlint (`up`, the demo); `node` adds kubelet and kube-scheduler; `keda` KEDA."""
    build_control_plane()
    if node:
        build_node()
    if dev_tools or argocd:
        build_dev_tools()
    if argocd:
        build_argocd()
    if keda:
        build_keda()
    return binaries()


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except OSError:
        return False
    return True


@dataclass(frozen=True)
class Cluster:
    """A running control plane: where it keeps its state and how to reach it."""

    dir: Path
    server: str
    kubeconfig: Path
    kubectl: Path

    def env(self) -> dict[str, str]:
        return {
            **os.environ,
            "KUBECONFIG": str(self.kubeconfig),
            "PATH": f"{self.kubectl.parent}:{os.environ.get('PATH', '')}",
        }

    def run_kubectl(
        self,
        *args: str,
        check: bool = True,
        input: str | None = None,
    ) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(self.kubectl), *args],
            env=self.env(),
            check=check,
            text=True,
            capture_output=True,
            input=input,
        )

    def token(self, namespace: str, service_account: str, duration: str = "1h") -> str:
        """Mint a real ServiceAccount token through the TokenRequest API (creating the SA if needed)."""
        self.run_kubectl("create", "namespace", namespace, check=False)
        self.run_kubectl("-n", namespace, "create", "serviceaccount", service_account, check=False)
        out = self.run_kubectl("-n", namespace, "create", "token", service_account, f"--duration={duration}")
        return out.stdout.strip()


def _state(directory: Path) -> dict[str, object] | None:
    path = directory / "state.json"
    if not path.exists():
        return None
    return json.loads(path.read_text())  # type: ignore[no-any-return]


def _healthy(server: str, token: str, path: str = "/readyz") -> bool:
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    req = urllib.request.Request(f"{server}{path}", headers=headers)  # noqa: S310 - https on loopback only
    try:
        with urllib.request.urlopen(req, timeout=2, context=ctx) as resp:  # noqa: S310 - https on loopback only
            return resp.status == 200
    except OSError:
        return False


def _write_kubeconfig(path: Path, server: str, token: str, ca: Path) -> None:
    ca_line = f"certificate-authority: {ca}" if ca.exists() else "insecure-skip-tls-verify: true"
    path.write_text(
        "apiVersion: v1\nkind: Config\n"
        f"clusters:\n- name: barge-local\n  cluster:\n    server: {server}\n    {ca_line}\n"
        f"users:\n- name: admin\n  user:\n    token: {token}\n"
        "contexts:\n- name: barge-local\n  context: {cluster: barge-local, user: admin, namespace: default}\n"
        "current-context: barge-local\n"
    )
    path.chmod(0o600)


def _start_controller_manager(directory: Path, bins: dict[str, Path], node: bool = False) -> None:
    """Start kube-controller-manager (CONTROLLERS, and a node's with `node`) against the running API server;
    record it for down()."""
    pki = directory / "pki"
    controllers = CONTROLLERS + (localnode.NODE_CONTROLLERS if node else ())
    extra = localnode.CONTROLLER_ARGS if node else ()
    port = _free_port()
    log = (directory / "kube-controller-manager.log").open("ab")
    proc = subprocess.Popen(
        [
            str(bins["kube-controller-manager"]),
            f"--kubeconfig={directory / 'kubeconfig'}",
            f"--controllers={','.join(controllers)}",
            *extra,
            "--leader-elect=false",
            f"--service-account-private-key-file={pki / 'sa.key'}",
            f"--root-ca-file={pki / 'apiserver.crt'}",
            "--bind-address=127.0.0.1",
            f"--secure-port={port}",
            f"--cert-dir={pki / 'controller-manager'}",
            "--v=0",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    state = _state(directory) or {}
    state["pids"] = [proc.pid, *state.get("pids", [])]  # type: ignore[list-item]
    state["controller_manager"] = f"https://127.0.0.1:{port}"
    (directory / "state.json").write_text(json.dumps(state))
    deadline = time.monotonic() + 60
    while not _healthy(f"https://127.0.0.1:{port}", "", "/healthz"):
        if proc.poll() is not None or time.monotonic() > deadline:
            down(directory)
            raise RuntimeError(f"kube-controller-manager did not start; see {directory}/kube-controller-manager.log")
        time.sleep(0.25)


def up(
    directory: Path = DEFAULT_DIR,
    *,
    controllers: bool = False,
    apiserver_args: tuple[str, ...] = (),
    node: bool = False,
    images: dict[str, Path] | None = None,
) -> Cluster:
    """Start etcd + kube-apiserver, and kube-controller-manager with `controllers` (or reuse what already runs
    from this directory, adding the controllers if asked). `apiserver_args` are added to kube-apiserver's flags
    (the operator benchmark's audit log). `node`: a real node too (tools/localnode.py: kubelet, scheduler,
    containerd; implies the controllers), with `images` ({base name: OCI archive}) imported besides the pause
    image; the default imports Barge's image from `make image` when it is built."""
    bins = build(argocd=False, dev_tools=False, node=node)
    directory = directory.resolve()
    if node:
        controllers = True
        localnode.claim_machine(directory)
    directory.mkdir(parents=True, exist_ok=True)
    state = _state(directory)
    if state is not None:
        pids = [int(p) for p in state["pids"]]  # type: ignore[attr-defined]
        token = (directory / ADMIN_TOKEN_NAME).read_text().strip()
        if all(_alive(p) for p in pids) and _healthy(str(state["server"]), token):
            print(f"control plane already running at {state['server']}", flush=True)
            if node and not (directory / "node" / "state.json").exists():
                down(directory)  # a node needs flags the running API server was not started with
                return up(directory, controllers=True, apiserver_args=apiserver_args, node=True, images=images)
            if controllers and "controller_manager" not in state:
                _start_controller_manager(directory, bins)
            return Cluster(directory, str(state["server"]), directory / "kubeconfig", bins["kubectl"])
        down(directory)
        directory.mkdir(parents=True, exist_ok=True)

    started = time.monotonic()
    pki = directory / "pki"
    pki.mkdir(exist_ok=True)
    sa_key = pki / "sa.key"
    if not sa_key.exists():
        subprocess.run(["openssl", "genrsa", "-out", str(sa_key), "2048"], check=True, capture_output=True)
    token = os.urandom(16).hex()
    (directory / ADMIN_TOKEN_NAME).write_text(token)
    (directory / ADMIN_TOKEN_NAME).chmod(0o600)
    # Static identities: the admin, plus an unprivileged user that tests can bind roles to.
    (pki / "tokens.csv").write_text(
        f'{token},barge-admin,barge-admin,"system:masters"\n{os.urandom(16).hex()},barge-nobody,barge-nobody\n'
    )

    node_pki = localnode.make_pki(directory) if node else None
    etcd_port, peer_port, api_port = _free_port(), _free_port(), _free_port()
    etcd_log = (directory / "etcd.log").open("ab")
    etcd = subprocess.Popen(
        [
            str(bins["etcd"]),
            "--name",
            "barge",
            "--data-dir",
            str(directory / "etcd-data"),
            "--listen-client-urls",
            f"http://127.0.0.1:{etcd_port}",
            "--advertise-client-urls",
            f"http://127.0.0.1:{etcd_port}",
            "--listen-peer-urls",
            f"http://127.0.0.1:{peer_port}",
            "--initial-advertise-peer-urls",
            f"http://127.0.0.1:{peer_port}",
            "--initial-cluster",
            f"barge=http://127.0.0.1:{peer_port}",
            "--unsafe-no-fsync",
            "--log-level",
            "warn",
        ],
        stdout=etcd_log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    server = f"https://127.0.0.1:{api_port}"
    api_log = (directory / "kube-apiserver.log").open("ab")
    apiserver = subprocess.Popen(
        [
            str(bins["kube-apiserver"]),
            f"--etcd-servers=http://127.0.0.1:{etcd_port}",
            f"--cert-dir={pki}",
            f"--secure-port={api_port}",
            "--bind-address=127.0.0.1",
            "--advertise-address=127.0.0.1",
            "--service-cluster-ip-range=10.0.0.0/24",
            "--allow-privileged=true",
            # No node, no Pod ever runs: ServiceAccount admission would only wait for token controllers.
            *(
                localnode.apiserver_args(node_pki)
                if node_pki
                else ("--disable-admission-plugins=ServiceAccount", "--authorization-mode=RBAC")
            ),
            f"--token-auth-file={pki / 'tokens.csv'}",
            "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
            f"--service-account-key-file={sa_key}",
            f"--service-account-signing-key-file={sa_key}",
            "--api-audiences=https://kubernetes.default.svc.cluster.local",
            "--enable-priority-and-fairness=false",
            "--endpoint-reconciler-type=none",
            "--v=0",
            *apiserver_args,
        ],
        stdout=api_log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    (directory / "state.json").write_text(
        json.dumps({"pids": [apiserver.pid, etcd.pid], "server": server, "etcd": f"http://127.0.0.1:{etcd_port}"})
    )

    deadline = time.monotonic() + 90
    while not _healthy(server, token):
        for proc, name in ((etcd, "etcd"), (apiserver, "kube-apiserver")):
            if proc.poll() is not None:
                down(directory)
                raise RuntimeError(f"{name} exited with {proc.returncode}; see {directory}/{name}.log")
        if time.monotonic() > deadline:
            down(directory)
            raise RuntimeError(f"kube-apiserver not ready after 90s; see {directory}/kube-apiserver.log")
        time.sleep(0.25)
    kubeconfig = directory / "kubeconfig"
    _write_kubeconfig(kubeconfig, server, token, pki / "apiserver.crt")
    cluster = Cluster(directory, server, kubeconfig, bins["kubectl"])
    # The bootstrap controller creates `default` itself, but not instantly.
    while (probe := cluster.run_kubectl("get", "namespace", "default", check=False)).returncode != 0:
        if time.monotonic() > deadline:
            down(directory)
            raise RuntimeError(f"namespace default never appeared: {probe.stderr.strip()}")
        time.sleep(0.25)
    if controllers:
        _start_controller_manager(directory, bins, node=node)
    node_seconds = 0.0
    if node:
        try:
            node_seconds = localnode.start(directory, kubeconfig, bins, _node_images(images))
        except BaseException:
            down(directory)
            raise
    print(
        f"control plane up at {server} in {time.monotonic() - started:.1f}s "
        f"(etcd {ETCD_VERSION}, kube-apiserver {K8S_VERSION}{', kube-controller-manager' if controllers else ''}"
        f"{f'; node {localnode.NODE_NAME} Ready in {node_seconds:.1f}s' if node else ''}); "
        f"KUBECONFIG={kubeconfig}",
        flush=True,
    )
    return cluster


def down(directory: Path = DEFAULT_DIR) -> None:
    """Stop the processes this directory's state names (kube-controller-manager first), then remove the state
    (etcd data included)."""
    state = _state(directory)
    if state is not None and (directory / "node" / "state.json").exists():
        localnode.stop(directory, directory / "kubeconfig", binaries()["kubectl"])
    if state is not None:
        localnode.stop_processes([int(p) for p in state["pids"]])  # type: ignore[attr-defined]
    shutil.rmtree(directory, ignore_errors=True)


def _node_images(images: dict[str, Path] | None) -> dict[str, Path]:
    """The pause image (built from the module's C source) and the caller's, or Barge's image when it is built."""
    pause = localnode.build_pause(CACHE, Path(_go_env("GOMODCACHE")), K8S_VERSION)
    chosen = {localnode.PAUSE_IMAGE.rsplit(":", 1)[0]: localnode._pause_archive(pause)}
    if images is None:
        try:  # tools/image.py; podman is only needed with a node
            from tools import image
        except ImportError:
            import image  # type: ignore[no-redef]

        built = image.latest_archive()
        images = {image.TAG.rsplit(":", 1)[0]: built} if built else {}
    return {**chosen, **images}


def _go_env(name: str) -> str:
    return subprocess.run(["go", "env", name], check=True, capture_output=True, text=True).stdout.strip()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("command", choices=["build", "up", "down", "token", "kubectl-path", "tool-path"])
    parser.add_argument("args", nargs="*")
    parser.add_argument("--dir", type=Path, default=DEFAULT_DIR)
    parser.add_argument("--controllers", action="store_true", help="also run kube-controller-manager (up)")
    parser.add_argument("--node", action="store_true", help="also run a real node: kubelet + containerd (up)")
    opts = parser.parse_args(argv)
    if opts.command == "build":  # `build [GROUP ...]` (GROUPS), in the order given; all of them by default
        started = time.monotonic()
        unknown = set(opts.args) - set(GROUPS)
        if unknown:
            parser.error(f"unknown build group(s) {sorted(unknown)}: the groups are {', '.join(GROUPS)}")
        for group in opts.args or list(GROUPS):
            GROUPS[group]()
        bins = binaries()
        print(f"binaries ready in {time.monotonic() - started:.1f}s: " + " ".join(str(p) for p in bins.values()))
    elif opts.command == "tool-path":  # e.g. `tool-path actionlint`: built (without argocd) if missing
        with contextlib.redirect_stdout(sys.stderr):  # build messages stay out of the printed path
            name = opts.args[0]
            tool = build(argocd=False, dev_tools=name not in CONTROL_PLANE + NODE, node=name in NODE)[name]
        print(tool)
    elif opts.command == "kubectl-path":
        print(build(argocd=False, dev_tools=False)["kubectl"])
    elif opts.command == "up":
        up(opts.dir, controllers=opts.controllers, node=opts.node)
    elif opts.command == "down":
        down(opts.dir)
        print("control plane stopped")
    elif opts.command == "token":
        state = _state(opts.dir)
        if state is None or len(opts.args) != 2:
            parser.error("token NAMESPACE SERVICEACCOUNT needs a running cluster (make cluster-up)")
        cluster = Cluster(opts.dir, str(state["server"]), opts.dir / "kubeconfig", binaries()["kubectl"])
        print(cluster.token(opts.args[0], opts.args[1]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
