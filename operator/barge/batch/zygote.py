"""One forking server for planner processes: every job still plans in a process of its own (planner.py says
why), but that process is a fork of a server that has already imported what planning needs.

Why: a planner started from scratch spent 0.3-0.45 s of CPU on the interpreter and its imports (pydantic, the
API models, Jinja) before it read a line. At 2,000 jobs of 200 items that was ~900 CPU seconds on 2 cores, three
times the operator's own (issue 14 point 3). A fork of the warm server costs milliseconds.

Not `multiprocessing`'s forkserver: it runs the parent's `__main__` again in every child and pickles a target;
here a child runs `planner.child` on three pipes and nothing else.

Protocol: the parent holds one Unix socket (SOCK_SEQPACKET) to the server. For each planner it makes four pipes,
the child's stdin, stdout and stderr and a status pipe, and sends the child's ends with SCM_RIGHTS. The server
forks; the child makes them its fds 0, 1 and 2 and runs `planner.child`; the server writes the child's pid on the
status pipe, then, when it reaps the child, its exit code as subprocess gives it (-N for signal N). Only the
server kills a child (message `k` + pid), and only one it has not reaped yet, so a pid is never reused under a
kill. The server runs at nice 10, set before its imports, and ends when the parent's socket closes.

Memory: a planner is forked only once its address-space limit fits the container's memory beside the operator's
reserve and the planners already running (batch/memory.py), and it is given back when the planner is reaped.
The server sets its `oom_score_adj` to 1000 before it forks, so every planner has it from its first instruction:
when the cgroup runs out of memory after all, the kernel kills a planner (that job re-plans) or the server (started
again at the next plan) before the operator, which every tenant's jobs need (REVIEW-3 H8).
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import io
import os
import select
import signal
import socket
import struct
import subprocess
import sys
import threading
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, NoReturn

from barge.batch import memory, planner_env, seccomp

PID = struct.Struct("!i")
BOOT = (
    "import os, sys, contextlib\n"
    "with contextlib.suppress(OSError):\n"
    "    os.nice(10)\n"
    "from barge.batch.zygote import serve\n"
    "serve(int(sys.argv[1]))\n"
)
#: The server's and its children's oom_score_adj: the kernel's first choice when the container runs out of memory.
OOM_SCORE_ADJ = 1000
PIPE_LIMIT = 1 << 20  # frames of rows are read whole (readexactly); this only bounds buffering ahead


# --- the server side ------------------------------------------------------------------------------------------
def serve(fd: int) -> None:
    """The server's loop: fork a planner per request, report pids and exit codes, end with the parent's socket."""
    from barge.batch import planner  # the imports every child shares

    with contextlib.suppress(OSError), open("/proc/self/oom_score_adj", "w") as adj:  # raising it needs no right
        adj.write(str(OOM_SCORE_ADJ))  # inherited by every child
    planner_env.confine()  # no new privileges, Python's files only: inherited by every planner (REVIEW-3 M8)
    seccomp.probe()  # each planner installs the filter itself after its setup: warned here once if it cannot

    sock = socket.socket(fileno=fd)
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_r, False)
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a terminal's Ctrl-C reaches the group; the socket ends us
    reports: dict[int, int] = {}  # pid -> write end of its status pipe
    poller = select.poll()  # not select(): the socket keeps the parent's fd number, past 1023 in a busy parent
    for watched in (sock.fileno(), wake_r):
        poller.register(watched, select.POLLIN)
    while True:
        ready = {fd for fd, _ in poller.poll()}
        if wake_r in ready:
            with contextlib.suppress(BlockingIOError):
                while os.read(wake_r, 512):
                    pass
        if sock.fileno() in ready:
            message, fds, _, _ = socket.recv_fds(sock, 64, 4)
            if not message:  # the parent is gone: its planners see their stdin end and stop
                return
            if message[:1] == b"k" and len(message) == 1 + PID.size:
                pid = PID.unpack(message[1:])[0]
                if pid in reports:
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, signal.SIGKILL)
            elif len(fds) == 4:
                _fork(planner.child, fds, reports, [sock.fileno(), wake_r, wake_w])
            else:
                for f in fds:
                    os.close(f)
        _reap(reports)


def _fork(run: Any, fds: list[int], reports: dict[int, int], inherited: list[int]) -> None:
    try:
        pid = os.fork()
    except OSError:  # out of processes or memory: the parent reads the status pipe's end and says so
        pid = -1
    if pid == 0:
        _child(run, fds, [*inherited, *reports.values()])
    for f in fds[:3]:
        os.close(f)
    if pid < 0:
        os.close(fds[3])
        return
    reports[pid] = fds[3]
    _report(fds[3], pid)


def _report(fd: int, value: int) -> None:
    with contextlib.suppress(OSError):  # the parent gave up on this planner
        os.write(fd, PID.pack(value))


def _reap(reports: dict[int, int]) -> None:
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        fd = reports.pop(pid, None)
        if fd is not None:
            _report(fd, os.waitstatus_to_exitcode(status))
            os.close(fd)


def _child(run: Any, fds: list[int], inherited: list[int]) -> NoReturn:
    code = 1
    try:
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        for f in (*inherited, fds[3]):
            os.close(f)
        for target, f in enumerate(fds[:3]):
            os.dup2(f, target)
            os.close(f)
        code = run(open(0, "rb", closefd=False), open(1, "wb", closefd=False))  # noqa: SIM115 (fds 0 and 1)
    except BaseException:
        with contextlib.suppress(BaseException):
            traceback.print_exc()
    finally:
        with contextlib.suppress(BaseException):
            sys.stderr.flush()
        os._exit(code)


# --- the parent side ------------------------------------------------------------------------------------------
@dataclass
class Planner:
    """A forked planner as the parent sees it: what `planner.plan` used of `asyncio.subprocess.Process`."""

    pid: int
    stdin: asyncio.StreamWriter
    stdout: asyncio.StreamReader
    stderr: asyncio.StreamReader
    status: asyncio.StreamReader
    server: Server
    returncode: int | None = None
    transports: list[asyncio.BaseTransport] = field(default_factory=list)
    release: Callable[[], None] = lambda: None
    """Gives the planner's memory back (batch/memory.py): once it is reaped, or closed."""

    async def wait(self) -> int:
        if self.returncode is None:
            try:
                self.returncode = PID.unpack(await self.status.readexactly(PID.size))[0]
            except asyncio.IncompleteReadError:
                self.returncode = 255  # the server died before it could say
            self.release()
        return self.returncode

    def kill(self) -> None:
        if self.returncode is None:
            self.server.kill(self.pid)

    def close(self) -> None:
        for transport in self.transports:
            transport.close()
        self.release()  # never waited for: its memory is given back all the same (release is idempotent)


