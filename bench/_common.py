"""Shared by the benchmarks: `barge emulator` in its own process (so it never shares a GIL with the client)."""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import yaml


def start_emulator(profile: dict[str, Any]) -> tuple[subprocess.Popen[str], str]:
    path = Path(tempfile.mkdtemp(prefix="barge-bench-")) / "profile.yaml"
    path.write_text(yaml.safe_dump(profile))
    proc = subprocess.Popen(
        [sys.executable, "-m", "barge.cli", "emulator", "--port", "0", "--profile", str(path)],
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stderr is not None
    for line in proc.stderr:
        if found := re.search(r"listening on (http://\S+)", line):
            return proc, found.group(1)
    raise RuntimeError("emulator did not start")


@contextmanager
def postgres_server() -> Iterator[str]:
    """A throwaway PostgreSQL server from Debian's binaries on a free loopback port (as the tests start one), or
    the server BENCH_PG_URL names. Yields a URL to a database of its own."""
    if os.environ.get("BENCH_PG_URL"):
        yield os.environ["BENCH_PG_URL"]
        return
    found = sorted(Path("/usr/lib/postgresql").glob("*/bin/initdb"))
    if not found:
        raise RuntimeError("PostgreSQL server binaries not found: install Debian's postgresql package (make deps)")
    bindir = found[-1].parent

    def as_postgres(cmd: list[str]) -> list[str]:
        return ["runuser", "-u", "postgres", "--", *cmd] if os.geteuid() == 0 else cmd

    data = Path(tempfile.mkdtemp(prefix="barge-bench-pg-"))
    if os.geteuid() == 0:
        shutil.chown(data, "postgres", "postgres")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    initdb = [str(bindir / "initdb"), "-D", str(data / "db"), "-A", "trust", "-U", "barge", "--no-sync"]
    subprocess.run(as_postgres(initdb), check=True, capture_output=True)
    server = subprocess.Popen(
        as_postgres(
            [
                str(bindir / "postgres"),
                "-D",
                str(data / "db"),
                "-p",
                str(port),
                "-k",
                str(data),
                "-c",
                "listen_addresses=127.0.0.1",
            ]
        ),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 60
        ready = [str(bindir / "pg_isready"), "-h", "127.0.0.1", "-p", str(port)]
        while subprocess.run(ready, capture_output=True).returncode != 0:
            if time.monotonic() > deadline or server.poll() is not None:
                raise RuntimeError("PostgreSQL did not start")
            time.sleep(0.2)
        createdb = [str(bindir / "createdb"), "-h", "127.0.0.1", "-p", str(port), "-U", "barge", "barge"]
        subprocess.run(createdb, check=True, capture_output=True)
        yield f"postgresql://barge@127.0.0.1:{port}/barge"
    finally:
        server.terminate()
        server.wait(30)
        shutil.rmtree(data, ignore_errors=True)
