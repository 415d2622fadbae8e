"""`barge plan` of a pipeline: LLMBatchJobs whose later stages take an earlier one's results (spec.input.fromJob).

For each stage: its items, estimated tokens and cost at most (batch and sync); then the pipeline's total beside
the cost of sending every item to the large model. A later stage's items are not known before its upstream runs,
so they are estimated:

| the selection ratio: select evaluated on   | when                                                                |
| ------------------------------------------ | ------------------------------------------------------------------- |
| a sample of upstream results               | `--sample results.jsonl` (last night's), joined to the input by id  |
| the upstream's input lines                 | no sample: each line as a succeeded result with no output           |
| none (1.0: every item, said in the output) | select judged no line, or chose none on the input and reads output  |

The all-large baseline: every first-stage item, with the first stage's prompt, on the most expensive stage's
model and with that stage's maxTokens. Costs are "at most" like a job's plan (outputs at maxTokens).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any

import typer
from rich import box
from rich.console import Console
from rich.table import Table

from barge.api.batchjob import LLMBatchJob, LLMBatchJobSpec
from barge.batch import plan as planning
from barge.batch import prices
from barge.batch.render import Renderer
from barge.cascade.select import SelectError, Selector, activation
from barge.cli import local
from barge.providers import make_provider
from barge.providers.base import Usage

SAMPLE_LINES = 2000
READS_OUTPUT = re.compile(r"\boutput(_json)?\b")


@dataclass
class StagePlan:
    name: str
    model: str
    items: float
    in_tokens: float
    out_tokens: float
    batch: Decimal
    sync: Decimal
    note: str = ""


def stages(jobs: list[LLMBatchJob]) -> list[LLMBatchJob]:
    """The jobs in pipeline order (each after the one it takes from); exits 2 on a loop or a missing stage."""
    by_name = {str(j.metadata.get("name")): j for j in jobs}
    ordered: list[LLMBatchJob] = []
    seen: set[str] = set()
    for job in jobs:
        chain: list[LLMBatchJob] = []
        node: LLMBatchJob | None = job
        while node is not None and str(node.metadata.get("name")) not in seen:
            if node in chain:
                local.err.print("[red]the stages' fromJob names make a loop[/red]")
                raise typer.Exit(2)
            chain.append(node)
            source = node.spec.input.from_job
            if source is not None and source.name not in by_name:
                local.err.print(
                    f"[red]stage {node.metadata.get('name')!r} takes from {source.name!r}, not in the file[/red]"
                )
                raise typer.Exit(2)
            node = by_name[source.name] if source is not None else None
        for n in reversed(chain):
            seen.add(str(n.metadata.get("name")))
            ordered.append(n)
    return ordered


def _cost(table: prices.PriceTable, model: str, tokens: float, out: float) -> tuple[Decimal, Decimal]:
    usage = Usage(input_tokens=round(tokens), output_tokens=round(out))
    return table.cost(model, usage, batch=True), table.cost(model, usage, batch=False)


def _rows(spec: LLMBatchJobSpec, run_date: str, tenant: str, items: list[tuple[int, bytes]]) -> list[dict[str, Any]]:
    provider = make_provider(spec.provider.type, "plan-only", base_url=spec.provider.base_url)
    factory = planning.RequestFactory(spec.provider.model, spec.request)
    renderer = Renderer(spec, run_date, tenant)
    return list(planning.admit(items, renderer, factory, provider.encode))


def _sample(path: Path | None, inputs: dict[str, dict[str, Any]], id_field: str) -> list[dict[str, Any]]:
    """Result lines to evaluate select on: the sample's, else each upstream input as a succeeded, empty result."""
    if path is not None:
        out = []
        for raw in path.read_text().splitlines()[:SAMPLE_LINES]:
            try:
                result = json.loads(raw)
            except ValueError:
                continue
            if isinstance(result, dict):
                out.append(result)
        return out
    return [{"id": str(fields.get(id_field)), "status": "succeeded", "output": ""} for fields in inputs.values()]


