"""Scale (issue 33 target 4): one job of N generated items through `barge run` against the emulator, at each size.

Per size: the time from spawn to exit and per 1,000 items (linear in items if that figure stays flat), peak RSS
(wait4's ru_maxrss: the largest of `barge run` and its planner process), and the SQLite ledger's size per item
twice: when the job has ended with its texts kept (spec.retention keepPayloadsFor / keepOutputsFor 30d, so that
they are still there to be measured) and after `barge ledger purge --older-than 0s` dropped them. Each is given as
the file's size (SQLite does not give freed pages back to the file system) and as the pages in use (page_count -
freelist_count), what the ledger would take once vacuumed. Checked: results.jsonl has a line per succeeded item and
the counts the run printed add up to N.

Target: peak RSS < 250 MB at every size, time per item flat from the smallest size to the largest. Sizes:
BENCH_SCALE_SIZES (default "100000,1000000", ~0.2 and ~2 GB of input written to the temporary directory; the
issue's 10,000,000 is BENCH_SCALE_SIZES=10000000: ~20 GB of input and ~30 GB of ledger on disk), provider
BENCH_SCALE_PROVIDER (anthropic; or openai), poll BENCH_SCALE_POLL (2 s). `barge run --max-items N` lifts the
item limit (1,000,000 by default, as the operator's policy default) to the size; BENCH_SCALE_PLANNER_MB (256,
the default) is `--planner-memory-mb`, the planner process's address space. Shards follow the provider's
limits (Anthropic 100,000 requests or 256 MB per batch, OpenAI 50,000 / 200 MB).
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml
from _common import start_emulator, write_input
from bench_engine import lines_of, timed
from bench_engine import manifest as engine_manifest

SIZES = [int(x) for x in os.environ.get("BENCH_SCALE_SIZES", "100000,1000000").split(",") if x]
KIND = os.environ.get("BENCH_SCALE_PROVIDER", "anthropic")
POLL = float(os.environ.get("BENCH_SCALE_POLL", "2"))
PLANNER_MB = int(os.environ.get("BENCH_SCALE_PLANNER_MB", "256"))
RSS_TARGET_MB = 250


def manifest(tmp: Path, base: str, data: Path, n: int) -> Path:
    """bench_engine's job, keeping its texts (so that the ledger can be measured with them) and its own output."""
    doc = yaml.safe_load(engine_manifest(tmp, KIND, base, data).read_text())
    doc["metadata"]["name"] = f"scale-{n}"
    doc["spec"]["output"]["url"] = str(tmp / f"out-{n}")
    doc["spec"]["retention"] = {"keepPayloadsFor": "30d", "keepOutputsFor": "30d"}
    path = tmp / f"job-{n}.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def sizes_of(db: Path) -> tuple[int, int]:
    """(bytes of the file and its WAL, bytes of the pages in use)."""
    wal = db.with_name(db.name + "-wal")
    on_disk = db.stat().st_size + (wal.stat().st_size if wal.exists() else 0)
    conn = sqlite3.connect(db)
    try:
        page_size, pages, free = (
            conn.execute(f"PRAGMA {p}").fetchone()[0] for p in ("page_size", "page_count", "freelist_count")
        )
    finally:
        conn.close()
    return on_disk, (pages - free) * page_size


def main() -> None:
    proc, base = start_emulator({"batch": {"processingSeconds": 1}})
    rows = []
    try:
        for n in SIZES:
            with tempfile.TemporaryDirectory(prefix="barge-bench-scale-") as name:
                tmp = Path(name)
                data = tmp / "in.jsonl"
                input_mb = write_input(data, n) / 1e6
                env = {**os.environ, "BARGE_API_KEY": "k", "BARGE_MIN_BATCH_WINDOW": "0"}
                db = tmp / "ledger.db"
                cmd = [sys.executable, "-m", "barge.cli", "run", str(manifest(tmp, base, data, n)), "--ledger", str(db)]
                seconds, rss, out, code = timed(
                    [
                        *cmd,
                        "--poll",
                        str(POLL),
                        "--json",
                        "--max-items",
                        str(n),
                        "--planner-memory-mb",
                        str(PLANNER_MB),
                    ],
                    env,
                )
                assert code == 0, out
                final = json.loads(out.strip().splitlines()[-1])
                succeeded = lines_of(tmp / f"out-{n}" / "results.jsonl")
                counts = final.get("counts", {})
                assert counts.get("total") == n, final
                assert succeeded == counts.get("succeeded", 0) + counts.get("refused", 0), (succeeded, final)
                kept = sizes_of(db)
                purge = [
                    sys.executable,
                    "-m",
                    "barge.cli",
                    "ledger",
                    "purge",
                    "--older-than",
                    "0s",
                    "--ledger",
                    str(db),
                ]
                subprocess.run(purge, check=True, env=env, capture_output=True)
                dropped = sizes_of(db)
                rows.append((n, input_mb, final.get("phase"), succeeded, seconds, rss, kept, dropped))
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(30)
    print(f"\n`barge run` at scale ({KIND}, barge emulator, poll {POLL} s; ledger bytes per item: file / pages in use)")
    print(
        "| items | input MB | phase | results | seconds | ms per 1,000 items | peak RSS MB | ledger B/item, texts kept "
        "| after purge | RSS target | met |"
    )
    print("| ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | --- | --- |")
    for n, input_mb, phase, succeeded, seconds, rss, kept, dropped in rows:
        met = "yes" if rss < RSS_TARGET_MB else "no"
        print(
            f"| {n:,} | {input_mb:,.0f} | {phase} | {succeeded:,} | {seconds:.1f} | {seconds / n * 1e6:.1f} "
            f"| {rss:,.0f} | {kept[0] / n:,.0f} / {kept[1] / n:,.0f} | {dropped[0] / n:,.0f} / {dropped[1] / n:,.0f} "
            f"| < {RSS_TARGET_MB} MB | {met} |"
        )


if __name__ == "__main__":
    main()
