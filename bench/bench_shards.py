"""Several active operators at scale (issue 33 point 6): N jobs over S shards sharing one PostgreSQL ledger.

Starts etcd + kube-apiserver (tools/localcluster.py), a real PostgreSQL server (tools/pgserver.py, fsync on; or
BENCH_PG_URL), `barge emulator`, and S `barge operator` processes (bench/_operator_probe.py, which measures each
one's Kopf loop lag and counts its polls) with BARGE_SHARD=i/S, plus the lag floor (the same probe in a process
that does nothing else). Applies N jobs spread over BENCH_SHARDS_NAMESPACES namespaces (a namespace belongs to the
shard its name hashes to), waits for every job to be Succeeded, and prints one table per shard (its jobs, loop lag
beside the floor, polls, CPU, peak RSS) and the PostgreSQL load over the run (pg_stat_database deltas per second,
the server's CPU, peak connections and advisory locks held, sampled every second).

Settings (env): BENCH_SHARDS_JOBS (default 10000, the issue's figure), BENCH_SHARDS_COUNT (5),
BENCH_SHARDS_NAMESPACES (50), BENCH_SHARDS_ITEMS (items per job, 20: the operator's load is per job and per poll;
bench_operator.py measures 200-item jobs), BENCH_SHARDS_POLL (5 s), BENCH_SHARDS_BATCH_SECONDS (30),
BENCH_SHARDS_TIMEOUT (3600 s).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import sqlalchemy as sa
import yaml
from _common import postgres_server, start_emulator
from bench_operator import cpu_of, job, live_children, pct, proc_figures, wait_healthy

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
from tools import localcluster  # noqa: E402

from barge import sharding  # noqa: E402
from barge.cli.demo_data import claims  # noqa: E402

JOBS = int(os.environ.get("BENCH_SHARDS_JOBS", "10000"))
SHARDS = int(os.environ.get("BENCH_SHARDS_COUNT", "5"))
NAMESPACES = int(os.environ.get("BENCH_SHARDS_NAMESPACES", "50"))
ITEMS = int(os.environ.get("BENCH_SHARDS_ITEMS", "20"))
POLL = float(os.environ.get("BENCH_SHARDS_POLL", "5"))
BATCH_SECONDS = float(os.environ.get("BENCH_SHARDS_BATCH_SECONDS", "30"))
TIMEOUT = float(os.environ.get("BENCH_SHARDS_TIMEOUT", "3600"))
STATS = (
    "xact_commit", "xact_rollback", "tup_returned", "tup_fetched", "tup_inserted", "tup_updated", "tup_deleted",
    "blks_read", "blks_hit",
)  # fmt: skip


def spread(count: int, shards: int) -> list[str]:
    """`count` namespace names, as many owned by each shard as can be (a name belongs to the shard it hashes to)."""
    names: list[list[str]] = [[] for _ in range(shards)]
    n = 0
    while sum(map(len, names)) < count:
        name = f"bench-{n:04d}"
        owner = sharding.owner(name, shards)
        if len(names[owner]) < -(-count // shards):
            names[owner].append(name)
        n += 1
    return [name for i in range(max(map(len, names))) for group in names if i < len(group) for name in [group[i]]]


def phases(cluster: localcluster.Cluster) -> Counter[str]:
    out = cluster.run_kubectl(
        "get", "lbj", "-A", "-o", "custom-columns=P:.status.phase", "--no-headers", check=False
    ).stdout
    return Counter(out.split())


def postmaster(port: int) -> int:
    """The PostgreSQL server's own process (its cmdline names its port), whose children are the backends."""
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        with contextlib.suppress(OSError):
            argv = (proc / "cmdline").read_bytes().split(b"\0")
            if argv[0].endswith(b"/postgres") and b"-p" in argv and argv[argv.index(b"-p") + 1] == str(port).encode():
                return int(proc.name)
    raise RuntimeError(f"no PostgreSQL server on port {port} found")


def server_cpu(pid: int) -> float:
    """CPU seconds of the server and every backend, live or gone."""
    own, reaped = cpu_of(pid)
    total = own + reaped
    for child in live_children(pid):
        with contextlib.suppress(OSError):
            total += sum(cpu_of(child))
    return total


class Sampler(threading.Thread):
    """Every second: the ledger's connections and the advisory locks held (their peaks)."""

    def __init__(self, engine: sa.Engine) -> None:
        super().__init__(daemon=True)
        self.engine, self.stop = engine, threading.Event()
        self.connections = self.advisory = 0

    def run(self) -> None:
        with self.engine.connect() as conn:
            while not self.stop.wait(1.0):
                found = conn.execute(
                    sa.text(
                        "SELECT (SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()), "
                        "(SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND granted)"
                    )
                ).one()
                conn.commit()
                self.connections = max(self.connections, int(found[0]) - 1)  # not this sampler's own
                self.advisory = max(self.advisory, int(found[1]))


