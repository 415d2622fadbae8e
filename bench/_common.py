"""Shared by the benchmarks: `barge emulator` in its own process (so it never shares a GIL with the client)."""

from __future__ import annotations

import json
import os
import random
import re
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the repository root, for tools/
from tools import pgserver


def start_emulator(profile: dict[str, Any], *args: str) -> tuple[subprocess.Popen[str], str]:
    """`args` are more options of `barge emulator` (e.g. `--vllm MODEL`)."""
    path = Path(tempfile.mkdtemp(prefix="barge-bench-")) / "profile.yaml"
    path.write_text(yaml.safe_dump(profile))
    proc = subprocess.Popen(
        [sys.executable, "-m", "barge.cli", "emulator", "--port", "0", "--profile", str(path), *args],
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
    """A throwaway PostgreSQL server from Debian's binaries (tools/pgserver.py, as the tests start one), or the
    server BENCH_PG_URL names."""
    if os.environ.get("BENCH_PG_URL"):
        yield os.environ["BENCH_PG_URL"]
        return
    with pgserver.postgres() as url:
        yield url


def write_input(path: Path, n: int, pad: str = "z" * 1900, *, random_ids: bool = False) -> int:
    """N items of ~2 KB, `{"id": "i<n>", "text": "item <n> zzz..."}` per line; returns the file's size. With
    `random_ids` the ids are 16 random hex digits (seeded), as hashes and UUIDs lie: `i<n>` sorts nearly in line
    order, and the ledger's items table is clustered on the custom_id made from it."""
    rng = random.Random(14)
    with path.open("wb") as fh:
        for i in range(n):
            item_id = f"{rng.getrandbits(64):016x}" if random_ids else f"i{i}"
            fh.write(json.dumps({"id": item_id, "text": f"item {i} {pad}"}).encode() + b"\n")
    return path.stat().st_size


def naive_openai_body(items: list[dict[str, Any]], model: str, max_tokens: int) -> bytes:
    """The naive script's OpenAI batch file: every request built in memory with json.dumps, one JSONL body."""
    return "".join(
        json.dumps(
            {
                "custom_id": x["id"],
                "method": "POST",
                "url": "/v1/chat/completions",
                "body": {
                    "model": model,
                    "max_completion_tokens": max_tokens,
                    "messages": [{"role": "user", "content": x["text"]}],
                },
            }
        )
        + "\n"
        for x in items
    ).encode()
