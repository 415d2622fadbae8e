"""KEDA (operator + metrics adapter, v2.21.0 built from its Go module) as loopback processes on a local control plane.

Why: Barge generates KEDA ScaledObjects for its queue workers; only a real KEDA, a real `external.metrics.k8s.io`
APIService and the real HPA controller show that they scale a Deployment as written. There is no Pod network here,
so KEDA runs as two plain processes (like the control plane itself), every listening port bound to 127.0.0.1:

    operator  --metrics-bind-address, --health-probe-bind-address, --metrics-service-bind-address (gRPC, mTLS)
    adapter   --secure-port with --bind-address=127.0.0.1 (the aggregated API), and its /metrics on --port

KEDA's adapter binds its --port as ":<port>" (every interface) and has no flag to narrow it, so `start` uses a
copy of the adapter rebuilt from the same module versions with one line changed (LOOPBACK_PATCH: the bind host comes
from KEDA_ADAPTER_METRICS_BIND_HOST, empty = upstream's behaviour); one package recompiles, the rest is cached.

What `start` creates, and `stop` removes (only what it created):
- namespace `keda`; KEDA's six CRDs (the module's config/crd/bases) if absent;
- the ServiceAccount `keda-operator` with KEDA's own release RBAC (config/rbac and config/metrics-server of the
  module): both processes log in with a TokenRequest token of it, not with the admin's, so a permission KEDA's
  release does not grant fails here as it would on a cluster;
- a CA and one leaf certificate (openssl) for the operator <-> adapter gRPC (both sides verify: mTLS) and the
  adapter's serving certificate; the APIService carries the CA as caBundle (no insecureSkipTLSVerify);
- Service `keda/keda-metrics-apiserver` of type ExternalName (externalName: localhost) and the APIService
  `v1beta1.external.metrics.k8s.io` whose service.port is the adapter's secure port. This needs an API server
  with the front-proxy flags (`front_proxy_flags`) and without --enable-aggregator-routing (it refuses
  ExternalName; Endpoints refuse 127.0.0.1).
The HPA controller is kube-controller-manager's `horizontal-pod-autoscaler-controller` (not started here).

Usage (stdlib only):
    python3 tools/localkeda.py front-proxy --dir PKI   # print the kube-apiserver flags (creating the certs)
    python3 tools/localkeda.py up --dir CLUSTER_DIR [--kubeconfig K]
    python3 tools/localkeda.py down --dir CLUSTER_DIR
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import fcntl
import functools
import json
import os
import signal
import ssl
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

try:
    from tools import localcluster  # imported from the tests
except ImportError:  # run as a script: tools/ is sys.path[0]
    import localcluster  # type: ignore[no-redef,import-not-found,unused-ignore]

NAMESPACE = "keda"
SERVICE_ACCOUNT = "keda-operator"
SERVICE = "keda-metrics-apiserver"
APISERVICE = "v1beta1.external.metrics.k8s.io"
MODULE = "github.com/kedacore/keda/v2"
# KEDA's release RBAC, applied unchanged from the module (its ClusterRoles and bindings name namespace keda).
RBAC_FILES = (
    "config/service_account/service_account.yaml",
    "config/rbac/role.yaml",
    "config/rbac/role_binding.yaml",
    "config/metrics-server/role.yaml",
    "config/metrics-server/role_binding.yaml",
)
LOOPBACK_PATCH = (
    'metricsBindAddress := fmt.Sprintf(":%v", metricsAPIServerPort)',
    'metricsBindAddress := fmt.Sprintf("%s:%v", os.Getenv("KEDA_ADAPTER_METRICS_BIND_HOST"), metricsAPIServerPort)',
)
TOKEN_DURATION = "8760h"  # noqa: S105 - a duration, not a secret


def _openssl(*args: str) -> None:
    subprocess.run(["openssl", *args], check=True, capture_output=True)


def _ca(directory: Path, name: str, subject: str) -> tuple[Path, Path]:
    crt, key = directory / f"{name}.crt", directory / f"{name}.key"
    if not crt.exists():
        _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "3650", "-subj", subject,
                 "-keyout", str(key), "-out", str(crt), "-addext", "basicConstraints=critical,CA:TRUE",
                 "-addext", "keyUsage=critical,keyCertSign,cRLSign")  # fmt: skip
    return crt, key


def _leaf(directory: Path, name: str, ca: tuple[Path, Path], subject: str, ext: str) -> tuple[Path, Path]:
    crt, key, csr, extfile = (directory / f"{name}.{s}" for s in ("crt", "key", "csr", "ext"))
    if not crt.exists():
        extfile.write_text(ext)
        _openssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", subject, "-keyout", str(key), "-out", str(csr))
        _openssl("x509", "-req", "-in", str(csr), "-CA", str(ca[0]), "-CAkey", str(ca[1]), "-CAcreateserial",
                 "-days", "3650", "-extfile", str(extfile), "-out", str(crt))  # fmt: skip
        csr.unlink()
    key.chmod(0o600)
    return crt, key


def front_proxy_flags(pki_dir: Path) -> tuple[str, ...]:
    """kube-apiserver flags for the aggregation layer: a front-proxy CA and the client certificate the API server
    proxies aggregated requests with (created under pki_dir unless there). Reusable by any local control plane."""
    pki_dir.mkdir(parents=True, exist_ok=True)
    ca = _ca(pki_dir, "front-proxy-ca", "/CN=front-proxy-ca")
    crt, key = _leaf(pki_dir, "front-proxy-client", ca, "/CN=front-proxy-client",
                     "keyUsage=critical,digitalSignature,keyEncipherment\nextendedKeyUsage=clientAuth\n")  # fmt: skip
    return (
        f"--requestheader-client-ca-file={ca[0]}",
        "--requestheader-allowed-names=front-proxy-client",
        "--requestheader-extra-headers-prefix=X-Remote-Extra-",
        "--requestheader-group-headers=X-Remote-Group",
        "--requestheader-username-headers=X-Remote-User",
        f"--proxy-client-cert-file={crt}",
        f"--proxy-client-key-file={key}",
    )


def _certs(certs: Path) -> Path:
    """ca.crt, tls.crt, tls.key: the names KEDA's gRPC server (operator) and client (adapter) read from --cert-dir.
    One leaf for both ends (server and client auth) and for the adapter's HTTPS (the name the aggregator checks is
    <service>.<namespace>.svc)."""
    certs.mkdir(parents=True, exist_ok=True)
    ca = _ca(certs, "ca", "/CN=keda-local-ca")
    sans = f"DNS:localhost,DNS:{SERVICE}.{NAMESPACE}.svc,DNS:keda-operator.{NAMESPACE}.svc,IP:127.0.0.1"
    _leaf(certs, "tls", ca, "/CN=keda", f"subjectAltName={sans}\nextendedKeyUsage=serverAuth,clientAuth\n")
    return certs


def module_dir() -> Path:
    out = subprocess.run(
        ["go", "list", "-m", "-f", "{{.Dir}}", MODULE], cwd=localcluster.TOOLS / "keda", check=True,
        capture_output=True, text=True,
    )  # fmt: skip
    return Path(out.stdout.strip())


def loopback_adapter() -> Path:
    """KEDA's adapter relinked with LOOPBACK_PATCH (cached next to the upstream binaries)."""
    upstream = localcluster.binaries()["keda-adapter"]
    out = upstream.with_name("adapter-loopback")
    if out.exists():
        return out
    if not upstream.exists():
        localcluster.build_keda()
    localcluster.CACHE.mkdir(parents=True, exist_ok=True)
    with (localcluster.CACHE / ".keda-loopback.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # two test workers (or .ci/run's build beside them) may ask at once
        if not out.exists():
            _relink(upstream, out)
    return out


def _relink(upstream: Path, out: Path) -> None:
    source = module_dir() / "cmd" / "adapter" / "main.go"
    text = source.read_text()
    if LOOPBACK_PATCH[0] not in text:
        raise RuntimeError(f"{source} no longer binds its metrics port as the patch expects: review LOOPBACK_PATCH")
    # `go build -overlay` may not replace files under GOMODCACHE: the patched main package goes into a copy of the
    # wrapper module (same go.mod and go.sum, so the same dependency versions and the build cache's objects).
    work = upstream.parent.with_name(upstream.parent.name + ".loopback-src")
    (work / "adapter").mkdir(parents=True, exist_ok=True)
    for name in ("go.mod", "go.sum"):
        (work / name).write_bytes((localcluster.TOOLS / "keda" / name).read_bytes())
    (work / "adapter" / "main.go").write_text(text.replace(*LOOPBACK_PATCH))
    ldflags = f"-X {MODULE}/version.Version={localcluster.KEDA_VERSION}"
    started = time.monotonic()
    subprocess.run(
        # the flags of build_keda's, so that every package but the patched main comes from Go's build cache
        ["go", "build", "-trimpath", f"-ldflags={localcluster.link_flags(ldflags)}",
         *localcluster.compile_flags(False), "-o", str(out.with_suffix(".tmp")), "./adapter"],
        cwd=work, check=True,
    )  # fmt: skip
    out.with_suffix(".tmp").rename(out)
    print(f"relinked KEDA's adapter with a loopback metrics bind in {time.monotonic() - started:.0f}s", flush=True)


@functools.cache
def _kubectl_path() -> Path:
    return localcluster.binaries()["kubectl"]  # hashes the wrapper module: once


def _kubectl(kubeconfig: Path, *args: str, input: str | None = None, check: bool = True) -> str:
    proc = subprocess.run(
        [str(_kubectl_path()), f"--kubeconfig={kubeconfig}", *args],
        input=input, capture_output=True, text=True,
    )  # fmt: skip
    if check and proc.returncode != 0:
        raise RuntimeError(f"kubectl {' '.join(args)}: {proc.stderr.strip()}")
    return proc.stdout


def _server_and_ca(kubeconfig: Path) -> tuple[str, str]:
    config = json.loads(_kubectl(kubeconfig, "config", "view", "--raw", "--minify", "-o", "json"))
    cluster = config["clusters"][0]["cluster"]
    ca = cluster.get("certificate-authority", "")
    return str(cluster["server"]), f"certificate-authority: {ca}" if ca else "insecure-skip-tls-verify: true"


def _state_path(cluster_dir: Path) -> Path:
    return cluster_dir / "keda" / "state.json"


def _save(cluster_dir: Path, state: dict[str, object]) -> None:
    _state_path(cluster_dir).write_text(json.dumps(state, indent=1))


def _get_ok(url: str, context: ssl.SSLContext | None = None) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2, context=context) as resp:  # noqa: S310 - loopback only
            return bool(resp.status == 200)
    except OSError:
        return False


