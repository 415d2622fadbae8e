"""Entry point of the `barge` console script.

Each sub-command is a thin shell over a lower layer; this module only parses arguments and prints.
"""

from __future__ import annotations

import asyncio
import logging
import time
from pathlib import Path
from typing import Annotated

import typer

from barge import __version__
from barge.cli.report import report_app

# Each command imports what it needs when it runs: `barge run` starts without the emulator's web server, the
# generators or the operator config (about a second of imports, measured, that every command waited for).

app = typer.Typer(
    no_args_is_help=True,
    add_completion=False,
    help="Barge: LLM work nobody is waiting for, off the request path.",
)
ledger_app = typer.Typer(no_args_is_help=True, help="Maintenance of the ledger.")
app.add_typer(ledger_app, name="ledger")
app.add_typer(report_app, name="report")


@app.command()
def version() -> None:
    """Print Barge's version."""
    typer.echo(__version__)


@app.command()
def crds(
    out: Annotated[Path, typer.Option("--out", "-o", help="Directory to write the CRDs to.")] = Path("crds"),
    chart: Annotated[
        Path | None, typer.Option(help="Also write the chart's CRD templates and RBAC rules (charts/barge).")
    ] = None,
    docs: Annotated[
        Path | None, typer.Option(help="Also write the site's reference pages (docs/reference; needs --chart).")
    ] = None,
    check: Annotated[bool, typer.Option("--check", help="Fail if the files on disk differ; write nothing.")] = False,
) -> None:
    """Generate crds/*.yaml (and the chart's CRDs and RBAC, and the site's reference pages) from the code."""
    from barge.cli import generate

    files = generate.generated_files(out, chart, docs, app)
    if check:
        stale = generate.stale(files)
        if stale:
            typer.echo(f"stale generated files (run `make crds`): {', '.join(map(str, stale))}", err=True)
            raise typer.Exit(1)
        return
    for path in generate.write(files):
        typer.echo(f"wrote {path}")


@app.command()
def emulator(
    host: Annotated[str, typer.Option(help="Address to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port to listen on (0 picks a free one).")] = 8099,
    profile: Annotated[Path | None, typer.Option(help="YAML pacing and fault profile.")] = None,
    state: Annotated[Path | None, typer.Option(help="Keep batches and files in this file across restarts.")] = None,
    vllm: Annotated[str | None, typer.Option("--vllm", help="Stand in for a vLLM server serving this model.")] = None,
    max_num_seqs: Annotated[int, typer.Option(help="--vllm: requests running at once; the rest wait.")] = 16,
    api_key: Annotated[
        str | None,
        typer.Option("--api-key", envvar="VLLM_API_KEY", help="--vllm: /v1 answers 401 without this bearer key."),
    ] = None,
    model: Annotated[str | None, typer.Option("--model", help="vLLM's `serve` flag: implies --vllm.")] = None,
    served_model_name: Annotated[
        str | None, typer.Option("--served-model-name", help="vLLM's `serve` flag: the model served (over --model).")
    ] = None,
    tensor_parallel_size: Annotated[int, typer.Option(help="vLLM's flag, accepted and unused (no GPU).")] = 1,
    max_num_batched_tokens: Annotated[int, typer.Option(help="vLLM's flag, accepted and unused.")] = 0,
    gpu_memory_utilization: Annotated[float, typer.Option(help="vLLM's flag, accepted and unused (no GPU).")] = 0.9,
    max_model_len: Annotated[int, typer.Option(help="vLLM's flag, accepted and unused.")] = 0,
    enable_chunked_prefill: Annotated[
        bool, typer.Option("--enable-chunked-prefill/--no-enable-chunked-prefill", help="vLLM's flag, unused.")
    ] = True,
) -> None:
    """Run the local provider emulator (Anthropic, OpenAI and Azure OpenAI batch + sync APIs).

    Base URLs: Anthropic SDK http://HOST:PORT, OpenAI SDK http://HOST:PORT/v1, AzureOpenAI azure_endpoint
    http://HOST:PORT, Mistral http://HOST:PORT/mistral, Gemini (google-genai http_options base_url)
    http://HOST:PORT/gemini, Bedrock (boto3 endpoint_url of bedrock and bedrock-runtime) http://HOST:PORT/bedrock.
    Any API key works except the literal `invalid`. Bedrock's records and results live in a real S3 at
    BARGE_EMULATOR_S3_ENDPOINT (moto's server); BARGE_EMULATOR_BEDROCK_MIN_RECORDS is its minimum records per job
    (default 100).

    Given vLLM's `serve` flags (--model, --served-model-name, --host, --port, --max-num-seqs, --api-key, and the GPU
    ones, accepted and unused), it stands in for vLLM as --vllm does: `barge emulator` is then a drop-in command for
    an engine InferencePool running Barge's image (spec.engine.command: [barge, emulator]).
    """
    vllm = vllm or served_model_name or model
    from barge.emulator.profile import load_profile
    from barge.emulator.server import serve

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    try:
        parsed = load_profile(profile)
    except (OSError, ValueError) as exc:
        typer.echo(f"bad profile {profile}: {exc}", err=True)
        raise typer.Exit(2) from exc
    asyncio.run(serve(host, port, parsed, state, vllm_model=vllm, max_num_seqs=max_num_seqs, api_key=api_key))