def db_stats(engine: sa.Engine) -> dict[str, int]:
    with engine.connect() as conn:
        conn.execute(sa.text("SELECT pg_stat_clear_snapshot()"))
        row = conn.execute(
            sa.text(f"SELECT {', '.join(STATS)} FROM pg_stat_database WHERE datname = current_database()")  # noqa: S608 - constant names
        ).one()
        return dict(zip(STATS, (int(v) for v in row), strict=True))


def main() -> None:
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))  # stopped: still take the control plane down
    work = Path(tempfile.mkdtemp(prefix="barge-bench-shards-"))
    cluster = localcluster.up(work / "cluster")
    emulator, url = start_emulator({"batch": {"processingSeconds": BATCH_SECONDS}})
    operators: list[subprocess.Popen[bytes]] = []
    floor: subprocess.Popen[bytes] | None = None
    try:
        with postgres_server() as ledger_url:
            engine = sa.create_engine(ledger_url.replace("postgresql://", "postgresql+psycopg://", 1))
            port = sa.engine.make_url(ledger_url).port
            server = postmaster(port) if port else 0
            cluster.run_kubectl("apply", "--server-side", "-f", str(REPO / "crds"))
            cluster.run_kubectl("wait", "--for=condition=Established", "crd", "--all", "--timeout=60s")
            spaces = spread(NAMESPACES, SHARDS)
            objects: list[dict[str, Any]] = []
            for n in range(NAMESPACES):
                objects.append({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": spaces[n]}})
                objects.append({
                    "apiVersion": "v1",
                    "kind": "Secret",
                    "metadata": {"name": "anthropic", "namespace": spaces[n],
                                 "labels": {"barge.dev/credential": "true"}},
                    "stringData": {"api-key": "sk-bench"},
                })  # fmt: skip
            cluster.run_kubectl("apply", "-f", "-", input="---\n".join(yaml.safe_dump(o) for o in objects))
            data, out = work / "claims.jsonl", work / "out"
            data.write_bytes(b"".join(line + b"\n" for line in claims(ITEMS)))
            admin = {
                "storage": {"prefixes": [f"file://{work}/"]},
                "endpoints": {"allow": [{"host": "127.0.0.1", "private": True}]},
            }
            (work / "policy.yaml").write_text(yaml.safe_dump(admin))
            env = {
                **os.environ,
                "KUBECONFIG": str(cluster.kubeconfig),
                "BARGE_LEDGER_URL": ledger_url,
                "BARGE_POLICY_FILE": str(work / "policy.yaml"),
                "BARGE_POLL_SECONDS": str(POLL),
                "BARGE_MIN_BATCH_WINDOW": "0",
                "BARGE_MAX_SHARD_REQUESTS": str(ITEMS),
                "BARGE_REQUIRE_TENANT_LABEL": "false",
            }
            probe = Path(__file__).with_name("_operator_probe.py")
            ports = []
            for i in range(SHARDS):
                ports.append(localcluster._free_port())
                with (work / f"operator-{i}.log").open("wb") as log:
                    operators.append(
                        subprocess.Popen(
                            [
                                sys.executable,
                                str(probe),
                                "operator",
                                "--all-namespaces",
                                "--metrics-port",
                                str(ports[i]),
                            ],
                            env={
                                **env,
                                "BARGE_SHARD": f"{i}/{SHARDS}",
                                "BENCH_PROBE_FILE": str(work / f"probe-{i}.json"),
                            },
                            stdout=log,
                            stderr=subprocess.STDOUT,
                        )
                    )
            for i, op in enumerate(operators):
                wait_healthy(ports[i], op)
            floor = subprocess.Popen(
                [sys.executable, str(probe), "floor"], env={**env, "BENCH_PROBE_FILE": str(work / "floor.json")}
            )
            time.sleep(2.0)
            idle = [proc_figures(op.pid)[0] for op in operators]
            owned = Counter(sharding.owner(spaces[n % NAMESPACES], SHARDS) for n in range(JOBS))
            docs = []
            for n in range(JOBS):
                doc = job(f"j{n:05d}", data, out, url)
                doc["metadata"]["namespace"] = spaces[n % NAMESPACES]
                doc["spec"]["output"]["url"] = f"file://{out}/{spaces[n % NAMESPACES]}/j{n:05d}/"
                docs.append(yaml.safe_dump(doc))
            sampler = Sampler(engine)
            sampler.start()
            before, cpu_before = db_stats(engine), server_cpu(server) if server else 0.0
            started = time.time()
            for chunk in range(0, JOBS, 1000):  # create: one request per job (apply reads each first)
                cluster.run_kubectl("create", "-f", "-", input="---\n".join(docs[chunk : chunk + 1000]))
            applied = time.time() - started
            deadline = time.monotonic() + TIMEOUT
            while (seen := phases(cluster))["Succeeded"] + seen["Failed"] < JOBS:
                exited = [i for i, op in enumerate(operators) if op.poll() is not None]
                if exited:
                    raise RuntimeError(f"shard(s) {exited} exited: {dict(seen)}; see {work}/operator-*.log")
                if time.monotonic() > deadline:
                    print(f"BENCH_SHARDS_TIMEOUT passed with {dict(seen)}", flush=True)
                    break
                time.sleep(5.0 if JOBS <= 2000 else 15.0)  # listing 10,000 jobs loads the API server too
            elapsed = time.time() - started
            after, cpu_after = db_stats(engine), server_cpu(server) if server else 0.0
            sampler.stop.set()
            figures = [proc_figures(op.pid) for op in operators]
            floor.send_signal(signal.SIGTERM)
            floor.wait(10)
            time.sleep(1.5)  # the probes' last dump
            with engine.connect() as conn:
                size = conn.execute(sa.text("SELECT pg_database_size(current_database())")).scalar_one()
            engine.dispose()
            for op in operators:
                op.send_signal(signal.SIGTERM)
            for op in operators:
                try:
                    op.wait(60)
                except subprocess.TimeoutExpired:
                    op.kill()
    finally:
        if floor is not None and floor.poll() is None:
            floor.kill()
        for op in operators:
            if op.poll() is None:
                op.kill()
                op.wait()
        emulator.send_signal(signal.SIGTERM)
        emulator.wait(10)
        localcluster.down(work / "cluster")
    report(
        work, seen, owned, figures, idle, before, after, cpu_after - cpu_before, sampler, int(size), elapsed, applied
    )


def report(
    work: Path,
    seen: Counter[str],
    owned: Counter[int],
    figures: list[tuple[float, float, int]],
    idle: list[float],
    before: dict[str, int],
    after: dict[str, int],
    pg_cpu: float,
    sampler: Sampler,
    size: int,
    elapsed: float,
    applied: float,
) -> None:
    floor = json.loads((work / "floor.json").read_text())["lag"]
    print(
        f"\n{JOBS} jobs x {ITEMS} items over {SHARDS} shards ({NAMESPACES} namespaces), one PostgreSQL ledger; "
        f"poll {POLL:g} s, batches take {BATCH_SECONDS:g} s; {seen['Succeeded']}/{JOBS} Succeeded in {elapsed:.0f} s "
        f"(kubectl apply {applied:.0f} s; {os.cpu_count()} cores, load avg {os.getloadavg()[0]:.1f})"
    )
    head = ("shard", "jobs", "polls/job", "lag p50 ms", "lag p99 ms", "lag max ms", "CPU s/100 jobs", "peak RSS MB")
    print(" | ".join(head))
    for i, (cpu, _, peak) in enumerate(figures):
        probe = json.loads((work / f"probe-{i}.json").read_text())
        lag = probe["lag"]
        polls = sum(probe["steps"].values())
        jobs = owned[i]
        per_job = f"{polls / jobs:.1f}" if jobs else "-"
        per_100 = f"{(cpu - idle[i]) * 100 / jobs:.1f}" if jobs else f"({cpu - idle[i]:.0f} s)"
        print(
            f"{i} | {jobs} | {per_job} | {pct(lag, 0.5) * 1000:.1f} | {pct(lag, 0.99) * 1000:.1f} | "
            f"{max(lag, default=0) * 1000:.1f} | {per_100} | {peak / 2**20:.0f}"
        )
    print(
        f"floor (a process doing nothing else) | - | - | {pct(floor, 0.5) * 1000:.1f} | {pct(floor, 0.99) * 1000:.1f}"
        f" | {max(floor, default=0) * 1000:.1f} | - | -     (target: every shard's p99 < 100 ms)"
    )
    delta = {k: after[k] - before[k] for k in STATS}
    print("PostgreSQL over the run: " + ", ".join(f"{k} {v / elapsed:,.0f}/s" for k, v in delta.items()))
    print("  (xact_rollback counts the connection pool's reset of every connection handed back: SQLAlchemy's default)")
    print(
        f"PostgreSQL: server CPU {pg_cpu:.0f} s ({pg_cpu / elapsed * 100:.0f}% of a core); peak connections "
        f"{sampler.connections}; peak advisory locks held {sampler.advisory}; database {size / 2**20:.0f} MB; "
        f"{delta['xact_commit'] / max(1, JOBS):.1f} commits per job"
    )
    print(f"(work dir {work})")


if __name__ == "__main__":
    main()