def _spawn(cmd: list[str], log: Path, env: dict[str, str]) -> int:
    with log.open("ab") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    return proc.pid


def _install_crds(kubeconfig: Path, state: dict[str, object]) -> None:
    created: list[str] = []
    for path in sorted((module_dir() / "config" / "crd" / "bases").glob("*.yaml")):
        name = path.name.removesuffix(".yaml").split("_", 1)
        crd = f"{name[1]}.{name[0]}"
        if _kubectl(kubeconfig, "get", "crd", crd, "-o", "name", check=False):
            continue
        _kubectl(kubeconfig, "apply", "--server-side", "-f", str(path))
        created.append(crd)
    state["crds"] = created
    if created:
        _kubectl(kubeconfig, "wait", "--for=condition=Established", "--timeout=60s", *(f"crd/{c}" for c in created))


def _process_kubeconfig(cluster_dir: Path, kubeconfig: Path) -> Path:
    token = _kubectl(
        kubeconfig, "-n", NAMESPACE, "create", "token", SERVICE_ACCOUNT, f"--duration={TOKEN_DURATION}"
    ).strip()
    server, ca_line = _server_and_ca(kubeconfig)
    path = cluster_dir / "keda" / "kubeconfig"
    path.write_text(
        "apiVersion: v1\nkind: Config\n"
        f"clusters:\n- name: local\n  cluster:\n    server: {server}\n    {ca_line}\n"
        f"users:\n- name: {SERVICE_ACCOUNT}\n  user:\n    token: {token}\n"
        f"contexts:\n- name: local\n  context: {{cluster: local, user: {SERVICE_ACCOUNT}, namespace: {NAMESPACE}}}\n"
        "current-context: local\n"
    )
    path.chmod(0o600)
    return path


