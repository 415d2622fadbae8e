"""Fixtures shared by every test tier.

`cluster` starts a real etcd + kube-apiserver on loopback (binaries built from Go modules and cached under
~/.cache/barge/bin) once per session, installs Barge's CRDs and the upstream KEDA, Prometheus Operator and
Gateway API Inference Extension CRDs from tests/upstream_crds (copied from those projects), and stops everything
at the end.
Set BARGE_TEST_KUBECONFIG to reuse a running control plane instead (e.g. one from `make cluster-up`).
"""

from __future__ import annotations

import json
import os
import tempfile
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from tools import localcluster, pgserver

from barge import sharding
from barge.emulator.profile import parse_profile
from barge.emulator.server import EmulatorThread

REPO = Path(__file__).resolve().parent.parent
UPSTREAM_CRDS = REPO / "tests" / "upstream_crds"  # in the repo, so tests never depend on where the clone lives
REFERENCE_CRDS = [UPSTREAM_CRDS / d for d in ("keda", "prometheus-operator", "gateway-api-inference-extension")]


#: The Go builds a test may need beyond the control plane and the dev tools (make lint builds those). The node's
#: tests run first (kubelet + kube-scheduler build in ~2 min of `.ci/run`'s background build, and the node's
#: modules are the longest unit of work: first, so the other worker's tests run beside them), then every unmarked
#: test, then those marked argocd, then keda (built beside the first half of the tests; localcluster.GROUPS).
TOOL_GROUPS = ("argocd", "keda", "node")
ORDER = {"node": -1, "argocd": 1, "keda": 2}
NODE_TESTS = "tests/node/"


def _tool_groups(item: pytest.Item) -> list[str]:
    groups = [g for mark in item.iter_markers("tools") for g in mark.args]
    unknown = set(groups) - set(TOOL_GROUPS)
    if unknown:
        raise pytest.UsageError(f"{item.nodeid}: unknown tools group(s) {sorted(unknown)}; known: {TOOL_GROUPS}")
    return groups


