"""A real node for the local control plane: kubelet + kube-scheduler + containerd + runc, every Pod on loopback.

Why: the chart, the vLLM pool and the queue workers are judged by Pods that start, pass their probes, restart
and scale; a control plane with no node never runs one. `localcluster.up(node=True)` (`localcluster.py up --node`,
`make cluster-up NODE=1`) adds, from /work/shared/reference/NODE.md's measurements:

- to the API server: ServiceAccount admission (Pods get tokens), a client CA, `--authorization-mode=Node,RBAC`,
  NodeRestriction, a kubelet client certificate, and the front-proxy flags aggregated APIs (KEDA) need;
- to kube-controller-manager: node lifecycle, HPA (5 s sync), endpoints, EndpointSlices, Pod GC, PV binding;
- kube-scheduler and the kubelet, built from the same k8s.io/kubernetes module (localcluster.build);
- containerd (Debian's) with a configuration, a root and a socket of its own, runc, a CNI directory that holds a
  loopback-only conflist (the node is Ready, no interface is created), and a dead proxy on loopback so that a
  missing image is never pulled from anywhere: images are imported (the pause image built from the module's own
  C source, Barge's from `make image`);
- static hostPath PersistentVolumes owned by UID 10001 (hostPath ignores fsGroup), for the chart's ledger PVC.

The network rule: all traffic stays on 127.0.0.0/8. Pods must run with `hostNetwork: true` and
`dnsPolicy: ClusterFirstWithHostNet`; their resolv.conf says `nameserver 127.0.0.1`; there is no CNI bridge, no
kube-proxy, and no ClusterIP is ever routed to. Endpoints reject loopback addresses, so a Service in front of a
hostNetwork Pod has no endpoints here: tests address Pods at 127.0.0.1:<port>.

The kubelet's address: `--node-ip=127.0.0.1` is refused by the kubelet, so it runs with `--cloud-provider=external`
and this module acts as the cloud controller once: it sets the Node's addresses (InternalIP 127.0.0.1) and removes
the `uninitialized` taint.

Teardown (`stop`) leaves nothing behind: workloads deleted while the kubelet runs, the kubelet stopped, every
container and sandbox removed, every mount under the node's directory unmounted, the scheduler and containerd
(and its shims) stopped, the cgroups the kubelet made removed, and the sysctls it changed restored. One node per
machine (the kubelet owns the host's /kubepods cgroups): a second `up --node` is refused while one runs.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

NODE_NAME = "barge-node"
PAUSE_IMAGE = "registry.k8s.io/pause:3.10.1"  # kubeadm's constant for 1.34; containerd's sandbox_image
LOCK = Path("/run/barge-node.json")  # the one node of this machine: {"dir": ..., "kubelet": pid}
# The host sysctls the kubelet sets when it starts (protectKernelDefaults: false), restored on stop.
SYSCTLS = ("vm/overcommit_memory", "kernel/panic", "kernel/panic_on_oops", "net/ipv4/conf/all/route_localnet")
# The controllers a node needs on top of localcluster.CONTROLLERS.
NODE_CONTROLLERS = (
    "node-lifecycle-controller",
    "horizontal-pod-autoscaler-controller",
    "endpoints-controller",
    "endpointslice-controller",
    "pod-garbage-collector-controller",
    "persistentvolume-binder-controller",
    "persistentvolume-protection-controller",
    "disruption-controller",
)
CONTROLLER_ARGS = ("--horizontal-pod-autoscaler-sync-period=5s", "--node-monitor-grace-period=20s")
PERSISTENT_VOLUMES = 6  # hostPath PVs of PV_SIZE each
PV_SIZE = "5Gi"
APP_UID = 10001  # the chart's runAsUser; hostPath volumes are made theirs

CONTAINERD_TOML = """\
version = 2
root = "{dir}/root"
state = "{dir}/state"
[grpc]
  address = "{dir}/containerd.sock"
[ttrpc]
  address = "{dir}/containerd.sock.ttrpc"
[debug]
  address = ""
[metrics]
  address = ""
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{pause}"
  restrict_oom_score_adj = true
  disable_apparmor = true
  enable_selinux = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "{dir}/cni"
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
        BinaryName = "{runc}"