def _apiservice(port: int, ca: Path) -> str:
    return json.dumps(
        {
            "apiVersion": "v1",
            "kind": "List",
            "items": [
                {
                    "apiVersion": "v1",
                    "kind": "Service",
                    "metadata": {"name": SERVICE, "namespace": NAMESPACE},
                    "spec": {
                        "type": "ExternalName",
                        "externalName": "localhost",
                        "ports": [{"name": "https", "port": port, "targetPort": port}],
                    },
                },
                {
                    "apiVersion": "apiregistration.k8s.io/v1",
                    "kind": "APIService",
                    "metadata": {"name": APISERVICE},
                    "spec": {
                        "service": {"name": SERVICE, "namespace": NAMESPACE, "port": port},
                        "group": "external.metrics.k8s.io",
                        "version": "v1beta1",
                        "caBundle": base64.b64encode(ca.read_bytes()).decode(),
                        "groupPriorityMinimum": 100,
                        "versionPriority": 100,
                    },
                },
            ],
        }
    )


def _available(kubeconfig: Path) -> tuple[bool, str]:
    out = _kubectl(kubeconfig, "get", "apiservice", APISERVICE, "-o", "json", check=False)
    if not out:
        return False, "absent"
    conds = (json.loads(out).get("status") or {}).get("conditions") or []
    ok = any(c["type"] == "Available" and c["status"] == "True" for c in conds)
    return ok, "; ".join(f"{c['type']}={c['status']} {c.get('message', '')}" for c in conds)


