"""REVIEW-3 M8 (probe A.21): a planner process renders tenants' templates, so one sandbox escape must not hand over
the operator's rights. A planner forked by a real planner server (batch/zygote.py) gets no secret of the
operator's environment and no new privileges; confined (batch/planner_env.py), it reads nothing outside
Python's own files, such as the ServiceAccount token or the ledger's SQLite file, and writes nowhere."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path

import pytest

from barge.batch import zygote

SECRETS = {
    "BARGE_LEDGER_URL": "postgresql://barge:S3CRET-LEDGER-PASSWORD@ledger:5432/barge",
    "KUBERNETES_SERVICE_HOST": "10.96.0.1",
    "KUBERNETES_SERVICE_PORT": "443",
    "ANTHROPIC_API_KEY": "sk-ant-secret",
    "OPENAI_API_KEY": "sk-secret",
    "AWS_SECRET_ACCESS_KEY": "aws-secret",
    "AZURE_STORAGE_KEY": "azure-secret",
    "HTTPS_PROXY": "http://proxy.internal:3128",
}


def test_a_forked_planner_gets_no_secret_and_no_new_privileges(monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in SECRETS.items():
        monkeypatch.setenv(name, value)
    server = zygote.Server()  # a server of its own, started with this environment

    def read(pid: int) -> tuple[bytes, str]:
        return Path(f"/proc/{pid}/environ").read_bytes(), Path(f"/proc/{pid}/status").read_text()

    async def inspect() -> tuple[bytes, str]:
        planner = await server.start()
        try:
            return read(planner.pid)
        finally:
            planner.kill()
            await planner.wait()
            planner.close()

    try:
        environ, status = asyncio.run(inspect())
    finally:
        server.stop()
    names = {e.split(b"=", 1)[0].decode() for e in environ.split(b"\0") if e}
    assert not names & set(SECRETS), f"the planner inherited {sorted(names & set(SECRETS))}"
    assert b"S3CRET" not in environ
    assert "NoNewPrivs:\t1" in status


def test_a_confined_process_reads_only_pythons_files(tmp_path: Path) -> None:
    """What a template that escaped the sandbox could then still do (confine() in a fresh interpreter)."""
    from barge.batch import planner_env  # new with the fix: the first test runs against the code before it too

    token = tmp_path / "serviceaccount" / "token"
    token.parent.mkdir()
    token.write_text("eyJhbGciOiJSUzI1NiJ9.sa-token")
    script = f"""
import socket, sys
from barge.batch import planner_env
server = socket.create_server(("127.0.0.1", 0))  # listening before the confinement: still not reachable
c = planner_env.confine()
if not c.landlock_abi:
    print("no-landlock"); sys.exit(0)
import fractions, email.mime.text  # imports after confinement still work
for attempt in (lambda: open({str(token)!r}).read(), lambda: open({str(tmp_path / "out")!r}, "w"),
                lambda: open("/proc/1/environ", "rb").read(),
                lambda: socket.create_connection(server.getsockname(), timeout=5)):
    try:
        attempt()
        print("READ"); sys.exit(1)
    except PermissionError:
        pass
print("denied")
"""
    env = planner_env.server_env(os.environ)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60, env=env)
    if out.stdout.strip() == "no-landlock":
        pytest.skip("this kernel has no Landlock: environment and no_new_privs still hold")
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.stdout.strip() == "denied"
    assert not (tmp_path / "out").exists()


class Liar:
    """A planner process as a compromised child would be: its first frame header claims 3 GiB of rows."""

    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self._proc = proc
        self.stdin, self.stdout, self.stderr = proc.stdin, proc.stdout, proc.stderr

    @property
    def returncode(self) -> int | None:
        return self._proc.returncode

    def kill(self) -> None:
        self._proc.kill()

    async def wait(self) -> int:
        return await self._proc.wait()

    def close(self) -> None:
        pass


def test_the_parent_does_not_trust_a_planners_frame_lengths(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """One frame header used to make the parent wait for (and buffer) up to 4 GiB per part: now a frame larger
    than the child's own address space ends the plan."""
    from barge.batch import planner
    from barge.batch.render import PlanError
    from barge.ledger import Ledger

    script = "import struct, sys; sys.stdout.buffer.write(struct.pack('!IIII', 3 << 30, 0, 0, 0)); sys.stdout.flush()"

    async def start(*_: object) -> Liar:
        pipe = asyncio.subprocess.PIPE
        return Liar(
            await asyncio.create_subprocess_exec(sys.executable, "-c", script, stdin=pipe, stdout=pipe, stderr=pipe)
        )

    monkeypatch.setattr(zygote.SERVER, "start", start)
    ledger = Ledger(f"sqlite:///{tmp_path / 'l.db'}")
    ledger.ensure_job("ns/j/u", "h", tenant="t", model="claude-haiku-4-5")
    spec = {
        "provider": {"type": "anthropic", "model": "claude-haiku-4-5", "secretRef": {"name": "k"}},
        "input": {"url": "unused"},
        "output": {"url": "unused"},
        "request": {"template": "{{ text }}", "maxTokens": 50},
    }
    what = planner.PlanInput(spec, "2026-12-01", "t", "claude-haiku-4-5", "anthropic")
    with pytest.raises(PlanError, match="frame of 3221225472 bytes"):
        asyncio.run(planner.plan("ns/j/u", what, lambda: iter([(1, b'{"id": "a", "text": "x"}')]), ledger))