@app.command()
def providers() -> None:
    """Print the providers table: limits per shard, batch price ratio, idempotency, orphan lookup, retention.

    One block per provider type (the table has too many columns for a terminal); docs/reference/providers.md has it
    as a table.
    """
    from barge.providers import facts

    for n, f in enumerate(facts.FACTS):
        typer.echo(("\n" if n else "") + f.type)
        for name, cell in list(zip(facts.COLUMNS, facts.row(f), strict=True))[1:]:
            typer.echo(f"  {name}: {facts.plain(cell)}")


@app.command()
def plan(
    manifest: Annotated[Path, typer.Argument(help="LLMBatchJob or LLMBatchSchedule manifest (YAML).")],
    runs: Annotated[int, typer.Option(help="LLMBatchSchedule: how many upcoming runs to list.", min=1)] = 5,
    sample: Annotated[
        Path | None, typer.Option(help="A pipeline: upstream results (results.jsonl) to evaluate select on.")
    ] = None,
) -> None:
    """Validate a manifest and print its plan; submits nothing.

    A job: shards, token and cost estimates and invalid lines. A schedule: its next runs with their run dates
    and deadlines in its time zone, then the plan of the next run's job.
    """
    from barge.cli import schedule_plan

    schedule_plan.plan_any(manifest, runs, sample=sample)


@app.command()
def run(
    manifest: Annotated[Path, typer.Argument(help="LLMBatchJob manifest (YAML).")],
    ledger: Annotated[str, typer.Option(help="Ledger: a SQLite path or postgresql:// URL.")] = ".barge/ledger.db",
    json_output: Annotated[bool, typer.Option("--json", help="Print one final JSON object.")] = False,
    poll: Annotated[float, typer.Option(help="Seconds between polls.", envvar="BARGE_POLL_SECONDS")] = 5.0,
    min_batch_window: Annotated[
        float,
        typer.Option(
            help="Closer than this to the deadline (s), leftovers go synchronous.", envvar="BARGE_MIN_BATCH_WINDOW"
        ),
    ] = 3600.0,
    max_shard_requests: Annotated[
        int,
        typer.Option(help="Requests per batch at most (0 = the provider's limit).", envvar="BARGE_MAX_SHARD_REQUESTS"),
    ] = 0,
    max_items: Annotated[
        int,
        typer.Option(
            min=1,
            help="Input lines the job may have (the operator takes this from its policy's ledger.maxItemsPerJob); "
            "a longer input is refused whole.",
            envvar="BARGE_MAX_ITEMS_PER_JOB",
        ),
    ] = 1_000_000,
    planner_memory_mb: Annotated[
        int,
        typer.Option(
            min=64,
            help="Address space of the planner process that renders the templates, MiB (as the operator's).",
            envvar="BARGE_PLANNER_MEMORY_MB",
        ),
    ] = 256,
) -> None:
    """Run an LLMBatchJob manifest to completion locally; rerunning the same command resumes it.

    Exit 0 when the job Succeeded, 1 when it Failed, 2 when the manifest is invalid, 3 when it cannot go on without
    a person (not admitted: no price for a budgeted model, a template that does not compile, a policy's refusal; or
    over its budget): the reason and message are printed. While it waits (planning) each progress line says why.
    """
    from barge.batch.job import EngineSettings
    from barge.batch.planner import PlanLimits
    from barge.cli import local
    from barge.limits import LedgerLimits

    default = LedgerLimits()  # the local ledger's own tenant holds this job and the earlier ones it kept
    room = LedgerLimits(max_items, max(default.max_items_per_tenant, 2 * max_items))
    settings = EngineSettings(
        min_batch_window=min_batch_window,
        max_shard_requests=max_shard_requests,
        ledger_limits=room,
        plan_limits=PlanLimits(memory_bytes=planner_memory_mb << 20),
    )
    code = local.run_command(manifest, ledger, json_output, poll, settings)
    raise typer.Exit(code)


