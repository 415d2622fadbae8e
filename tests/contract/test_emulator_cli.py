"""`barge emulator` as a user runs it: a process, a profile file, a state file that outlives a restart."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import anthropic

BARGE = [sys.executable, "-m", "barge.cli"]


@contextmanager
def running(*args: str) -> Iterator[str]:
    proc = subprocess.Popen([*BARGE, "emulator", "--port", "0", *args], stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stderr is not None
        for line in proc.stderr:
            found = re.search(r"listening on (http://\S+)", line)
            if found:
                yield found.group(1)
                break
        else:
            raise AssertionError("the emulator never said where it listens")
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(10) == 0


def test_runs_with_a_profile_and_keeps_state_across_restarts(tmp_path: Path) -> None:
    profile = tmp_path / "profile.yaml"
    profile.write_text("seed: 7\nbatch:\n  processingSeconds: 60\n")
    state = tmp_path / "state.pickle"
    with running("--profile", str(profile), "--state", str(state)) as url:
        c = anthropic.Anthropic(api_key="k", base_url=url, max_retries=0)
        params = {"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": "x"}]}
        batch = c.messages.batches.create(requests=[{"custom_id": "a", "params": params}])  # type: ignore[list-item]
    with running("--profile", str(profile), "--state", str(state)) as url:
        again = anthropic.Anthropic(api_key="k", base_url=url, max_retries=0).messages.batches.retrieve(batch.id)
        assert again.processing_status == "in_progress"
        assert again.request_counts.processing == 1


def test_bad_profile_is_a_clear_error(tmp_path: Path) -> None:
    profile = tmp_path / "bad.yaml"
    profile.write_text("batch:\n  outcomes: {explode: 0.5}\n")
    out = subprocess.run([*BARGE, "emulator", "--profile", str(profile)], capture_output=True, text=True, timeout=30)
    assert out.returncode == 2
    assert "unknown outcome(s) ['explode']" in out.stderr
