"""`spec.input.fromJob` in the cluster: find the upstream LLMBatchJob, wait for it, and hand the step a
CascadeRunner (barge/cascade/) that takes its results as they land.

What the downstream's status says, and why:

| situation                                         | Admitted=False reason | retried until    |
| ------------------------------------------------- | --------------------- | ---------------- |
| fromJob.namespace is another namespace            | CrossNamespace        | the deadline     |
| fromJob.name is the job itself                    | CascadeLoop           | the deadline     |
| the upstream does not exist (yet) or its spec is invalid | WaitingForUpstream | the deadline  |
| the upstream has no final result yet              | WaitingForUpstream    | it has one       |

An upstream deleted after this job took from it closes this job's input: what was taken is finished (event
UpstreamDeleted), and the job is judged on it.

Everything is read in this job's namespace only: the upstream's input and results.jsonl under the upstream's own
admitted storage policy (the same namespace, so the same tenant prefixes and credential rules).
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from barge.api.batchjob import TERMINAL_PHASES, LLMBatchJobSpec
from barge.batch.job import Job
from barge.batch.runner import JobRunner
from barge.cascade.lines import Lines, inline_lines, text_lines
from barge.cascade.runner import CascadeRunner
from barge.cascade.select import Selector
from barge.cascade.source import FINAL, Upstream
from barge.operator import admission
from barge.operator.kube import GROUP, VERSION
from barge.policy import Refused
from barge.storage import StoragePolicy, read_lines

if TYPE_CHECKING:
    from barge.operator.jobs import Context

RunnerFactory = Callable[..., JobRunner]
WAITING = "WaitingForUpstream"


async def prepare(ctx: Context, meta: dict[str, Any], spec: LLMBatchJobSpec, job: Job) -> tuple[Job, RunnerFactory]:
    """The job and the runner its step uses: unchanged without fromJob; else a CascadeRunner over the upstream,
    or `Refused` (Admitted=False, Pending) while there is nothing to take."""
    source = spec.input.from_job
    if source is None:
        return job, JobRunner
    namespace = str(meta["namespace"])
    if source.namespace and source.namespace != namespace:
        raise Refused(
            "CrossNamespace",
            f"spec.input.fromJob.namespace {source.namespace!r}: a job takes results only from its own namespace "
            f"({namespace!r})",
        )
    if source.name == meta["name"]:
        raise Refused("CascadeLoop", "spec.input.fromJob.name is this job itself")
    body = await _get(ctx, namespace, source.name)
    if body is None and (await asyncio.to_thread(ctx.ledger.job, job.key) or {}).get("planned"):
        # deleted after this job took from it: what was taken is finished, nothing more can come
        gone = Upstream(source.name, "", "Deleted", True, "", StoragePolicy(), inline_lines([]))
        return replace(job, lines=inline_lines([])), functools.partial(
            CascadeRunner, upstream=gone, selector=Selector.compile(source)
        )
    if body is None:
        raise Refused(WAITING, f"waiting for LLMBatchJob {source.name!r}: not found in namespace {namespace!r}")
    try:
        upstream_spec = LLMBatchJobSpec.model_validate(dict(body.get("spec") or {}))
    except ValueError:
        raise Refused(WAITING, f"waiting for LLMBatchJob {source.name!r}: its spec is not valid") from None
    umeta = body["metadata"]
    key = f"{namespace}/{umeta['name']}/{umeta['uid']}"
    row, counts = await asyncio.to_thread(lambda: (ctx.ledger.job(key) or {}, ctx.ledger.counts(key)))
    phase = str(row.get("phase") or (body.get("status") or {}).get("phase") or "Pending")
    terminal = phase in TERMINAL_PHASES
    if not terminal and not any(counts.get(s) for s in FINAL):
        raise Refused(WAITING, f"waiting for LLMBatchJob {source.name!r} ({phase}): it has no results yet")
    admitted = await admission.admit(ctx.kube, ctx.config.policy, namespace, upstream_spec)
    upstream = Upstream(
        name=source.name,
        key=key,
        phase=phase,
        terminal=terminal,
        output_url=upstream_spec.output.url,
        storage=admitted.output,
        lines=await _lines(ctx, namespace, upstream_spec, admitted),
        deadline=upstream_spec.deadline.timestamp() if upstream_spec.deadline else None,
        output_format=upstream_spec.output.format,
    )
    factory = functools.partial(CascadeRunner, upstream=upstream, selector=Selector.compile(source))
    return replace(job, lines=inline_lines([])), factory


async def _get(ctx: Context, namespace: str, name: str) -> dict[str, Any] | None:
    api = client.CustomObjectsApi(await ctx.kube.api())
    try:
        found: dict[str, Any] = await api.get_namespaced_custom_object(GROUP, VERSION, namespace, "llmbatchjobs", name)
    except ApiException as exc:
        if exc.status == 404:
            return None
        raise
    return found


async def _lines(ctx: Context, namespace: str, spec: LLMBatchJobSpec, admitted: admission.Admission) -> Lines:
    if spec.input.inline is not None:
        return inline_lines(spec.input.inline)
    if spec.input.config_map_ref is not None:
        ref = spec.input.config_map_ref
        return text_lines(await ctx.kube.configmap_value(namespace, ref.name, ref.key))
    if spec.input.url is not None:
        url, policy = spec.input.url, admitted.input
        return lambda: read_lines(url, policy)
    return inline_lines([])  # an upstream that is itself a downstream: its items' input is its own upstream's