def start(cluster_dir: Path, kubeconfig: Path | None = None, *, timeout: float = 120) -> dict[str, object]:
    """Run KEDA's operator and adapter against the control plane of `kubeconfig` (default: cluster_dir/kubeconfig,
    an admin), wait until the APIService is Available; the state (pids, ports) goes to cluster_dir/keda/."""
    cluster_dir = cluster_dir.resolve()
    admin = (kubeconfig or cluster_dir / "kubeconfig").resolve()
    if _state_path(cluster_dir).exists():
        stop(cluster_dir)
    bins = localcluster.binaries()
    if not bins["keda-operator"].exists():
        localcluster.build_keda()
    adapter = loopback_adapter()
    (cluster_dir / "keda").mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    state: dict[str, object] = {"admin_kubeconfig": str(admin), "pids": []}
    _save(cluster_dir, state)
    # Recorded before each step, so that stop() after a failure undoes what was made.
    state["namespace"] = not _kubectl(admin, "get", "namespace", NAMESPACE, "-o", "name", check=False)
    _save(cluster_dir, state)
    if state["namespace"]:
        _kubectl(admin, "create", "namespace", NAMESPACE)
    _install_crds(admin, state)
    _save(cluster_dir, state)
    mod = module_dir()
    state["rbac"] = True
    _save(cluster_dir, state)
    for rel in RBAC_FILES:
        _kubectl(admin, "apply", "-f", str(mod / rel))
    kubeconfig_sa = _process_kubeconfig(cluster_dir, admin)
    certs = _certs(cluster_dir / "keda" / "certs")

    ports = {name: localcluster._free_port() for name in ("metrics", "health", "grpc", "secure", "adapter_metrics")}
    state["ports"] = ports
    env = {
        **os.environ,
        "KUBECONFIG": str(kubeconfig_sa),
        "WATCH_NAMESPACE": "",  # every namespace
        "POD_NAMESPACE": NAMESPACE,  # leader election and the default gRPC address (both overridden below)
        "KEDA_CLUSTER_OBJECT_NAMESPACE": NAMESPACE,  # Secrets for ClusterTriggerAuthentications
        "KEDA_ADAPTER_METRICS_BIND_HOST": "127.0.0.1",
    }
    logs = cluster_dir / "keda"
    operator = _spawn(
        [
            str(bins["keda-operator"]),
            f"--metrics-bind-address=127.0.0.1:{ports['metrics']}",
            f"--health-probe-bind-address=127.0.0.1:{ports['health']}",
            f"--metrics-service-bind-address=127.0.0.1:{ports['grpc']}",
            f"--cert-dir={certs}",
            "--enable-cert-rotation=false",
            "--leader-elect=false",
            "--zap-log-level=info",
        ],
        logs / "operator.log",
        env,
    )
    state["pids"] = [operator]
    _save(cluster_dir, state)
    adapter_pid = _spawn(
        [
            str(adapter),
            f"--port={ports['adapter_metrics']}",
            "--bind-address=127.0.0.1",
            f"--secure-port={ports['secure']}",
            f"--cert-dir={certs}",
            f"--tls-cert-file={certs / 'tls.crt'}",
            f"--tls-private-key-file={certs / 'tls.key'}",
            f"--metrics-service-address=127.0.0.1:{ports['grpc']}",
            "--metrics-service-grpc-authority=localhost",
            f"--lister-kubeconfig={kubeconfig_sa}",
            f"--authentication-kubeconfig={kubeconfig_sa}",
            f"--authorization-kubeconfig={kubeconfig_sa}",
            "--zap-log-level=info",
        ],
        logs / "adapter.log",
        env,
    )
    state["pids"] = [adapter_pid, operator]
    state["processes"] = {"operator": operator, "adapter": adapter_pid}
    state["apiservice"] = True
    _save(cluster_dir, state)
    _kubectl(admin, "apply", "-f", "-", input=_apiservice(ports["secure"], certs / "ca.crt"))

    deadline = time.monotonic() + timeout
    while True:
        dead = [
            name for name, pid in (("operator", operator), ("adapter", adapter_pid)) if not localcluster._alive(pid)
        ]
        ok, why = _available(admin)
        if ok and _get_ok(f"http://127.0.0.1:{ports['health']}/readyz"):
            break
        if dead or time.monotonic() > deadline:
            stop(cluster_dir)
            raise RuntimeError(f"KEDA not ready ({'exited: ' + ', '.join(dead) if dead else why}); see {logs}/*.log")
        time.sleep(0.5)
    state["ready_seconds"] = round(time.monotonic() - started, 1)
    _save(cluster_dir, state)
    print(f"KEDA {localcluster.KEDA_VERSION} up in {state['ready_seconds']}s (APIService {APISERVICE} Available)")
    return state


