"""Shared by the e2e tests: one `barge operator` process for the e2e package (two operators watching the
same cluster would both act on every job), and a vLLM stand-in that engine pools resolve to."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
import yaml
from tools import localcluster
from tools.localcluster import Cluster

from barge.emulator.profile import parse_profile
from barge.emulator.server import EmulatorThread
from tests.conftest import REFERENCE_CRDS, REPO, install_crds

SECRET = "sk-e2e-DO-NOT-LEAK-4f1c9a"
VLLM_MODEL = "meta-llama/Llama-3.1-8B-Instruct"
#: Tenants (namespace label barge.dev/tenant) that get only their own folder under the operator's workdir;
#: every other tenant may use the whole workdir (the older e2e tests put their files there).
TEAMS = ("acme", "globex")


def admin_policy(workdir: Path) -> dict[str, Any]:
    """The admin's policy for the e2e operator: the emulators on 127.0.0.1 are allowlisted (private addresses
    allowed for that host only: moto's endpoint_url and Azurite's BlobEndpoint are checked against it too),
    `localhost` is allowlisted by name but not for private addresses."""
    return {
        "storage": {
            "prefixes": [f"file://{workdir}/"],
            "tenants": {
                team: [f"file://{workdir}/{{tenant}}/", "s3://barge-{tenant}/", "az://barge-{tenant}/"]
                for team in TEAMS
            },
        },
        "endpoints": {"allow": [{"host": "127.0.0.1", "private": True}, {"host": "localhost"}]},
    }


def credential_secret(
    cluster: Cluster, namespace: str, name: str, data: dict[str, str], *, marked: bool = True
) -> None:
    """A Secret for Barge: only one labelled barge.dev/credential: "true" is ever read by the operator."""
    labels = {"barge.dev/credential": "true"} if marked else {}
    doc = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": name, "namespace": namespace, "labels": labels},
        "stringData": data,
    }
    cluster.run_kubectl("apply", "-f", "-", input=yaml.safe_dump(doc))


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Operator:
    """`barge operator` in a subprocess; restartable, its output kept for the leak check. `args` and `env` replace
    the defaults (watch everything, a SQLite ledger in `workdir`, the admin kubeconfig) where a test needs to."""

    def __init__(
        self,
        cluster: Cluster,
        workdir: Path,
        pool_endpoint: str,
        *,
        args: Sequence[str] = ("--all-namespaces",),
        env: Mapping[str, str] | None = None,
        name: str = "operator",
    ) -> None:
        self.cluster = cluster
        self.pool_endpoint = pool_endpoint
        self.workdir = workdir
        self.args = list(args)
        self.extra_env = dict(env or {})
        self.name = name
        self.port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None
        self.logs: list[Path] = []
        self.policy_sections: dict[str, Any] = {}
        """Sections added to `admin_policy` at the next start (a test restarts the operator with them)."""

    def start(self) -> None:
        log = self.workdir / f"{self.name}-{len(self.logs)}.log"
        self.logs.append(log)
        policy = self.workdir / "policy.yaml"
        policy.write_text(yaml.safe_dump({**admin_policy(self.workdir), **self.policy_sections}))
        env = {
            **os.environ,
            "KUBECONFIG": str(self.cluster.kubeconfig),
            "BARGE_LEDGER_URL": str(self.workdir / "l.db"),
            "BARGE_POLICY_FILE": str(policy),
            "BARGE_POLL_SECONDS": "0.5",
            "BARGE_MIN_BATCH_WINDOW": "0",
            "BARGE_MAX_SHARD_REQUESTS": "200",
            "BARGE_POOL_ENDPOINT_TEMPLATE": self.pool_endpoint,
            **self.extra_env,
        }
        with log.open("wb") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "barge.cli", "operator", *self.args, "--metrics-port", str(self.port)],
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        wait_for(lambda: self.healthy(), 30, "operator /healthz")

    def healthy(self) -> bool:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/healthz", timeout=1):
                return True
        except OSError:
            return False

    def metrics(self) -> str:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/metrics", timeout=5) as resp:
            return resp.read().decode()

    def kill(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()

    def output(self) -> str:
        return "".join(p.read_text(errors="replace") for p in self.logs)


def wait_for(check: Callable[[], Any], timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out waiting for {what}")
        time.sleep(0.25)


@pytest.fixture(scope="package")
def vllm() -> Iterator[EmulatorThread]:
    """A vLLM stand-in: every engine pool's endpoint resolves here (BARGE_POOL_ENDPOINT_TEMPLATE)."""
    emu = EmulatorThread(parse_profile({"sync": {"latencyMs": 20}}), vllm_model=VLLM_MODEL, max_num_seqs=4).start()
    yield emu
    emu.stop()


@pytest.fixture(scope="module")
def emulator() -> Iterator[EmulatorThread]:
    emu = EmulatorThread(
        parse_profile(
            {
                "batch": {
                    "processingSeconds": 2,
                    "cancelSeconds": 0.3,
                    "outcomes": {"server_error": 0.01, "refusal": 0.005},
                },
                "sync": {"latencyMs": 1},
            }
        )
    ).start()
    yield emu
    emu.stop()


@pytest.fixture(scope="package")
def operator(cluster: Cluster, tmp_path_factory: pytest.TempPathFactory, vllm: EmulatorThread) -> Iterator[Operator]:
    op = Operator(cluster, tmp_path_factory.mktemp("operator"), f"{vllm.url}/v1")
    op.start()
    yield op
    op.stop()


@contextlib.contextmanager
def own_control_plane(directory: Path, *, controllers: bool = False, barge_crds: bool = True) -> Iterator[Cluster]:
    """A control plane of one test module's own: for modules that run their own operators (which must never meet
    the package's `operator`, which watches every namespace of the session's cluster) or need
    kube-controller-manager (`controllers`), whose Deployment controller would undo the Deployment status other
    modules patch by hand. The upstream CRDs, and with `barge_crds` Barge's (a Helm test installs its own), are
    installed before the controllers start, so the garbage collector watches them from its first moment (CRDs
    added later are picked up at its next 30 s discovery)."""
    running = localcluster.up(directory)
    try:
        install_crds(running, *([REPO / "crds"] if barge_crds else []), *[p for p in REFERENCE_CRDS if p.exists()])
        if controllers:
            localcluster.up(directory, controllers=True)
        yield running
    finally:
        localcluster.down(directory)
