"""A throwaway PostgreSQL server from Debian's binaries on a free loopback port, for the tests and the benchmarks.

Trust authentication on 127.0.0.1 only, a data directory of its own (owned by `postgres` when run as root, since
the server refuses to run as root), removed when the server stops. Never the system service Debian may start.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


def bindir() -> Path:
    found = sorted(Path("/usr/lib/postgresql").glob("*/bin/initdb"))
    if not found:
        raise FileNotFoundError("PostgreSQL server binaries not found: install Debian's postgresql package (make deps)")
    return found[-1].parent


def _as_postgres(cmd: list[str]) -> list[str]:
    return ["runuser", "-u", "postgres", "--", *cmd] if os.geteuid() == 0 else cmd


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def postgres(*, fsync: bool = True) -> Iterator[str]:
    """Yields `postgresql://barge@127.0.0.1:PORT/barge`; `fsync=False` for tests that never lose power."""
    bins = bindir()
    data = Path(tempfile.mkdtemp(prefix="barge-pg-"))
    if os.geteuid() == 0:
        shutil.chown(data, "postgres", "postgres")
    port = _free_port()
    initdb = [str(bins / "initdb"), "-D", str(data / "db"), "-A", "trust", "-U", "barge", "--no-sync"]
    subprocess.run(_as_postgres(initdb), check=True, capture_output=True)
    command = [str(bins / "postgres"), "-D", str(data / "db"), "-p", str(port), "-k", str(data)]
    command += ["-c", "listen_addresses=127.0.0.1", *(() if fsync else ("-c", "fsync=off"))]
    server = subprocess.Popen(_as_postgres(command), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 30
        ready = [str(bins / "pg_isready"), "-h", "127.0.0.1", "-p", str(port)]
        while subprocess.run(ready, capture_output=True).returncode != 0:
            if time.monotonic() > deadline or server.poll() is not None:
                raise RuntimeError("PostgreSQL did not start")
            time.sleep(0.2)
        createdb = [str(bins / "createdb"), "-h", "127.0.0.1", "-p", str(port), "-U", "barge", "barge"]
        subprocess.run(createdb, check=True, capture_output=True)
        yield f"postgresql://barge@127.0.0.1:{port}/barge"
    finally:
        server.terminate()
        server.wait(20)
        shutil.rmtree(data, ignore_errors=True)