@app.command("demo-data")
def demo_data(
    kind: Annotated[str, typer.Argument(help="Only `claims` today.")] = "claims",
    count: Annotated[int, typer.Option(help="How many lines.")] = 6000,
    out: Annotated[Path, typer.Option(help="Where to write the JSONL.")] = Path("claims.jsonl"),
) -> None:
    """Write generated sample input (deterministic) for the demo and the examples."""
    from barge.cli.demo_data import claims

    if kind != "claims":
        raise typer.BadParameter("only `claims` is available")
    out.parent.mkdir(parents=True, exist_ok=True)
    with out.open("wb") as fh:
        for line in claims(count):
            fh.write(line + b"\n")
    typer.echo(f"wrote {count} claims to {out}")


@app.command()
def gateway(
    host: Annotated[str, typer.Option(help="Address to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port to listen on.")] = 8098,
    audience: Annotated[
        str, typer.Option(envvar="BARGE_GATEWAY_AUDIENCE", help="Audience callers' ServiceAccount tokens must carry.")
    ] = "barge",
    max_upload_bytes: Annotated[
        int, typer.Option(envvar="BARGE_GATEWAY_MAX_UPLOAD_BYTES", help="Largest input file in bytes.", min=1)
    ] = 200 * 1024 * 1024,
    max_lines: Annotated[
        int, typer.Option(envvar="BARGE_GATEWAY_MAX_LINES", help="Most requests per input file.", min=1)
    ] = 50_000,
    metrics_port: Annotated[
        int,
        typer.Option(
            envvar="BARGE_GATEWAY_METRICS_PORT",
            help="Port of the gateway's /metrics server, apart from the callers' port (0: none).",
            min=0,
        ),
    ] = 0,
    tls_cert: Annotated[
        Path | None,
        typer.Option(envvar="BARGE_GATEWAY_TLS_CERT", help="PEM certificate chain: serve the callers' port as HTTPS."),
    ] = None,
    tls_key: Annotated[
        Path | None, typer.Option(envvar="BARGE_GATEWAY_TLS_KEY", help="PEM private key of --tls-cert.")
    ] = None,
) -> None:
    """The OpenAI Files and Batches API in front of Barge: a batch is an LLMBatchJob of the caller's namespace."""
    import os

    from barge.config import load_policy
    from barge.gateway.app import serve
    from barge.gateway.server import GatewaySettings
    from barge.gateway.tls import TLSConfigError, server_tls

    try:
        tls = server_tls(tls_cert, tls_key)
    except TLSConfigError as exc:
        typer.echo(f"barge gateway: {exc}", err=True)
        raise typer.Exit(2) from exc
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        policy = load_policy(
            os.environ.get("BARGE_POLICY_FILE"),
            os.environ.get("BARGE_ALLOWED_FILE_ROOTS", ""),
            shared_file_roots=os.environ.get("BARGE_SHARED_FILE_ROOTS", "").strip().lower() in ("true", "1", "yes"),
        )
    except ValueError as exc:  # a policy the admin must fix: one line naming the key, not a traceback
        typer.echo(f"barge gateway: {exc}", err=True)
        raise typer.Exit(2) from exc
    settings = GatewaySettings(
        audience=audience, max_upload_bytes=max_upload_bytes, max_lines=max_lines, metrics_port=metrics_port
    )
    serve(host, port, policy, settings, tls)


