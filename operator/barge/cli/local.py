"""`barge plan` and `barge run`: an LLMBatchJob manifest run on a laptop, no Kubernetes needed.

The same engine the operator drives; here the input comes from a path or URL (relative paths resolve
against the manifest), the API key from the environment, and the ledger from ./.barge/ledger.db.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from datetime import UTC, datetime
from decimal import ROUND_HALF_UP, Decimal
from pathlib import Path
from typing import Any

import typer
import yaml
from pydantic import ValidationError
from rich import box
from rich.console import Console
from rich.table import Table

from barge.api.batchjob import LLMBatchJob
from barge.batch import plan as planning
from barge.batch import prices, zygote
from barge.batch.job import EngineSettings, Job
from barge.batch.render import PlanError, Renderer
from barge.batch.runner import JobRunner
from barge.batch.snapshot import Snapshot
from barge.cli import waiting
from barge.ledger import Ledger
from barge.policy import Refused
from barge.providers import facts, make_provider
from barge.providers.base import Usage
from barge.storage import StorageError, StoragePolicy, read_lines

KEY_VARIABLES = {
    "anthropic": "ANTHROPIC_API_KEY",
    "openai": "OPENAI_API_KEY",
    "azure-openai": "AZURE_OPENAI_API_KEY",
    "openai-compatible": "OPENAI_API_KEY",
    "mistral": "MISTRAL_API_KEY",
    "gemini": "GEMINI_API_KEY",  # the name google-genai itself reads
    "vertex": "BARGE_VERTEX_SECRET",  # the JSON a vertex job's Secret holds (service account key, project, gcsPrefix)
    "bedrock": "BARGE_BEDROCK_SECRET",  # the JSON a bedrock job's Secret holds (keys, region, roleArn, S3 prefixes)
}
err = Console(stderr=True)


def load_manifest(path: Path) -> LLMBatchJob:
    try:
        docs = [d for d in yaml.safe_load_all(path.read_text()) if d]
    except (OSError, yaml.YAMLError) as exc:
        err.print(f"[red]cannot read {path}: {exc}[/red]")
        raise typer.Exit(2) from exc
    jobs = [d for d in docs if isinstance(d, dict) and d.get("kind") == "LLMBatchJob"]
    if len(jobs) != 1:
        err.print(f"[red]{path} must hold exactly one LLMBatchJob (found {len(jobs)})[/red]")
        raise typer.Exit(2)
    try:
        return LLMBatchJob.model_validate(jobs[0])
    except ValidationError as exc:
        for problem in exc.errors():
            where = ".".join(str(p) for p in problem["loc"])
            err.print(f"[red]invalid manifest: {where}: {problem['msg']}[/red]")
        raise typer.Exit(2) from exc


def build_job(manifest: LLMBatchJob, path: Path) -> Job:
    spec = manifest.spec
    if spec.provider.type == "pool":
        err.print("[red]provider.type pool needs the operator (the pool lives in a cluster)[/red]")
        raise typer.Exit(2)
    if spec.input.config_map_ref is not None:
        err.print("[red]input.configMapRef needs the operator; use input.url or input.inline locally[/red]")
        raise typer.Exit(2)
    name = str(manifest.metadata.get("name", path.stem))
    namespace = str(manifest.metadata.get("namespace", "default"))
    created = manifest.metadata.get("creationTimestamp")
    run_date = spec.run_date or (str(created)[:10] if created else datetime.now(UTC).strftime("%Y-%m-%d"))
    policy = StoragePolicy(base_dir=path.resolve().parent)
    if spec.input.inline is not None:
        inline = spec.input.inline

        def lines() -> Any:
            return ((n, json.dumps(item).encode()) for n, item in enumerate(inline, start=1))
    else:
        url = str(spec.input.url)

        def lines() -> Any:
            return read_lines(url, policy)

    return Job(
        key=f"local:{path.resolve()}:{namespace}/{name}",
        spec=spec,
        tenant=spec.tenant or namespace,
        run_date=run_date,
        model=spec.provider.model,
        lines=lines,
        storage=policy,
    )


def api_key(kind: str) -> str:
    key = os.environ.get("BARGE_API_KEY") or os.environ.get(KEY_VARIABLES.get(kind, ""), "")
    if not key:
        err.print(f"[red]no API key: set BARGE_API_KEY or {KEY_VARIABLES.get(kind)}[/red]")
        raise typer.Exit(2)
    return key


def compact(n: int) -> str:
    """Token counts for a narrow table: 950, 12.3k, 4.6M."""
    for limit, suffix in ((1_000_000_000, "G"), (1_000_000, "M"), (1_000, "k")):
        if n >= limit:
            return f"{n / limit:.1f}{suffix}"
    return str(n)


def cents(value: Decimal) -> str:
    """USD to the cent; a cost that rounds to nothing but is not zero shows as <$0.01."""
    if 0 < value < Decimal("0.005"):
        return "<$0.01"
    return f"${value.quantize(Decimal('0.01'), rounding=ROUND_HALF_UP):,}"


def provider_line(kind: str, max_requests: int, max_bytes: int, ratio: Decimal) -> str:
    """The job's row of the providers table (barge.providers.facts), with the limits its adapter really uses."""
    row = facts.BY_TYPE.get(kind)
    limits = f"at most {max_requests:,} requests and {facts.size(max_bytes)} per shard"
    if row is None:  # an engine pool: no provider batch
        return f"provider {kind}: {limits}"
    plain = {k: facts.plain(getattr(row, k)) for k in ("idempotent", "orphan", "retention", "window")}
    return (
        f"provider {kind}: {limits}; batch price {ratio} x list; create idempotent: {plain['idempotent']}; "
        f"an orphan is found by {plain['orphan']}; retention deletes {plain['retention']}; window {plain['window']}"
    )


