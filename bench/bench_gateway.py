"""`barge gateway` (issue 30) against its floors, measured in the same run on the same machine.

A real control plane (tools/localcluster.py: etcd + kube-apiserver, Barge's CRDs; no operator, so the jobs stay
Pending), one namespace with a ServiceAccount, its RoleBinding and a token of audience `barge`, and `barge gateway`
in its own process with a file:// storage prefix. One aiohttp client sends every request (no SDK overhead on
either side). For each file size (BENCH_GATEWAY_LINES, default 10000,50000 OpenAI batch lines of ~1 KB):

  upload         POST /v1/files (multipart) through the gateway: TokenReview and SubjectAccessReview (cached after
                 the first call), the per-line check, the bytes streamed into storage
  floor: raw     the same multipart bytes from the same client to a trivial aiohttp server in its own process
                 that writes the file part to disk in 64 KiB chunks (HTTP + multipart + disk, nothing else)
  floor: store   barge.storage.write_lines of the same lines into the same kind of prefix, in this process
                 (Barge's storage layer alone: no HTTP, no check)
  create         POST /v1/batches from the uploaded file, BENCH_GATEWAY_CREATES (20) one after another: the file's
                 record read, the InferencePool looked up, the LLMBatchJob created
  floor: create  the API server's create of the same LLMBatchJob object (admin token, same client)

  download       GET /v1/files/{id}/content of the uploaded file through the gateway (auth, the file's record, its
                 lines read from storage and streamed out in chunks), the body read to its end
  floor: raw     the same file from the trivial aiohttp server, streamed from disk in 64 KiB chunks
  floor: read    barge.storage.read_lines of the same lines from the floor's copy, in this process

then GET /v1/batches/{id} at 64 concurrent clients for BENCH_GATEWAY_SECONDS (5) against the API server's GET of
the same job at 64 concurrent clients (the one call the gateway cannot avoid per status request). Each upload is
sent twice and the faster counts; the gateway's peak RSS (VmHWM) after the uploads shows the streaming is not
whole-file. No targets are asserted (bench/README.md holds the figures).
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import socket
import ssl
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

import aiohttp
import yaml
from aiohttp import web

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the repository root, for tools/
from tools import localcluster

from barge.storage import StoragePolicy, read_lines, write_lines

REPO = Path(__file__).resolve().parent.parent
SIZES = [int(x) for x in os.environ.get("BENCH_GATEWAY_LINES", "10000,50000").split(",")]
CREATES = int(os.environ.get("BENCH_GATEWAY_CREATES", "20"))
SECONDS = float(os.environ.get("BENCH_GATEWAY_SECONDS", "5"))
CONCURRENCY = 64
NS, POOL = "bench-gw", "gpt-fast"
PAD = "The customer reports water damage in the kitchen after a pipe burst under the sink. " * 11


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def write_file(path: Path, n: int) -> int:
    with path.open("wb") as fh:
        for i in range(n):
            body = {"model": POOL, "max_tokens": 256, "messages": [{"role": "user", "content": f"claim {i}: {PAD}"}]}
            line = {"custom_id": f"req-{i}", "method": "POST", "url": "/v1/chat/completions", "body": body}
            fh.write(json.dumps(line).encode() + b"\n")
    return path.stat().st_size


# --- the raw floor server (run as `bench_gateway.py --floor-server PORT DIR`, in its own process) -------------
def floor_server(port: int, folder: Path) -> None:
    async def upload(request: web.Request) -> web.Response:
        reader = await request.multipart()
        size = 0
        while (part := await reader.next()) is not None:
            if isinstance(part, aiohttp.BodyPartReader) and part.name == "file":
                name = f"{os.urandom(6).hex()}.jsonl"
                with (folder / name).open("wb") as out:
                    while chunk := await part.read_chunk(1 << 16):
                        out.write(chunk)
                        size += len(chunk)
        return web.json_response({"bytes": size, "name": name})

    async def download(request: web.Request) -> web.StreamResponse:
        name = request.match_info["name"]
        if "/" in name or name.startswith("."):
            raise web.HTTPNotFound()
        response = web.StreamResponse(headers={"Content-Type": "application/octet-stream"})
        await response.prepare(request)
        with (folder / name).open("rb") as source:
            while chunk := source.read(1 << 16):
                await response.write(chunk)
        await response.write_eof()
        return response

    app = web.Application(client_max_size=1 << 31)
    app.router.add_post("/upload", upload)
    app.router.add_get("/download/{name}", download)
    web.run_app(app, host="127.0.0.1", port=port, print=None)


# --- setup -----------------------------------------------------------------------------------------------------
def install(cluster: localcluster.Cluster, work: Path) -> str:
    for name in ("llmbatchjobs.barge.dev", "inferencepools.barge.dev"):
        cluster.run_kubectl("apply", "--server-side", "-f", str(REPO / "crds" / f"{name}.yaml"))
        cluster.run_kubectl("wait", "--for=condition=Established", f"crd/{name}", "--timeout=60s")
    cluster.run_kubectl("create", "namespace", NS)
    cluster.run_kubectl("label", "namespace", NS, "barge.dev/tenant=bench")
    rule = {"apiGroups": ["barge.dev"], "resources": ["llmbatchjobs"], "verbs": ["create", "get", "list"]}
    docs = [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "app", "namespace": NS}},
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "Role",
            "metadata": {"name": "b", "namespace": NS},
            "rules": [rule],
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": {"name": "b", "namespace": NS},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "b"},
            "subjects": [{"kind": "ServiceAccount", "name": "app", "namespace": NS}],
        },
        {
            "apiVersion": "barge.dev/v1alpha1",
            "kind": "InferencePool",
            "metadata": {"name": POOL, "namespace": NS},
            "spec": {
                "model": "gpt-4o-mini",
                "provider": {"type": "openai", "model": "gpt-4o-mini", "secretRef": {"name": "k", "key": "k"}},
            },
        },
    ]
    cluster.run_kubectl("apply", "-f", "-", input=yaml.safe_dump_all(docs))
    out = cluster.run_kubectl("-n", NS, "create", "token", "app", "--audience=barge", "--duration=1h")
    (work / "store").mkdir()
    (work / "policy.yaml").write_text(yaml.safe_dump({"storage": {"prefixes": [f"file://{work}/store/{{tenant}}/"]}}))
    return out.stdout.strip()


def wait_healthy(url: str, proc: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{url} exited with {proc.returncode}")
        try:
            with urllib.request.urlopen(url, timeout=1):  # noqa: S310 (http://127.0.0.1 only)
                return
        except OSError:
            time.sleep(0.2)
    raise TimeoutError(url)


def admin(cluster: localcluster.Cluster) -> tuple[str, dict[str, str], ssl.SSLContext | bool]:
    config = yaml.safe_load(cluster.kubeconfig.read_text())
    entry = config["clusters"][0]["cluster"]
    tls: ssl.SSLContext | bool = False
    if entry.get("certificate-authority"):
        tls = ssl.create_default_context(cafile=entry["certificate-authority"])
    return entry["server"], {"Authorization": f"Bearer {config['users'][0]['user']['token']}"}, tls


def peak_rss_mb(pid: int) -> float:
    for row in Path(f"/proc/{pid}/status").read_text().splitlines():
        if row.startswith("VmHWM:"):
            return int(row.split()[1]) / 1024
    return float("nan")


# --- timed parts -----------------------------------------------------------------------------------------------
async def post_file(session: aiohttp.ClientSession, url: str, headers: dict[str, str], path: Path) -> tuple[float, Any]:
    with path.open("rb") as handle:
        form = aiohttp.FormData()
        form.add_field("purpose", "batch")
        form.add_field("file", handle, filename="in.jsonl", content_type="application/jsonl")
        started = time.perf_counter()
        async with session.post(url, data=form, headers=headers) as answer:
            body = await answer.json()
            if answer.status != 200:
                raise RuntimeError(f"{url}: {answer.status} {body}")
        return time.perf_counter() - started, body


def store(path: Path, prefix: str) -> tuple[float, str]:
    started = time.perf_counter()
    url = f"{prefix}floor-{os.urandom(4).hex()}.jsonl"
    with path.open("rb") as handle:
        lines = (line.rstrip(b"\n") for line in handle)  # as the gateway hands them on: no newline
        write_lines(url, lines, StoragePolicy(prefixes=(prefix,)))
    return time.perf_counter() - started, url


def read_back(url: str, prefix: str) -> tuple[float, int]:
    started = time.perf_counter()
    size = sum(len(line) + 1 for _, line in read_lines(url, StoragePolicy(prefixes=(prefix,))))
    return time.perf_counter() - started, size


async def get_body(session: aiohttp.ClientSession, url: str, headers: dict[str, str]) -> tuple[float, int]:
    """Seconds to read the whole body of `url`, and its bytes."""
    started = time.perf_counter()
    size = 0
    async with session.get(url, headers=headers) as answer:
        if answer.status != 200:
            raise RuntimeError(f"{url}: {answer.status} {await answer.text()}")
        async for chunk in answer.content.iter_chunked(1 << 16):
            size += len(chunk)
    return time.perf_counter() - started, size


async def timed(call: Any) -> float:
    started = time.perf_counter()
    await call()
    return time.perf_counter() - started


async def load(session: aiohttp.ClientSession, url: str, headers: dict[str, str], tls: Any) -> float:
    """GETs per second of `url` at CONCURRENCY clients for SECONDS (answers read, non-200 raise)."""
    done = 0
    end = time.perf_counter() + SECONDS

    async def worker() -> None:
        nonlocal done
        while time.perf_counter() < end:
            async with session.get(url, headers=headers, ssl=tls) as answer:
                await answer.read()
                if answer.status != 200:
                    raise RuntimeError(f"{url}: {answer.status}")
            done += 1

    started = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(CONCURRENCY)))
    return done / (time.perf_counter() - started)


async def measure(cluster: localcluster.Cluster, work: Path, gw: str, floor: str, token: str, gw_pid: int) -> None:
    auth = {"Authorization": f"Bearer {token}"}
    server, admin_auth, tls = admin(cluster)
    jobs_url = f"{server}/apis/barge.dev/v1alpha1/namespaces/{NS}/llmbatchjobs"
    prefix = f"file://{work}/store/bench/floor/"
    (work / "store" / "bench" / "floor").mkdir(parents=True)
    rows, downloads = [], []
    connector = aiohttp.TCPConnector(limit=CONCURRENCY)
    async with aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=600)) as session:
        last_batch = ""
        for n in SIZES:
            path = work / f"in-{n}.jsonl"
            size = write_file(path, n)
            through, raw, stored = [], [], []
            for _ in range(2):
                seconds, made = await post_file(session, f"{gw}/v1/files", auth, path)
                if made.get("bytes") != size:
                    raise RuntimeError(f"gateway stored {made.get('bytes')} of {size} bytes")
                through.append(seconds)
                raw_seconds, raw_made = await post_file(session, f"{floor}/upload", {}, path)
                raw.append(raw_seconds)
                stored_seconds, stored_url = await asyncio.to_thread(store, path, prefix)
                stored.append(stored_seconds)
            file_id = made["id"]
            fetched, raw_fetched, read = [], [], []
            for _ in range(2):
                seconds, got = await get_body(session, f"{gw}/v1/files/{file_id}/content", auth)
                if got != size:
                    raise RuntimeError(f"gateway sent {got} of {size} bytes")
                fetched.append(seconds)
                raw_fetched.append((await get_body(session, f"{floor}/download/{raw_made['name']}", {}))[0])
                read_seconds, read_size = await asyncio.to_thread(read_back, stored_url, prefix)
                if read_size != size:
                    raise RuntimeError(f"barge.storage read {read_size} of {size} bytes")
                read.append(read_seconds)
            mb = size / 1e6
            downloads.append(
                (
                    f"{n:,} lines, {mb:.1f} MB",
                    f"{min(fetched):.2f} s, {mb / min(fetched):.1f} MB/s",
                    f"{min(raw_fetched):.2f} s, {mb / min(raw_fetched):.1f} MB/s "
                    f"({min(fetched) / min(raw_fetched):.1f}x)",
                    f"{min(read):.2f} s, {mb / min(read):.1f} MB/s ({min(fetched) / min(read):.1f}x)",
                )
            )
            rss = peak_rss_mb(gw_pid)
            body = {"input_file_id": file_id, "endpoint": "/v1/chat/completions", "completion_window": "24h"}
            creates, floors = [], []
            for _ in range(CREATES):

                async def create(body: dict[str, str] = body) -> None:
                    nonlocal last_batch
                    async with session.post(f"{gw}/v1/batches", json=body, headers=auth) as answer:
                        batch = await answer.json()
                        if answer.status != 200:
                            raise RuntimeError(f"create: {answer.status} {batch}")
                        last_batch = batch["id"]

                creates.append(await timed(create))
            name = "gw-" + last_batch.removeprefix("batch_")
            async with session.get(f"{jobs_url}/{name}", headers=admin_auth, ssl=tls) as answer:
                job = await answer.json()
            meta = job["metadata"]
            template = {**job, "metadata": {k: meta[k] for k in ("namespace", "labels", "annotations")}}
            template.pop("status", None)
            for i in range(CREATES):
                obj = {**template, "metadata": {**template["metadata"], "name": f"floor-{n}-{i}"}}

                async def direct(obj: dict[str, Any] = obj) -> None:
                    async with session.post(jobs_url, json=obj, headers=admin_auth, ssl=tls) as answer:
                        await answer.read()
                        if answer.status != 201:
                            raise RuntimeError(f"API server create: {answer.status}")

                floors.append(await timed(direct))
            mb = size / 1e6
            ratio = statistics.median(creates) / statistics.median(floors)
            rows.append(
                (
                    f"{n:,} lines, {mb:.1f} MB",
                    f"{min(through):.2f} s, {mb / min(through):.1f} MB/s, {n / min(through):,.0f} lines/s",
                    f"{min(raw):.2f} s, {mb / min(raw):.1f} MB/s ({min(through) / min(raw):.1f}x)",
                    f"{min(stored):.2f} s, {mb / min(stored):.1f} MB/s ({min(through) / min(stored):.1f}x)",
                    f"{rss:.0f} MB",
                    f"{statistics.median(creates) * 1000:.1f} ms ({1 / statistics.median(creates):.0f}/s)",
                    f"{statistics.median(floors) * 1000:.1f} ms ({ratio:.1f}x)",
                )
            )
        gets = await load(session, f"{gw}/v1/batches/{last_batch}", auth, None)
        direct_gets = await load(session, f"{jobs_url}/{name}", admin_auth, tls)

    head = (
        "file",
        "upload via gateway",
        "floor: raw aiohttp upload",
        "floor: barge.storage write",
        "gateway peak RSS",
        "create (median)",
        "floor: API server create",
    )
    print("\n| " + " | ".join(head) + " |")
    print("|" + " --- |" * len(head))
    for row in rows:
        print("| " + " | ".join(row) + " |")
    down = ("file", "download via gateway", "floor: raw aiohttp download", "floor: barge.storage read")
    print("\n| " + " | ".join(down) + " |")
    print("|" + " --- |" * len(down))
    for row in downloads:
        print("| " + " | ".join(row) + " |")
    print(
        f"\nGET /v1/batches/{{id}} at {CONCURRENCY} concurrent clients, {SECONDS:.0f} s: {gets:,.0f} req/s; "
        f"floor (the API server's GET of the same job, admin token): {direct_gets:,.0f} req/s "
        f"({gets / direct_gets:.0%} of it)"
    )


def main() -> None:
    if sys.argv[1:2] == ["--floor-server"]:
        floor_server(int(sys.argv[2]), Path(sys.argv[3]))
        return
    work = Path(tempfile.mkdtemp(prefix="barge-bench-gateway-"))
    state = work / "cluster"
    procs: list[subprocess.Popen[bytes]] = []
    try:
        started = time.monotonic()
        cluster = localcluster.up(state)
        token = install(cluster, work)
        print(f"control plane ready in {time.monotonic() - started:.1f} s")
        gw_port, floor_port = free_port(), free_port()
        env = {**os.environ, "KUBECONFIG": str(cluster.kubeconfig), "BARGE_POLICY_FILE": str(work / "policy.yaml")}
        log = (work / "gateway.log").open("wb")
        command = [
            sys.executable,
            "-m",
            "barge.cli",
            "gateway",
            "--port",
            str(gw_port),
            "--max-upload-bytes",
            str(10**9),
        ]
        procs.append(subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT))
        (work / "raw").mkdir()
        floor = [sys.executable, __file__, "--floor-server", str(floor_port), str(work / "raw")]
        procs.append(subprocess.Popen(floor))
        wait_healthy(f"http://127.0.0.1:{gw_port}/healthz", procs[0])
        for _ in range(100):  # the floor server answers no GET: wait for its port
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", floor_port)) == 0:
                    break
            time.sleep(0.1)
        asyncio.run(
            measure(cluster, work, f"http://127.0.0.1:{gw_port}", f"http://127.0.0.1:{floor_port}", token, procs[0].pid)
        )
    finally:
        for proc in procs:
            proc.terminate()
            proc.wait(10)
        localcluster.down(state)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