@app.command()
def operator(
    namespace: Annotated[
        list[str] | None, typer.Option("--namespace", "-n", help="Namespace to watch (repeat).")
    ] = None,
    all_namespaces: Annotated[bool, typer.Option("--all-namespaces", "-A", help="Watch every namespace.")] = False,
    metrics_port: Annotated[int, typer.Option(help="Port of /metrics and /healthz (0: off).")] = 8080,
    ledger: Annotated[str | None, typer.Option(help="Ledger URL (default BARGE_LEDGER_URL).")] = None,
    peering: Annotated[
        str | None, typer.Option(help="Kopf peering name (several replicas); default standalone.")
    ] = None,
    priority: Annotated[
        str | None,
        typer.Option(help="Peering priority: an integer or `auto` (distinct per pod; BARGE_PEERING_PRIORITY)."),
    ] = None,
) -> None:
    """Run the Barge operator (Kopf): LLMBatchJobs in the watched namespaces, to completion.

    Settings from the environment: BARGE_LEDGER_URL, BARGE_ALLOWED_FILE_ROOTS (colon-separated roots for
    file:// inputs and outputs), BARGE_POLL_SECONDS, BARGE_MIN_BATCH_WINDOW, BARGE_MAX_SHARD_REQUESTS, BARGE_PRICES,
    BARGE_PEERING_PRIORITY, BARGE_PEERING_LIFETIME, BARGE_SHARD (i/N: this process is shard i of N, see
    docs/how-to/sharding.md).
    Watches every namespace when none is named.
    """
    from barge.operator import ports

    if metrics_port:  # first, before Kopf's imports: a taken port is an exit naming it, not a retried activity
        try:
            ports.listen(metrics_port).close()
        except ports.PortUnavailable as exc:
            typer.echo(f"barge operator: {exc}", err=True)
            raise typer.Exit(1) from exc
    from barge.config import OperatorConfig, peering_priority
    from barge.operator.main import run as run_operator

    config = OperatorConfig.from_env(
        namespaces=tuple(namespace or ()),
        all_namespaces=all_namespaces or not namespace,
        metrics_port=metrics_port,
        ledger_url=ledger,
        peering=peering,
        peering_priority=peering_priority(priority) if priority is not None else None,
    )
    run_operator(config)


@app.command()
def worker(config: Annotated[Path, typer.Option("--config", help="Worker config (the operator's ConfigMap).")]) -> None:
    """Run one replica of a queue worker (Redis Streams or RabbitMQ) against its InferencePool."""
    from barge.workers.main import run as run_worker

    run_worker(config)


@ledger_app.command("purge")
def ledger_purge(
    older_than: Annotated[
        str, typer.Option(help="Drop the texts of every job that ended longer ago than this (12h, 30d, ...).")
    ] = "30d",
    ledger: Annotated[
        str, typer.Option(help="Ledger: a SQLite path or postgresql:// URL.", envvar="BARGE_LEDGER_URL")
    ] = ".barge/ledger.db",
    deleted_older_than: Annotated[
        str,
        typer.Option(help="Remove every row of the jobs deleted longer ago than this (the policy's default: 7d)."),
    ] = "7d",
) -> None:
    """Drop rendered prompts and model outputs from the ledger: of jobs that ended before --older-than, and of any
    job past its spec.retention keep times. The audit rows (ids, states, usage, cost, batches) stay, except those of
    jobs deleted before --deleted-older-than, which go whole (their counts stay in per-tenant totals)."""
    from barge.ledger import Ledger, lifetime

    try:
        age = lifetime.seconds(older_than)
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="--older-than") from None
    try:
        deleted_age = lifetime.seconds(deleted_older_than)
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="--deleted-older-than") from None
    now = time.time()
    db = Ledger(ledger)
    try:
        payloads, outputs = lifetime.drop_texts(db, now, finished_before=now - age)
        purged = lifetime.purge_deleted(db, now, deleted_age)
    finally:
        db.close()
    typer.echo(
        f"dropped {payloads} prompts and {outputs} outputs" + (f"; removed {purged} deleted jobs" if purged else "")
    )