def plan_command(manifest_path: Path) -> None:
    plan_job(load_manifest(manifest_path), manifest_path)


def plan_job(manifest: LLMBatchJob, manifest_path: Path) -> None:
    """Print the plan of one job; its tables fit an 80-column terminal."""
    job = build_job(manifest, manifest_path)
    spec = job.spec
    provider = make_provider(
        spec.provider.type, "plan-only", base_url=spec.provider.base_url, api_version=spec.provider.api_version
    )
    factory = planning.RequestFactory(job.model, spec.request)
    renderer = Renderer(spec, job.run_date, job.tenant)
    table = prices.load(Path(os.environ["BARGE_PRICES"]) if os.environ.get("BARGE_PRICES") else None)
    valid: list[tuple[int, int, int, int]] = []  # (line, encoded size, attempts, estimated tokens), as plan.spans
    invalid: list[dict[str, Any]] = []
    tokens = 0
    try:
        for row in planning.admit(job.lines(), renderer, factory, provider.encode):
            if row["state"] == "invalid":
                invalid.append(row)
                continue
            valid.append((row["line"], row["size"], 0, row["est_tokens"]))
            tokens += row["est_tokens"]
    except StorageError as exc:
        err.print(f"[red]{exc}[/red]")
        raise typer.Exit(2) from exc
    shards = list(planning.spans(valid, provider.max_requests, provider.max_bytes))
    usage = Usage(input_tokens=tokens, output_tokens=len(valid) * spec.request.output_bound)
    out = Console()
    summary = Table(
        title=f"plan: {manifest.metadata.get('name')} ({spec.provider.type}, {job.model})", box=box.SIMPLE_HEAD
    )
    for col in ("items", "valid", "invalid", "shards", "in tok", "out tok", "batch", "sync"):
        summary.add_column(col, justify="right", no_wrap=True)
    summary.add_row(
        f"{len(valid) + len(invalid):,}",
        f"{len(valid):,}",
        f"{len(invalid):,}",
        str(len(shards)),
        compact(tokens),
        compact(usage.output_tokens),
        cents(table.cost(job.model, usage, batch=True)),
        cents(table.cost(job.model, usage, batch=False)),
    )
    summary.caption = "in tok: estimated; out tok: maxTokens each (0 for embeddings); batch, sync: cost at most"
    out.print(summary)
    for n, shard in enumerate(shards):
        out.print(f"shard {n}: {shard.count} requests, {shard.size / 1e6:.1f} MB")
    out.print(provider_line(spec.provider.type, provider.max_requests, provider.max_bytes, table.batch_discount))
    if table.price(job.model) is None and spec.budget and spec.budget.price is None:
        out.print(
            f"[red]no price known for {job.model!r} and spec.budget is set: barge run (and the operator) would leave "
            "it not admitted (PriceMissing); give the price in spec.budget.price (USD per million input/output tokens) "
            "or in the price table BARGE_PRICES points at[/red]"
        )
    elif table.price(job.model) is None:
        out.print(
            f"[yellow]no price known for {job.model!r}: costs show 0 (set spec.budget.price or BARGE_PRICES)[/yellow]"
        )
    for row in invalid[:50]:
        out.print(f"[yellow]line {row['line']}: {row['error_type']}: {row['reason']}[/yellow]")
    if len(invalid) > 50:
        out.print(f"[yellow]... and {len(invalid) - 50} more invalid lines[/yellow]")
    if spec.budget and table.cost(job.model, usage, batch=True) > spec.budget.max_cost:
        out.print(
            f"[red]the estimate is over spec.budget.maxCostUSD ({spec.budget.max_cost_usd}): "
            "barge run would refuse to submit[/red]"
        )


