"""A local write_lines gathers lines into large writes: 2,000 result lines of ~2 KB cost a few write(2) calls, not
one per line (what the default 8 KiB buffer made of them). Counted by the kernel for this thread
(/proc/thread-self/io, `syscw`), not timed; and the file holds every line, in order."""

from __future__ import annotations

from pathlib import Path

import pytest

from barge.storage import WRITE_BUFFER, StoragePolicy, write_lines

IO = Path("/proc/thread-self/io")


def _writes() -> int:
    return next(int(v) for k, v in (line.split(": ") for line in IO.read_text().splitlines()) if k == "syscw")


@pytest.mark.skipif(not IO.exists(), reason="needs Linux's per-thread I/O accounting")
def test_lines_are_written_in_large_writes(tmp_path: Path) -> None:
    lines = [f"{i:05d}".encode() + b"x" * 2300 for i in range(2000)]
    size = sum(len(line) + 1 for line in lines)
    policy = StoragePolicy(prefixes=(f"file://{tmp_path}/",))
    before = _writes()
    assert write_lines(f"file://{tmp_path}/out/results.jsonl", iter(lines), policy) == len(lines)
    calls = _writes() - before
    assert calls <= size // WRITE_BUFFER + 2, calls  # 5 at 1 MiB; the 8 KiB default made one per line
    assert (tmp_path / "out" / "results.jsonl").read_bytes() == b"".join(line + b"\n" for line in lines)