def _order(item: pytest.Item) -> tuple[int, int]:
    """(its place, and within the node's tests: those needing KEDA last, as KEDA's build is the longest)."""
    last = max((ORDER[g] for g in _tool_groups(item)), default=0)
    return (ORDER["node"] if item.nodeid.startswith(NODE_TESTS) else last, last)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The order above (a stable sort: every module's tests stay together and in their order)."""
    items.sort(key=_order)


@pytest.hookimpl(optionalhook=True)  # pytest-xdist's hook: `make test` runs the suite in parallel workers
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """With `--dist loadscope`: a module is one unit of work (its fixtures start once) and all of tests/node one,
    because one machine has one node. Units go to the workers in the order above (`--no-loadscope-reorder`).
    (Not `--dist loadgroup` with xdist_group marks: pytest 9.2's structured node ids drop its group suffix, and
    the tests would silently spread: pytest-dev/pytest-xdist#1386.)"""
    if config.getvalue("dist") != "loadscope":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class ModuleScheduling(LoadScopeScheduling):  # type: ignore[misc]
        def _split_scope(self, nodeid: str) -> str:
            return NODE_TESTS if nodeid.startswith(NODE_TESTS) else nodeid.split("::", 1)[0]

    return ModuleScheduling(config, log)


@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    """Build (or wait for the build of) what a `tools`-marked test needs before pytest-timeout arms the test's
    timer: a cold argocd build is ~15-30 min on 2 cores, and in `.ci/run` another process may hold the build's
    lock while it builds them beside the tests (localcluster._go_build waits on it)."""
    for group in _tool_groups(item):
        localcluster.GROUPS[group]()  # keda's includes its adapter relinked to a loopback metrics bind
    yield


def _wait_established(cluster: localcluster.Cluster, names: list[str]) -> None:
    deadline = time.monotonic() + 60
    for name in names:
        while True:
            out = cluster.run_kubectl("get", "crd", name, "-o", "json", check=False)
            if out.returncode == 0:
                conds = (json.loads(out.stdout).get("status") or {}).get("conditions") or []
                if any(c["type"] == "Established" and c["status"] == "True" for c in conds):
                    break
            if time.monotonic() > deadline:
                raise TimeoutError(f"CRD {name} not Established: {out.stdout or out.stderr}")
            time.sleep(0.2)


def install_crds(cluster: localcluster.Cluster, *paths: Path) -> list[str]:
    names = []
    for path in paths:
        out = cluster.run_kubectl("apply", "--server-side", "-f", str(path), "-o", "name")
        names += [line.split("/", 1)[1] for line in out.stdout.split()]
    _wait_established(cluster, names)
    return names


@pytest.fixture(scope="session")
def cluster() -> Iterator[localcluster.Cluster]:
    reuse = os.environ.get("BARGE_TEST_KUBECONFIG")
    if reuse:
        running = localcluster.Cluster(Path(reuse).parent, "", Path(reuse), localcluster.build(argocd=False)["kubectl"])
        install_crds(running, REPO / "crds", *[p for p in REFERENCE_CRDS if p.exists()])
        yield running
        return
    with tempfile.TemporaryDirectory(prefix="barge-cluster-") as tmp:
        started = time.monotonic()
        running = localcluster.up(Path(tmp) / "cluster")
        try:
            install_crds(running, REPO / "crds", *[p for p in REFERENCE_CRDS if p.exists()])
            print(f"\ncontrol plane + CRDs ready in {time.monotonic() - started:.1f}s")
            yield running
        finally:
            localcluster.down(Path(tmp) / "cluster")


@pytest.fixture
def namespace(cluster: localcluster.Cluster, request: pytest.FixtureRequest) -> str:
    """A fresh namespace per test (namespaces never finish deleting here: no controllers run)."""
    name = f"t-{request.node.name.lower().replace('_', '-')[:40].strip('-')}-{os.urandom(2).hex()}"
    name = "".join(ch if ch.isalnum() or ch == "-" else "-" for ch in name)
    cluster.run_kubectl("create", "namespace", name)
    return name


def kubectl_json(cluster: localcluster.Cluster, *args: str) -> dict[str, object]:
    out = cluster.run_kubectl(*args, "-o", "json")
    return json.loads(out.stdout)  # type: ignore[no-any-return]


# --- the provider emulator, in-process on a background thread -------------------------------------------
Factory = Callable[..., EmulatorThread]


@pytest.fixture
def start_emulator() -> Iterator[Factory]:
    """Start an emulator with a profile given as the YAML-shaped dict (processing 0.4 s unless said)."""
    running: list[EmulatorThread] = []

    def start(profile: dict[str, Any] | None = None) -> EmulatorThread:
        data = {"batch": {"processingSeconds": 0.4}, "sync": {"latencyMs": 1}}
        for key, value in (profile or {}).items():
            data[key] = {**data.get(key, {}), **value} if isinstance(value, dict) else value
        emu = EmulatorThread(parse_profile(data)).start()
        running.append(emu)
        return emu

    yield start
    for emu in running:
        emu.stop()


@pytest.fixture
def emulator(start_emulator: Factory) -> EmulatorThread:
    return start_emulator()


def state(emu: EmulatorThread) -> dict[str, Any]:
    """The emulator's state. A Vertex Gemini batch knows its lines by position (`line1`, ...): where its lines
    carry labels, `custom_ids` are read from them as the adapter reads them back (Barge's custom id)."""
    with urllib.request.urlopen(f"{emu.url}/_emulator/state", timeout=5) as resp:  # noqa: S310 - loopback
        found: dict[str, Any] = json.loads(resp.read())
    for batch in found["batches"]:
        if "labels" in batch:
            from barge.providers.vertex_provider import id_from_labels

            pairs = zip(batch["labels"], batch["custom_ids"], strict=True)
            batch["custom_ids"] = [id_from_labels(labels) or cid for labels, cid in pairs]
    return found


def wait_until(predicate: Callable[[], Any], timeout: float = 10.0) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError("condition not met in time")
        time.sleep(0.05)


# --- PostgreSQL from Debian's packages, a throwaway cluster per session ---------------------------------------
@pytest.fixture(scope="session")
def postgres_url() -> Iterator[str]:
    try:
        pgserver.bindir()
    except FileNotFoundError as exc:
        pytest.fail(f"{exc} (.ci/run does)")
    with pgserver.postgres(fsync=False) as url:
        yield url


def fresh_database(postgres_url: str, prefix: str = "t") -> str:
    """A database of its own in the session's PostgreSQL (its URL): nothing else writes there."""
    name = f"{prefix}_{os.urandom(4).hex()}"
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}")  # the name is ours: hex only
    return postgres_url.rsplit("/", 1)[0] + f"/{name}"