def stop(cluster_dir: Path) -> None:
    """Stop KEDA's processes and delete what start() created (CRDs and the namespace only if it created them)."""
    cluster_dir = cluster_dir.resolve()
    path = _state_path(cluster_dir)
    if not path.exists():
        return
    state = json.loads(path.read_text())
    admin = Path(state["admin_kubeconfig"])
    pids = [int(p) for p in state.get("pids", [])]
    reachable = admin.exists() and bool(_kubectl(admin, "get", "--raw", "/readyz", check=False))
    if reachable and state.get("crds") and pids:
        # While the operator runs, it removes its finalizers (and the HPAs it made): the CRDs can then go.
        for kind in ("scaledobjects.keda.sh", "scaledjobs.keda.sh"):
            if kind in state["crds"]:
                _kubectl(admin, "delete", kind, "--all", "--all-namespaces", "--timeout=30s", check=False)
    for pid in pids:
        with contextlib.suppress(OSError):
            os.killpg(pid, signal.SIGTERM)
    stop_by = time.monotonic() + 10
    for pid in pids:
        while localcluster._alive(pid) and time.monotonic() < stop_by:
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, os.WNOHANG)
            time.sleep(0.1)
        if localcluster._alive(pid):
            with contextlib.suppress(OSError):
                os.killpg(pid, signal.SIGKILL)
    if reachable:
        if state.get("apiservice"):
            _kubectl(admin, "delete", "apiservice", APISERVICE, "--ignore-not-found", check=False)
            _kubectl(admin, "-n", NAMESPACE, "delete", "service", SERVICE, "--ignore-not-found", check=False)
        if state.get("rbac"):
            mod = module_dir()
            for rel in reversed(RBAC_FILES):
                _kubectl(admin, "delete", "--ignore-not-found", "-f", str(mod / rel), check=False)
        for crd in state.get("crds", []):
            _kubectl(admin, "delete", "crd", crd, "--ignore-not-found", "--wait=false", check=False)
        if state.get("namespace"):
            # Without the namespace controller it stays Terminating; that is the API server's business.
            _kubectl(admin, "delete", "namespace", NAMESPACE, "--ignore-not-found", "--wait=false", check=False)
    for name in ("kubeconfig", "state.json"):
        with contextlib.suppress(FileNotFoundError):
            (cluster_dir / "keda" / name).unlink()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("command", choices=["up", "down", "front-proxy"])
    parser.add_argument("--dir", type=Path, default=localcluster.DEFAULT_DIR)
    parser.add_argument("--kubeconfig", type=Path, default=None, help="an admin's (default: DIR/kubeconfig)")
    opts = parser.parse_args(argv)
    if opts.command == "up":
        start(opts.dir, opts.kubeconfig)
    elif opts.command == "down":
        stop(opts.dir)
        print("KEDA stopped")
    else:
        print(" ".join(front_proxy_flags(opts.dir)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
