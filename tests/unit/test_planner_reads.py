"""The planner process reads its input pipe in large reads: one read empties what the parent wrote, so the
parent's writer is woken once per pipeful, not once per 8 KiB (40,000 times per 100,000 lines of 2 KB)."""

from __future__ import annotations

import os

import pytest

from barge.batch import planner


def test_one_read_of_the_planner_empties_the_input_pipe() -> None:
    read_end, write_end = os.pipe()
    try:
        os.write(write_end, b"x" * 60_000)  # under a pipe's 64 KiB: the parent's write of one pipeful
        stdin = planner._reader(open(read_end, "rb", closefd=False))  # noqa: SIM115 (as zygote.py hands it over)
        assert stdin.read(12) == b"x" * 12  # a frame's header
        os.set_blocking(read_end, False)
        with pytest.raises(BlockingIOError):  # nothing left in the pipe: the first read took it all
            os.read(read_end, 1)
        assert len(stdin.read(60_000 - 12)) == 60_000 - 12
    finally:
        os.close(read_end)
        os.close(write_end)
