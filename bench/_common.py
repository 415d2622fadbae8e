"""Shared by the benchmarks: `barge emulator` in its own process (so it never shares a GIL with the client)."""

from __future__ import annotations

import re
import subprocess
import sys
import tempfile
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