def _progress_line(snap: Snapshot) -> str:
    c = snap.counts
    line = (
        f"{snap.phase}: {c['succeeded'] + c['refused']}/{c['total']} done, {c['submitted']} in flight, "
        f"{c['pending']} pending, {c['invalid']} invalid, {c['failed']} failed, cost ${snap.usage['costUSD']}"
    )
    why = waiting.waiting_on(snap.conditions)  # what a job not yet admitted waits for
    return f"{line} (waiting: {why})" if why else line


def _stops(snap: Snapshot) -> bool:
    return snap.terminal or waiting.blocked(snap.phase, snap.conditions) is not None


async def _run(runner: JobRunner, poll: float, as_json: bool) -> Snapshot:
    tty = sys.stderr.isatty() and not as_json
    last = ""
    if tty:
        from rich.progress import BarColumn, Progress, TextColumn

        with Progress(
            TextColumn("{task.description}"), BarColumn(), TextColumn("{task.completed}/{task.total}"), console=err
        ) as bar:
            task = bar.add_task("starting", total=None)
            while True:
                snap = await runner.step()
                c = snap.counts
                why = waiting.waiting_on(snap.conditions)
                bar.update(
                    task,
                    total=c["total"] or None,
                    completed=c["succeeded"] + c["refused"] + c["invalid"] + c["failed"],
                    description=f"{snap.phase} ${snap.usage['costUSD']}" + (f" (waiting: {why})" if why else ""),
                )
                if _stops(snap):
                    return snap
                await asyncio.sleep(poll)
    while True:
        snap = await runner.step()
        line = _progress_line(snap)
        if line != last and not as_json:
            print(line, file=sys.stderr, flush=True)
            last = line
        if _stops(snap):
            return snap
        await asyncio.sleep(poll)


def run_command(manifest_path: Path, ledger_url: str, as_json: bool, poll: float, settings: EngineSettings) -> int:
    manifest = load_manifest(manifest_path)
    job = build_job(manifest, manifest_path)
    zygote.SERVER.warm()  # the planner server imports on the other core while this process loads its SDK
    spec = job.spec
    provider = make_provider(
        spec.provider.type,
        api_key(spec.provider.type),
        base_url=spec.provider.base_url,
        api_version=spec.provider.api_version,
    )
    ledger = Ledger(ledger_url)
    table = prices.load(Path(os.environ["BARGE_PRICES"]) if os.environ.get("BARGE_PRICES") else None)
    runner = JobRunner(
        job,
        provider,
        ledger,
        table,
        settings,
        on_event=lambda reason, message, kind: (
            None if as_json else print(f"[{reason}] {message}", file=sys.stderr, flush=True)
        ),
    )
    stuck: waiting.Blocked | None = None
    try:
        try:
            snap = asyncio.run(_run(runner, poll, as_json))
        except (PlanError, Refused) as exc:  # the operator's Admitted=False; here an exit naming it
            stuck = waiting.refused(exc)
            snap = runner.snapshot()
            snap.conditions = waiting.admitted_false(snap.conditions, stuck)
    except StorageError as exc:
        err.print(f"[red]{exc}[/red]")
        return 2
    finally:
        ledger.close()
    stuck = stuck or waiting.blocked(snap.phase, snap.conditions)
    if as_json:
        print(json.dumps(snap.to_json()))
    elif stuck is not None:
        err.print(f"{snap.phase}, and it cannot go on without you: {stuck}", style="red", markup=False, soft_wrap=True)
    else:
        print(
            f"{snap.phase}: {snap.message}; cost ${snap.usage['costUSD']} (saved ${snap.usage['savedUSD']}); "
            f"results: {spec.output.url}",
            file=sys.stderr,
        )
    if stuck is not None:
        return waiting.EXIT_NEEDS_A_PERSON
    return 0 if snap.phase == "Succeeded" else 1
