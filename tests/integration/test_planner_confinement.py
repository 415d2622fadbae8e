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
import sys
from barge.batch import planner_env
c = planner_env.confine()
if not c.landlock_abi:
    print("no-landlock"); sys.exit(0)
import fractions, email.mime.text  # imports after confinement still work
for attempt in (lambda: open({str(token)!r}).read(), lambda: open({str(tmp_path / "out")!r}, "w"),
                lambda: open("/proc/1/environ", "rb").read()):
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