def plan_pipeline(jobs: list[LLMBatchJob], path: Path, sample: Path | None = None) -> list[StagePlan]:
    table = prices.load(None)
    ordered = stages(jobs)
    first = ordered[0]
    job = local.build_job(first, path)
    lines = list(job.lines())
    rows = _rows(first.spec, job.run_date, job.tenant, lines)
    valid = [r for r in rows if r["state"] != "invalid"]
    items: dict[str, float] = {}
    inputs: dict[str, dict[str, Any]] = {}
    for _, raw in lines[:SAMPLE_LINES]:
        try:
            fields = json.loads(raw)
        except ValueError:
            continue
        if isinstance(fields, dict):
            inputs[str(fields.get(first.spec.input.id_field))] = fields
    tokens = sum(r["est_tokens"] for r in valid)
    out = len(valid) * first.spec.request.output_bound
    plans = [
        StagePlan(
            str(first.metadata.get("name")),
            first.spec.provider.model,
            len(valid),
            tokens,
            out,
            *_cost(table, first.spec.provider.model, tokens, out),
        )
    ]
    items[plans[0].name] = len(valid)
    for stage in ordered[1:]:
        source = stage.spec.input.from_job
        assert source is not None
        selector = Selector.compile(source)
        results = _sample(sample, inputs, first.spec.input.id_field)
        chosen: list[tuple[int, bytes]] = []
        judged = 0
        for n, result in enumerate(results, start=1):
            fields = inputs.get(str(result.get("id")), {})
            names = activation({**result, "line": n}, fields)
            try:
                ok = selector.chosen(names)
                judged += 1
                if ok:
                    chosen.append(
                        (n, json.dumps(selector.item(result, fields, names, stage.spec.input.id_field)).encode())
                    )
            except SelectError:
                continue
        note = f"select on {'the sample' if sample else 'the input'}: {len(chosen)}/{judged} chosen"
        ratio = len(chosen) / judged if judged else 1.0
        if not judged or (not chosen and sample is None and READS_OUTPUT.search(source.select)):
            ratio = 1.0  # cost at most: the output select reads is not known before the upstream runs
            note = "select reads the upstream's output: every item assumed (pass --sample results.jsonl)"
        count = items[source.name] * ratio
        stage_rows = [r for r in _rows(stage.spec, job.run_date, job.tenant, chosen) if r["state"] != "invalid"]
        per_item = sum(r["est_tokens"] for r in stage_rows) / len(stage_rows) if stage_rows else 0.0
        if not stage_rows:  # nothing chosen in the sample: the stage's own template on an empty item
            per_item = 0.0
        tin, tout = count * per_item, count * stage.spec.request.output_bound
        name = str(stage.metadata.get("name"))
        items[name] = count
        plans.append(
            StagePlan(
                name,
                stage.spec.provider.model,
                count,
                tin,
                tout,
                *_cost(table, stage.spec.provider.model, tin, tout),
                note,
            )
        )
    return plans


def baseline(jobs: list[LLMBatchJob], plans: list[StagePlan]) -> tuple[str, Decimal, Decimal]:
    """Every first-stage item on the stages' most expensive model (at its stage's maxTokens)."""
    table = prices.load(None)
    first = plans[0]
    by_name = {str(j.metadata.get("name")): j for j in jobs}

    def dear(p: StagePlan) -> Decimal:
        return table.cost(p.model, Usage(input_tokens=1_000_000, output_tokens=1_000_000), batch=True)

    large = max(plans, key=dear)
    out = first.items * by_name[large.name].spec.request.output_bound
    batch, sync = _cost(table, large.model, first.in_tokens, out)
    return large.model, batch, sync


def print_pipeline(jobs: list[LLMBatchJob], path: Path, sample: Path | None = None) -> None:
    plans = plan_pipeline(jobs, path, sample)
    console = Console(width=max(Console().width, 100))  # stage names are long: never cut in a pipe's 80 columns
    view = Table(title=f"pipeline: {len(plans)} stages", box=box.SIMPLE_HEAD)
    for col in ("stage", "model", "items", "in tok", "out tok", "batch", "sync"):
        view.add_column(col, justify="right" if col not in ("stage", "model") else "left", no_wrap=True)
    for p in plans:
        view.add_row(
            p.name,
            p.model,
            f"{p.items:,.0f}",
            local.compact(round(p.in_tokens)),
            local.compact(round(p.out_tokens)),
            local.cents(p.batch),
            local.cents(p.sync),
        )
    total_batch, total_sync = sum((p.batch for p in plans), Decimal(0)), sum((p.sync for p in plans), Decimal(0))
    model, base_batch, base_sync = baseline(jobs, plans)
    view.add_row("total", "", "", "", "", local.cents(total_batch), local.cents(total_sync))
    view.add_row(
        "all-large",
        model,
        f"{plans[0].items:,.0f}",
        local.compact(round(plans[0].in_tokens)),
        "",
        local.cents(base_batch),
        local.cents(base_sync),
    )
    view.caption = (
        "items of later stages: estimated; out tok: maxTokens each (0 for embeddings); batch, sync: cost at most"
    )
    console.print(view)
    for p in plans[1:]:
        console.print(f"{p.name}: {p.note}")
    console.print(f"cascade total: batch ${total_batch:.4f}, sync ${total_sync:.4f}", soft_wrap=True)
    console.print(f"all-large baseline ({model}): batch ${base_batch:.4f}, sync ${base_sync:.4f}", soft_wrap=True)