"""

LOOPBACK_CONFLIST = {"cniVersion": "0.4.0", "name": "loopback-only", "plugins": [{"type": "loopback"}]}

KUBELET_CONFIG = """\
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: 127.0.0.1
port: {port}
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: {healthz_port}
containerRuntimeEndpoint: unix://{containerd_sock}
cgroupDriver: cgroupfs
failCgroupV1: false
failSwapOn: false
oomScoreAdj: 0
makeIPTablesUtilChains: false
resolvConf: {resolv_conf}
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
serializeImagePulls: false
maxPods: 60
syncFrequency: 10s
fileCheckFrequency: 10s
nodeStatusUpdateFrequency: 5s
evictionHard: {{memory.available: "200Mi", nodefs.available: "2%", imagefs.available: "2%"}}
authentication:
  anonymous: {{enabled: false}}
  webhook: {{enabled: true}}
  x509: {{clientCAFile: {client_ca}}}
authorization: {{mode: Webhook}}
"""


@dataclass(frozen=True)
class NodePki:
    """The certificates a node adds to the control plane, made with openssl under <cluster>/pki/node."""

    dir: Path

    @property
    def ca(self) -> Path:
        return self.dir / "ca.crt"

    def cert(self, name: str) -> tuple[Path, Path]:
        return self.dir / f"{name}.crt", self.dir / f"{name}.key"


def _openssl(*args: str) -> None:
    subprocess.run(["openssl", *args], check=True, capture_output=True)


def _ca(pki: Path, name: str, subject: str) -> None:
    if (pki / f"{name}.crt").exists():
        return
    _openssl("genrsa", "-out", str(pki / f"{name}.key"), "2048")
    _openssl(
        "req", "-x509", "-new", "-key", str(pki / f"{name}.key"), "-subj", subject, "-days", "30",
        "-out", str(pki / f"{name}.crt"),
    )  # fmt: skip


def _signed(pki: Path, ca: str, name: str, subject: str) -> None:
    if (pki / f"{name}.crt").exists():
        return
    key, csr = pki / f"{name}.key", pki / f"{name}.csr"
    ext = pki / f"{name}.ext"
    ext.write_text(
        "basicConstraints=CA:FALSE\nkeyUsage=digitalSignature,keyEncipherment\nextendedKeyUsage=clientAuth\n"
    )
    _openssl("genrsa", "-out", str(key), "2048")
    _openssl("req", "-new", "-key", str(key), "-subj", subject, "-out", str(csr))
    _openssl(
        "x509", "-req", "-in", str(csr), "-CA", str(pki / f"{ca}.crt"), "-CAkey", str(pki / f"{ca}.key"),
        "-CAcreateserial", "-days", "30", "-extfile", str(ext), "-out", str(pki / f"{name}.crt"),
    )  # fmt: skip
    csr.unlink()
    ext.unlink()


def make_pki(cluster_dir: Path) -> NodePki:
    pki = cluster_dir / "pki" / "node"
    pki.mkdir(parents=True, exist_ok=True)
    _ca(pki, "ca", "/CN=barge-local-client-ca")
    _signed(pki, "ca", "kubelet", f"/O=system:nodes/CN=system:node:{NODE_NAME}")
    _signed(pki, "ca", "apiserver-kubelet-client", "/O=system:masters/CN=kube-apiserver-kubelet-client")
    _ca(pki, "front-proxy-ca", "/CN=barge-local-front-proxy-ca")
    _signed(pki, "front-proxy-ca", "front-proxy-client", "/CN=front-proxy-client")
    return NodePki(pki)


def apiserver_args(pki: NodePki) -> tuple[str, ...]:
    """What the API server needs for a kubelet and for aggregated APIs (ServiceAccount admission stays on)."""
    kubelet_crt, kubelet_key = pki.cert("apiserver-kubelet-client")
    proxy_crt, proxy_key = pki.cert("front-proxy-client")
    return (
        f"--client-ca-file={pki.ca}",
        "--authorization-mode=Node,RBAC",
        "--enable-admission-plugins=NodeRestriction",
        f"--kubelet-client-certificate={kubelet_crt}",
        f"--kubelet-client-key={kubelet_key}",
        "--kubelet-preferred-address-types=InternalIP",
        f"--requestheader-client-ca-file={pki.dir / 'front-proxy-ca.crt'}",
        "--requestheader-allowed-names=front-proxy-client",
        "--requestheader-extra-headers-prefix=X-Remote-Extra-",
        "--requestheader-group-headers=X-Remote-Group",
        "--requestheader-username-headers=X-Remote-User",
        f"--proxy-client-cert-file={proxy_crt}",
        f"--proxy-client-key-file={proxy_key}",
    )


def _state_path(cluster_dir: Path) -> Path:
    return cluster_dir / "node" / "state.json"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except OSError:
        return False
    return True


def claim_machine(cluster_dir: Path) -> None:
    """Refuse a second node on this machine (the kubelet owns the host's /kubepods cgroups)."""
    if LOCK.exists():
        held = json.loads(LOCK.read_text())
        if held.get("dir") != str(cluster_dir) and any(_alive(int(p)) for p in held.get("pids", [])):
            raise RuntimeError(f"a local node already runs from {held['dir']}: stop it first (localcluster.py down)")
    LOCK.write_text(json.dumps({"dir": str(cluster_dir), "pids": []}))


def _spawn(cmd: list[str], log: Path, env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
    with log.open("ab") as out:
        return subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, start_new_session=True, env=env)


def _record(cluster_dir: Path, **fields: object) -> None:
    path = _state_path(cluster_dir)
    state = json.loads(path.read_text()) if path.exists() else {}
    state.update(fields)
    path.write_text(json.dumps(state))
    if "pids" in fields:
        LOCK.write_text(json.dumps({"dir": str(cluster_dir), "pids": state["pids"]}))


def _wait(what: str, ok: object, timeout: float, log: Path | None = None) -> None:
    deadline = time.monotonic() + timeout
    while not ok():  # type: ignore[operator]
        if time.monotonic() > deadline:
            tail = log.read_text()[-3000:] if log and log.exists() else ""
            raise RuntimeError(f"{what} not ready after {timeout:.0f}s; {log or ''}\n{tail}")
        time.sleep(0.2)


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def build_pause(cache: Path, gomodcache: Path, k8s_version: str) -> Path:
    """The pause binary from the module's own C source (it cannot be pulled), static, cached."""
    out = cache / f"pause-{k8s_version}" / "pause"
    if out.exists():
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    source = gomodcache / f"k8s.io/kubernetes@v{k8s_version}" / "build" / "pause" / "linux" / "pause.c"
    subprocess.run(
        ["gcc", "-Os", "-static", f"-DVERSION=v{PAUSE_IMAGE.rsplit(':', 1)[1]}", "-o", str(out) + ".tmp", str(source)],
        check=True,
    )
    os.replace(str(out) + ".tmp", out)
    return out


def _pause_archive(pause: Path) -> Path:
    """The pause image as an OCI archive (podman, with tools/image.py's configuration), next to the binary."""
    archive = pause.parent / "pause.oci.tar"
    if archive.exists():
        return archive
    try:  # tools/image.py, beside this file
        from tools import image
    except ImportError:
        import image  # type: ignore[no-redef]

    env = image.podman_env()
    (pause.parent / "Containerfile").write_text(
        'FROM scratch\nCOPY pause /pause\nUSER 65535:65535\nENTRYPOINT ["/pause"]\n'
    )
    subprocess.run(
        ["podman", "build", "--quiet", "--network", "none", "-t", PAUSE_IMAGE, str(pause.parent)],
        env=env,
        check=True,
        capture_output=True,
    )
    subprocess.run(
        ["podman", "save", "--format", "oci-archive", "-o", str(archive) + ".tmp", PAUSE_IMAGE],
        env=env,
        check=True,
        capture_output=True,
    )
    os.replace(str(archive) + ".tmp", archive)
    return archive


def ctr(node_dir: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["ctr", "--address", str(node_dir / "containerd" / "containerd.sock"), "--namespace", "k8s.io", *args],
        check=check,
        capture_output=True,
        text=True,
        timeout=300,
    )


def import_image(node_dir: Path, archive: Path, base_name: str) -> None:
    ctr(node_dir, "images", "import", "--base-name", base_name, "--no-unpack=false", str(archive))


def _read_sysctls() -> dict[str, str]:
    values = {}
    for name in SYSCTLS:
        with contextlib.suppress(OSError):
            values[name] = (Path("/proc/sys") / name).read_text().strip()
    return values


def start(cluster_dir: Path, kubeconfig: Path, bins: dict[str, Path], images: dict[str, Path]) -> float:
    """Start the scheduler, containerd and the kubelet against the running control plane (started by
    localcluster.up with apiserver_args() and NODE_CONTROLLERS); import `images` ({base name: OCI archive});
    return the seconds until the node was Ready and schedulable."""
    started = time.monotonic()
    node_dir = cluster_dir / "node"
    node_dir.mkdir(parents=True, exist_ok=True)
    pki = NodePki(cluster_dir / "pki" / "node")
    _record(cluster_dir, sysctls=_read_sysctls(), pids=[])
    pids: list[int] = []

    scheduler = _spawn(
        [str(bins["kube-scheduler"]), f"--kubeconfig={kubeconfig}", "--leader-elect=false", "--secure-port=0"],
        node_dir / "kube-scheduler.log",
    )
    pids.append(scheduler.pid)
    _record(cluster_dir, pids=pids)

    containerd_dir = node_dir / "containerd"
    (containerd_dir / "cni").mkdir(parents=True, exist_ok=True)
    # Written before containerd starts: containerd 1.6 did not notice a file moved in later.
    (containerd_dir / "cni" / "10-loopback.conflist").write_text(json.dumps(LOOPBACK_CONFLIST))
    (containerd_dir / "config.toml").write_text(
        CONTAINERD_TOML.format(dir=containerd_dir, pause=PAUSE_IMAGE, runc=shutil.which("runc") or "/usr/sbin/runc")
    )
    dead_proxy = {
        "HTTP_PROXY": "http://127.0.0.1:9",
        "HTTPS_PROXY": "http://127.0.0.1:9",
        "NO_PROXY": "127.0.0.1,localhost,::1",
    }
    env = {
        k: v for k, v in os.environ.items() if k.upper() not in {"HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "ALL_PROXY"}
    }
    containerd = _spawn(
        ["containerd", "--config", str(containerd_dir / "config.toml")],
        node_dir / "containerd.log",
        env={**env, **dead_proxy, **{k.lower(): v for k, v in dead_proxy.items()}},
    )
    pids.append(containerd.pid)
    _record(cluster_dir, pids=pids)
    _wait("containerd", lambda: ctr(node_dir, "version", check=False).returncode == 0, 30, node_dir / "containerd.log")
    for base_name, archive in images.items():
        import_image(node_dir, archive, base_name)

    resolv = node_dir / "resolv.conf"
    resolv.write_text("nameserver 127.0.0.1\n")
    kubelet_dir = node_dir / "kubelet"
    kubelet_dir.mkdir(exist_ok=True)
    crt, key = pki.cert("kubelet")
    server = _server_of(kubeconfig)
    (node_dir / "kubelet.kubeconfig").write_text(
        "apiVersion: v1\nkind: Config\n"
        f"clusters:\n- name: local\n  cluster:\n    server: {server}\n"
        f"    certificate-authority: {cluster_dir / 'pki' / 'apiserver.crt'}\n"
        f"users:\n- name: kubelet\n  user:\n    client-certificate: {crt}\n    client-key: {key}\n"
        "contexts:\n- name: local\n  context: {cluster: local, user: kubelet}\ncurrent-context: local\n"
    )
    healthz_port = _free_port()
    (node_dir / "kubelet.yaml").write_text(
        KUBELET_CONFIG.format(
            port=_free_port(),
            healthz_port=healthz_port,
            containerd_sock=containerd_dir / "containerd.sock",
            resolv_conf=resolv,
            client_ca=pki.ca,
        )
    )
    kubelet = _spawn(
        [
            str(bins["kubelet"]),
            f"--config={node_dir / 'kubelet.yaml'}",
            f"--kubeconfig={node_dir / 'kubelet.kubeconfig'}",
            f"--root-dir={kubelet_dir}",
            f"--cert-dir={node_dir / 'kubelet-pki'}",
            f"--hostname-override={NODE_NAME}",
            "--cloud-provider=external",
            "--v=0",
        ],
        node_dir / "kubelet.log",
    )
    pids.append(kubelet.pid)
    _record(cluster_dir, pids=pids, kubelet=kubelet.pid, kubelet_healthz=f"http://127.0.0.1:{healthz_port}/healthz")

    kubectl = bins["kubectl"]

    def kc(*args: str, check: bool = True, input: str | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(kubectl), f"--kubeconfig={kubeconfig}", *args],
            check=check,
            capture_output=True,
            text=True,
            input=input,
            timeout=60,
        )

    def registered() -> bool:
        if kubelet.poll() is not None:
            raise RuntimeError(f"kubelet exited with {kubelet.returncode}; see {node_dir / 'kubelet.log'}")
        return kc("get", "node", NODE_NAME, check=False).returncode == 0

    _wait("node registration", registered, 90, node_dir / "kubelet.log")
    # The cloud controller's part, once: the node's address (the kubelet refuses a loopback --node-ip) and the
    # `uninitialized` taint an external cloud provider puts on a new node.
    kc(
        "patch", "node", NODE_NAME, "--subresource=status", "--type=merge", "-p",
        json.dumps({"status": {"addresses": [
            {"type": "InternalIP", "address": "127.0.0.1"}, {"type": "Hostname", "address": NODE_NAME}
        ]}}),
    )  # fmt: skip
    kc("taint", "node", NODE_NAME, "node.cloudprovider.kubernetes.io/uninitialized:NoSchedule-", check=False)

    def ready() -> bool:
        node = json.loads(kc("get", "node", NODE_NAME, "-o", "json").stdout)
        conditions = {c["type"]: c["status"] for c in node["status"].get("conditions", [])}
        return conditions.get("Ready") == "True" and not node["spec"].get("taints")

    _wait("node Ready and schedulable", ready, 120, node_dir / "kubelet.log")
    _persistent_volumes(node_dir, kc)
    return time.monotonic() - started


def _server_of(kubeconfig: Path) -> str:
    for line in kubeconfig.read_text().splitlines():
        if line.strip().startswith("server:"):
            return line.split(":", 1)[1].strip()
    raise RuntimeError(f"no server in {kubeconfig}")


def _persistent_volumes(node_dir: Path, kc: object) -> None:
    """Static hostPath PVs (no class) for PVCs that name no StorageClass; owned by the chart's UID."""
    items = []
    for index in range(PERSISTENT_VOLUMES):
        path = node_dir / "volumes" / f"pv{index}"
        path.mkdir(parents=True, exist_ok=True)
        os.chown(path, APP_UID, APP_UID)
        path.chmod(0o770)
        items.append(
            {
                "apiVersion": "v1",
                "kind": "PersistentVolume",
                "metadata": {"name": f"barge-local-pv{index}", "labels": {"barge.dev/local-node": "true"}},
                "spec": {
                    "capacity": {"storage": PV_SIZE},
                    "accessModes": ["ReadWriteOnce"],
                    "persistentVolumeReclaimPolicy": "Retain",
                    "hostPath": {"path": str(path), "type": "Directory"},
                },
            }
        )
    kc("apply", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List", "items": items}))  # type: ignore[operator]


def _mounts_under(path: Path) -> list[str]:
    prefix = str(path.resolve())
    found = []
    with open("/proc/self/mountinfo") as info:
        for line in info:
            mount_point = line.split()[4].replace("\\040", " ")
            if mount_point == prefix or mount_point.startswith(prefix + "/"):
                found.append(mount_point)
    return found


def _processes_naming(path: Path) -> list[int]:
    needle = str(path.resolve()).encode()
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or int(proc.name) == os.getpid():
            continue
        with contextlib.suppress(OSError):
            if needle in (proc / "cmdline").read_bytes():
                found.append(int(proc.name))
    return found


def leftovers(cluster_dir: Path) -> dict[str, list[str]]:
    """What a stopped node would have left behind: processes, mounts, cgroups (empty when stop() did its job)."""
    cgroups = [str(p) for p in Path("/sys/fs/cgroup").glob("*/kubepods*")]
    return {
        "processes": [str(p) for p in _processes_naming(cluster_dir)],
        "mounts": _mounts_under(cluster_dir),
        "cgroups": cgroups,
    }


def stop_processes(pids: list[int], grace: float = 10) -> None:
    """SIGTERM to each process group, SIGKILL to what is left after `grace` seconds."""
    for pid in pids:
        with contextlib.suppress(OSError):
            os.killpg(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    for pid in pids:
        while _alive(pid) and time.monotonic() < deadline:
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, os.WNOHANG)
            time.sleep(0.1)
        if _alive(pid):
            with contextlib.suppress(OSError):
                os.killpg(pid, signal.SIGKILL)
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)


def stop(cluster_dir: Path, kubeconfig: Path, kubectl: Path) -> None:
    """Tear the node down in the order that leaves nothing behind (see the module's docstring)."""
    path = _state_path(cluster_dir)
    if not path.exists():
        return
    state = json.loads(path.read_text())
    node_dir = cluster_dir / "node"
    kubelet = int(state.get("kubelet", 0))
    if kubelet and _alive(kubelet):
        # Workloads first, while the kubelet can still stop their containers cleanly.
        subprocess.run(
            [str(kubectl), f"--kubeconfig={kubeconfig}", "delete",
             "deployments,statefulsets,daemonsets,replicasets,jobs", "--all", "--all-namespaces", "--wait=false"],
            check=False, capture_output=True, timeout=60,
        )  # fmt: skip
        subprocess.run(
            [str(kubectl), f"--kubeconfig={kubeconfig}", "delete", "pods", "--all", "--all-namespaces",
             "--grace-period=5", "--timeout=40s"],
            check=False, capture_output=True, timeout=60,
        )  # fmt: skip
        stop_processes([kubelet])
    if (node_dir / "containerd" / "containerd.sock").exists():
        for kind in ("tasks", "containers"):
            listed = ctr(node_dir, kind, "ls", "-q", check=False).stdout.split()
            for item in listed:
                if kind == "tasks":
                    ctr(node_dir, "tasks", "kill", "-s", "SIGKILL", item, check=False)
                    time.sleep(0.2)
                    ctr(node_dir, "tasks", "delete", "-f", item, check=False)
                else:
                    ctr(node_dir, "containers", "delete", item, check=False)
    for mount_point in sorted(_mounts_under(node_dir / "kubelet"), key=len, reverse=True):
        subprocess.run(["umount", "-l", mount_point], check=False, capture_output=True)
    stop_processes([int(p) for p in state.get("pids", []) if int(p) != kubelet])
    # containerd's shims outlive containerd by design; they name its socket on their command line.
    stop_processes(_processes_naming(node_dir), grace=5)
    for mount_point in sorted(_mounts_under(node_dir), key=len, reverse=True):
        subprocess.run(["umount", "-l", mount_point], check=False, capture_output=True)
    for name, value in state.get("sysctls", {}).items():
        with contextlib.suppress(OSError):
            (Path("/proc/sys") / name).write_text(value)
    _remove_cgroups()
    path.unlink()
    with contextlib.suppress(OSError):
        if json.loads(LOCK.read_text()).get("dir") == str(cluster_dir):
            LOCK.unlink()


def _remove_cgroups() -> None:
    """The kubelet's /kubepods (and its QoS children) in every cgroup v1 hierarchy, deepest first, once empty."""
    for root in Path("/sys/fs/cgroup").glob("*/kubepods*"):
        dirs = sorted((p for p in root.rglob("*") if p.is_dir()), key=lambda p: len(p.parts), reverse=True)
        for directory in [*dirs, root]:
            with contextlib.suppress(OSError):
                directory.rmdir()