class Server:
    """The parent's handle on the server: started on first use (in a thread: it blocks) and again if it died."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._proc: subprocess.Popen[bytes] | None = None
        self._sock: socket.socket | None = None

    def _ensure(self) -> socket.socket:
        if self._proc is not None and self._sock is not None and self._proc.poll() is None:
            return self._sock
        self._stop()
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            self._proc = subprocess.Popen(
                [sys.executable, "-c", BOOT, str(theirs.fileno())],
                pass_fds=(theirs.fileno(),),
                env=planner_env.server_env(os.environ),  # no ledger DSN, keys, KUBERNETES_* (planner_env.py)
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
            )
        finally:
            theirs.close()
        self._sock = ours
        return ours

    def warm(self) -> None:
        """Start the server now, so its imports are done before the first job plans."""
        with self._lock:
            self._ensure()

    def _stop(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None
        if self._proc is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):  # it ends when it reads the socket's end ...
                self._proc.wait(1)
            # ... unless it is still importing: nothing of it is needed any more
            if self._proc.poll() is None:
                self._proc.kill()
                self._proc.wait()
            self._proc = None

    def stop(self) -> None:
        with self._lock:
            self._stop()

    def fork(self) -> tuple[int, list[io.FileIO]]:
        """A new planner: its pid and the parent's ends of its stdin, stdout, stderr and status pipes."""
        pipes = [os.pipe() for _ in range(4)]
        theirs = [pipes[0][0], pipes[1][1], pipes[2][1], pipes[3][1]]
        ours = [pipes[0][1], pipes[1][0], pipes[2][0], pipes[3][0]]
        try:
            with self._lock:
                try:
                    socket.send_fds(self._ensure(), [b"p"], theirs)
                except OSError:  # the server died since: once more with a new one
                    self._stop()
                    socket.send_fds(self._ensure(), [b"p"], theirs)
        except BaseException:
            for f in ours:
                os.close(f)
            raise
        finally:
            for f in theirs:
                os.close(f)
        head = b""
        while len(head) < PID.size and (more := os.read(ours[3], PID.size - len(head))):
            head += more
        if len(head) < PID.size:
            for f in ours:
                os.close(f)
            raise OSError("the planner server ended before it forked")
        return PID.unpack(head)[0], [io.FileIO(f, mode) for f, mode in zip(ours, "wrrr", strict=True)]

    def kill(self, pid: int) -> None:
        with self._lock, contextlib.suppress(OSError):
            if self._sock is not None:
                self._sock.send(b"k" + PID.pack(pid))

    async def start(self, memory_bytes: int = 0, reserve_bytes: int = 0) -> Planner:
        """Fork a planner and connect its pipes to the running loop, once `memory_bytes` fit beside `reserve_bytes`
        and the planners running (memory.PLANNERS; PlanError when they never can)."""
        release = await memory.PLANNERS.acquire(memory_bytes, reserve_bytes)
        try:
            planner = await self._start()
        except BaseException:
            release()
            raise
        planner.release = release
        return planner

    async def _start(self) -> Planner:
        pid, files = await asyncio.to_thread(self.fork)  # the transports own the files from here
        loop = asyncio.get_running_loop()
        transports: list[asyncio.BaseTransport] = []

        async def reader(pipe: Any) -> asyncio.StreamReader:
            stream = asyncio.StreamReader(limit=PIPE_LIMIT, loop=loop)
            transport, _ = await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(stream, loop=loop), pipe)
            transports.append(transport)
            return stream

        try:
            out, err, done = await reader(files[1]), await reader(files[2]), await reader(files[3])
            transport, protocol = await loop.connect_write_pipe(
                lambda: asyncio.streams.FlowControlMixin(loop=loop), files[0]
            )
            transports.append(transport)
        except BaseException:
            for t in transports:
                t.close()
            for f in files:
                f.close()
            self.kill(pid)
            raise
        writer = asyncio.StreamWriter(transport, protocol, None, loop)
        return Planner(pid, writer, out, err, done, self, transports=transports)


SERVER = Server()
atexit.register(SERVER.stop)  # reaped, not orphaned: its planners' usage is counted to this process