@pytest.fixture(params=["sqlite", "postgresql"])
def ledger_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A fresh ledger on each backend: a SQLite file, then a database of its own on the real PostgreSQL."""
    if request.param == "sqlite":
        return str(tmp_path / "ledger.db")
    return fresh_database(request.getfixturevalue("postgres_url"))


def free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_for_port(port: int, process: Any, what: str, timeout: float) -> None:
    """Until something accepts connections on the port (or the process died, or time ran out)."""
    import socket

    deadline = time.monotonic() + timeout
    while True:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            if time.monotonic() > deadline or process.poll() is not None:
                raise RuntimeError(f"{what} did not start") from None
            time.sleep(0.2)


# --- redis-server from Debian's packages --------------------------------------------------------------------
@pytest.fixture(scope="session")
def redis_url() -> Iterator[str]:
    import shutil
    import subprocess

    binary = shutil.which("redis-server")
    if binary is None:
        pytest.fail("redis-server not found: install Debian's redis-server package (.ci/run does)")
    port = free_port()
    workdir = tempfile.mkdtemp(prefix="barge-redis-")
    server = subprocess.Popen(
        [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", workdir],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_for_port(port, server, "redis-server", 20)
        yield f"redis://127.0.0.1:{port}/0"
    finally:
        server.terminate()
        server.wait(10)
        shutil.rmtree(workdir, ignore_errors=True)


# --- rabbitmq-server from Debian's packages, a throwaway node ----------------------------------------------
@pytest.fixture(scope="session")
def rabbitmq_url() -> Iterator[str]:
    import shutil
    import signal
    import subprocess

    if shutil.which("rabbitmq-server") is None:
        pytest.fail("rabbitmq-server not found: install Debian's rabbitmq-server package (.ci/run does)")

    port, dist, epmd = free_port(), free_port(), free_port()
    base = Path(tempfile.mkdtemp(prefix="barge-rmq-"))
    (base / "mnesia").mkdir()
    (base / "log").mkdir()
    (base / "plugins").write_text("[].")
    (base / "rabbitmq.conf").write_text(f"listeners.tcp.default = 127.0.0.1:{port}\nloopback_users = none\n")
    if os.geteuid() == 0:  # the Debian wrapper drops to the rabbitmq user
        subprocess.run(["chown", "-R", "rabbitmq:rabbitmq", str(base)], check=False)
        base.chmod(0o755)
    env = {
        **os.environ,
        "RABBITMQ_NODENAME": f"barge-{port}@localhost",
        "RABBITMQ_NODE_PORT": str(port),
        "RABBITMQ_DIST_PORT": str(dist),
        "RABBITMQ_MNESIA_BASE": str(base / "mnesia"),
        "RABBITMQ_LOG_BASE": str(base / "log"),
        "RABBITMQ_ENABLED_PLUGINS_FILE": str(base / "plugins"),
        "RABBITMQ_CONFIG_FILE": str(base / "rabbitmq"),
        "RABBITMQ_PID_FILE": str(base / "pid"),
        "HOME": str(base),
        "ERL_EPMD_PORT": str(epmd),
    }
    server = subprocess.Popen(
        ["rabbitmq-server"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True
    )
    try:
        wait_for_port(port, server, "rabbitmq-server", 90)
        yield f"amqp://guest:guest@127.0.0.1:{port}/"
    finally:
        import contextlib

        # The Debian wrapper runs the node as the rabbitmq user in its own session: stop it by name.
        subprocess.run(
            ["rabbitmqctl", "-n", env["RABBITMQ_NODENAME"], "stop"],
            env=env,
            capture_output=True,
            timeout=60,
            check=False,
        )
        with contextlib.suppress(ProcessLookupError):
            os.killpg(server.pid, signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            server.wait(30)
        subprocess.run(["pkill", "-f", f"barge-{port}@localhost"], check=False)
        epmd_bin = shutil.which("epmd") or next(iter(sorted(Path("/usr/lib/erlang").glob("erts-*/bin/epmd"))), None)
        if epmd_bin:  # the epmd this node started, on its own port
            subprocess.run(
                [str(epmd_bin), "-kill"],
                env={**os.environ, "ERL_EPMD_PORT": str(epmd)},
                capture_output=True,
                check=False,
            )
        shutil.rmtree(base, ignore_errors=True)


def namespace_of_shard(shard: int, count: int, prefix: str) -> str:
    """A fresh namespace name, `<prefix>-<6 hex>`, that hashes to `shard` of `count` (barge/sharding.py)."""
    while True:
        name = f"{prefix}-{os.urandom(3).hex()}"
        if sharding.owner(name, count) == shard:
            return name
