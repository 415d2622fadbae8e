"""An operator whose /metrics and /healthz port is taken exits at once, non-zero, naming the port (issue 28).

Before, Kopf's start-up activity failed to bind and was retried every 60 s: the process ran half-started and the
demo sat at Pending with no word of why.
"""

from __future__ import annotations

import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from barge.operator import ports

BARGE = [sys.executable, "-m", "barge.cli"]


@pytest.fixture
def taken_port() -> Iterator[int]:
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        yield int(holder.getsockname()[1])


def test_the_operator_exits_non_zero_naming_a_taken_metrics_port(taken_port: int, tmp_path: Path) -> None:
    env = {
        "PATH": "/usr/bin:/bin",
        "KUBECONFIG": str(tmp_path / "no-kubeconfig"),
        "BARGE_LEDGER_URL": str(tmp_path / "ledger.db"),
        "HOME": str(tmp_path),
    }
    proc = subprocess.Popen(
        [*BARGE, "operator", "--namespace", "t", "--metrics-port", str(taken_port)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
    )
    try:
        out, _ = proc.communicate(timeout=30)  # a bound, not a measurement: it used to retry every 60 s forever
    except subprocess.TimeoutExpired:
        proc.kill()
        out, _ = proc.communicate()
        pytest.fail(f"the operator was still running 30 s after its port was found taken:\n{out[-2000:]}")
    assert proc.returncode != 0
    assert f"cannot listen on port {taken_port}" in out
    assert "--metrics-port" in out


def test_listen_names_the_taken_port(taken_port: int) -> None:
    with pytest.raises(ports.PortUnavailable) as caught:
        ports.listen(taken_port)
    assert f"port {taken_port}" in str(caught.value)
    assert "in use" in str(caught.value).lower()


def test_listen_holds_a_free_port_for_the_server() -> None:
    sock = ports.listen(0)
    try:
        port = sock.getsockname()[1]
        with pytest.raises(ports.PortUnavailable):
            ports.listen(port)
    finally:
        sock.close()
