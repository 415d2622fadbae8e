"""REVIEW-3 M8 (probe A.21): a planner process renders tenants' templates, so one sandbox escape must not hand over
the operator's rights. A planner forked by a real planner server (batch/zygote.py) gets no secret of the
operator's environment and no new privileges; confined (batch/planner_env.py), it reads nothing outside
Python's own files, such as the ServiceAccount token or the ledger's SQLite file, and writes nowhere."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from dataclasses import asdict
from pathlib import Path
from typing import Any

import orjson
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


#: What a template that escaped the sandbox could do once it runs: patched in where a line renders, in a real
#: planner server (zygote.BOOT with this first), so the attempts run inside a forked planner after its setup.
ESCAPE = """
import json, os, socket, sys
from barge.batch import planner
_admit = planner.admit_line
def _attempt(call):
    try:
        call()
        return "allowed"
    except PermissionError:
        return "EPERM"
    except OSError as exc:
        return f"errno {{exc.errno}}"
def _exec():
    pid = os.fork()  # a fork of the planner (same filter): a successful exec must not replace the planner
    if pid == 0:
        try:
            os.execv(sys.executable, [sys.executable, "-c", "raise SystemExit(7)"])
        except PermissionError:
            os._exit(100)
        except BaseException:
            os._exit(101)
    code = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
    if code == 100:
        raise PermissionError("execv")
    if code != 7:
        raise OSError(code, "exec failed otherwise")
def escaped(*args, **kwargs):
    said = {{
        "inet": _attempt(lambda: socket.socket(socket.AF_INET, socket.SOCK_DGRAM).close()),
        "tcp": _attempt(lambda: socket.socket(socket.AF_INET, socket.SOCK_STREAM).close()),
        "unix": _attempt(lambda: socket.socket(socket.AF_UNIX).connect({unix!r})),
        "pair": _attempt(lambda: socket.socketpair()),
        "exec": _attempt(_exec),
    }}
    sys.stderr.write(json.dumps(said) + "\\n")
    sys.stderr.flush()
    return _admit(*args, **kwargs)
planner.admit_line = escaped
"""


def _escaped_planner(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, profile: str = "") -> tuple[Any, ...]:
    """Start a planner server whose boot runs `profile` then ESCAPE, plan one line in one of its planners: what the
    escaped template's attempts said, the planner's /proc status while it ran, and its answer frame's parts."""
    import json
    import socket

    from barge.batch import planner

    path = str(tmp_path / "operator.sock")
    listener = socket.socket(socket.AF_UNIX)
    listener.bind(path)
    listener.listen()
    monkeypatch.setattr(zygote, "BOOT", profile + ESCAPE.format(unix=path) + zygote.BOOT)
    server = zygote.Server()
    spec = {
        "provider": {"type": "anthropic", "model": "claude-haiku-4-5", "secretRef": {"name": "k"}},
        "input": {"url": "unused"},
        "output": {"url": "unused"},
        "request": {"template": "Say {{ text | upper }}", "maxTokens": 50},
    }
    job = planner.PlanInput(spec, "2026-12-01", "t", "claude-haiku-4-5", "anthropic")
    header = {"job": asdict(job), "limits": asdict(planner.PlanLimits())}
    line = b'{"id": "a", "text": "hello"}'

    async def run() -> tuple[Any, ...]:
        child = await server.start()
        try:
            child.stdin.write(orjson.dumps(header) + b"\n" + planner.FRAME.pack(1, len(line)) + line)
            await child.stdin.drain()
            said = json.loads(await asyncio.wait_for(child.stderr.readline(), 60) or b"{}")
            status = await asyncio.to_thread(Path(f"/proc/{child.pid}/status").read_text)  # between two lines
            child.stdin.close()
            lengths = planner.ROWS.unpack(await child.stdout.readexactly(planner.ROWS.size))
            parts = [await child.stdout.readexactly(n) if n else b"" for n in lengths]
            assert await child.wait() == 0
            return said, status, *parts
        finally:
            child.kill()
            await child.wait()
            child.close()

    try:
        return asyncio.run(run())
    finally:
        server.stop()
        listener.close()


def test_an_escaped_template_can_open_no_socket_and_exec_nothing(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """REVIEW-3 M8, the seccomp part: inside a forked planner, after its setup, socket() of any family, a Unix
    socket connect by path and execv fail with EPERM (a visible error, not a killed planner), and the planner still
    renders the template and answers its frame."""
    said, status, rows, _, text, error = _escaped_planner(monkeypatch, tmp_path)
    assert said == {"inet": "EPERM", "tcp": "EPERM", "unix": "EPERM", "pair": "EPERM", "exec": "EPERM"}, said
    assert "Seccomp:\t2" in status  # 2: a filter (SECCOMP_MODE_FILTER)
    assert "NoNewPrivs:\t1" in status
    assert error == b""
    assert orjson.loads(rows)[0][3] == "pending"
    assert b"Say HELLO" in text


#: A container runtime's profile that forbids installing seccomp filters (prctl(PR_SET_SECCOMP) -> EINVAL, as a
#: kernel without CONFIG_SECCOMP_FILTER answers), installed first in the planner server: x86_64 numbers.
NO_FILTERS_PROFILE = """
import ctypes
class F(ctypes.Structure):
    _fields_ = (("code", ctypes.c_uint16), ("jt", ctypes.c_uint8), ("jf", ctypes.c_uint8), ("k", ctypes.c_uint32))
class P(ctypes.Structure):
    _fields_ = (("len", ctypes.c_ushort), ("filter", ctypes.POINTER(F)))
code = [(0x20, 0, 0, 0), (0x15, 0, 3, 157), (0x20, 0, 0, 16), (0x15, 0, 1, 22), (0x06, 0, 0, 0x50000 | 22),
        (0x06, 0, 0, 0x7FFF0000)]  # ld nr; prctl? ld arg0; PR_SET_SECCOMP? EINVAL; allow
libc = ctypes.CDLL(None, use_errno=True)
assert libc.prctl(38, 1, 0, 0, 0) == 0
assert libc.prctl(22, 2, ctypes.byref(P(len(code), (F * len(code))(*(F(*c) for c in code)))), 0, 0) == 0
"""


def test_where_filters_are_refused_the_planner_goes_on_and_the_operator_is_told_once(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    """Which confinements applied, where seccomp cannot be installed: no filter (sockets stay open), but no new
    privileges and the scrubbed environment hold, the planner renders as before, and the server warns once."""
    import platform

    if platform.machine() != "x86_64":
        pytest.skip("the runtime profile above uses x86_64 syscall numbers")
    said, status, rows, _, text, error = _escaped_planner(monkeypatch, tmp_path, NO_FILTERS_PROFILE)
    assert said["inet"] == "allowed", said  # the planner's own filter did not apply
    assert said["exec"] == "allowed", said
    assert "NoNewPrivs:\t1" in status
    assert orjson.loads(rows)[0][3] == "pending"
    assert b"Say HELLO" in text
    assert error == b""
    warned = [line for line in capfd.readouterr().err.splitlines() if "without a seccomp filter" in line]
    assert len(warned) == 1, warned
    assert "EINVAL" in warned[0]
