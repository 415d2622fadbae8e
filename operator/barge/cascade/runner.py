"""CascadeRunner: a JobRunner whose input is another job's results, taken a wave per step as they land.

Each step, before the engine's own step: one wave (feed.py) of the upstream's final results not taken yet, the
chosen ones planned into this job's ledger (the same planner process as any input, so templates stay sandboxed),
the ones select could not judge written `invalid`. The job then submits what it holds like any job, so stage 2's
first batch goes out while stage 1 still runs. It ends (the runner's judgement) only once its input is closed:

| closed when                                   | then                                                        |
| --------------------------------------------- | ----------------------------------------------------------- |
| the upstream is terminal (seen before a wave) | that wave took everything it will ever have                 |
| this job's deadline has passed                | what came is finished (sync fallback); a Warning names what |
|                                               | the upstream had not finished, which is never taken         |

Both deadlines are checked: an upstream whose deadline is after this job's is named in a Warning when the first
wave is taken. A closed job with no item is Succeeded if its upstream succeeded (nothing was selected tonight) and
Failed otherwise. The ledger limits apply to every wave (maxItemsPerJob, maxItemsPerTenant).
"""

from __future__ import annotations

import asyncio
import dataclasses
from datetime import UTC, datetime
from typing import Any

from barge.batch import planner
from barge.batch.bounded import bound
from barge.batch.render import PlanError
from barge.batch.runner import NOT_ADMITTED, STOPPING, JobRunner
from barge.batch.snapshot import Snapshot
from barge.cascade.feed import Wave, wave
from barge.cascade.select import Selector
from barge.cascade.source import Upstream
from barge.ledger import space
from barge.policy import Refused


def _when(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).isoformat(timespec="seconds")


class CascadeRunner(JobRunner):
    def __init__(self, *args: Any, upstream: Upstream, selector: Selector, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.upstream = upstream
        self.selector = selector
        self.closed = False
        """True once no more input will come (the upstream is terminal, or this job's deadline passed)."""

    async def step(self) -> Snapshot:
        key = self.job.key
        row = self.ledger.ensure_job(key, self.job.spec_hash, self.job.tenant, self.job.model)
        active = (
            row["spec_hash"] == self.job.spec_hash
            and not row["fatal"]
            and row["phase"] not in ("Succeeded", "Failed", STOPPING, NOT_ADMITTED)
        )
        if active and not self.job.spec.suspend and not self.budget.unpriced:
            await self._feed(row)
        snap = await super().step()
        if not snap.terminal and active and not self.closed:
            up = self.upstream
            snap = dataclasses.replace(
                snap, message=bound(f"{snap.message}; taking results from LLMBatchJob {up.name!r} ({up.phase})")
            )
        return snap

    async def _feed(self, row: dict[str, Any]) -> None:
        key, up, spec = self.job.key, self.upstream, self.job.spec
        deadline = spec.deadline.timestamp() if spec.deadline else None
        past = deadline is not None and self.clock() >= deadline
        if not row["planned"] and up.deadline is not None and deadline is not None and up.deadline > deadline:
            self.on_event(
                "UpstreamDeadline",
                f"LLMBatchJob {up.name!r} has deadline {_when(up.deadline)}, after this job's {_when(deadline)}: "
                "what it finishes after this job's deadline is not taken",
                "Warning",
            )
        if up.phase == "Deleted":
            self.closed = True
            self.on_event(
                "UpstreamDeleted", f"LLMBatchJob {up.name!r} was deleted: what was taken is finished", "Warning"
            )
            return
        found = await asyncio.to_thread(wave, self.ledger, key, up, self.selector, spec.input.id_field)
        if found.chosen or found.invalid:
            await asyncio.to_thread(self._check_room, row, found)
            await self._plan_wave(found)
        total = int(row["total"] or 0) + len(found.chosen) + len(found.invalid)
        if not row["planned"]:
            self.ledger.set_job(key, planned=True, total=total, started_at=self.clock(), phase="Submitting")
        elif total != row["total"]:
            self.ledger.set_job(key, total=total)
        if found.chosen or found.invalid:
            self.on_event(
                "Fed",
                f"{len(found.chosen)} items taken from LLMBatchJob {up.name!r} ({found.read} new results, "
                f"{found.passed_over} passed over by select, {len(found.invalid)} invalid); it is {up.phase}",
                "Normal",
            )
        if found.invalid:
            first = found.invalid[0]["reason"]
            self.on_event(
                "InvalidItems", bound(f"{len(found.invalid)} results could not be selected: {first}"), "Warning"
            )
        self.closed = up.terminal or past
        if past and not up.terminal:
            open_ = self.ledger.counts(up.key)
            left = sum(open_.get(s, 0) for s in ("pending", "submitting", "submitted"))
            self.on_event(
                "UpstreamOpenAtDeadline",
                f"deadline reached while LLMBatchJob {up.name!r} is {up.phase}: its {left} unfinished items are not "
                "taken; what was taken is finished",
                "Warning",
            )

    def _check_room(self, row: dict[str, Any], found: Wave) -> None:
        """The admin's ledger limits, for this wave's rows."""
        limits = self.settings.ledger_limits
        rows = int(row["total"] or 0) + len(found.chosen) + len(found.invalid)
        if rows > limits.max_items_per_job:
            raise Refused(
                "ItemLimit",
                f"LLMBatchJob {self.upstream.name!r} gives this job {rows} items, more than the "
                f"{limits.max_items_per_job} one job may have (policy ledger.maxItemsPerJob)",
            )
        held = space.tenant_items(self.ledger, self.job.tenant, but=self.job.key)
        if held + rows > limits.max_items_per_tenant:
            raise Refused(
                "ItemLimit",
                f"tenant {self.job.tenant!r} holds {held} items and this job would hold {rows}, over the "
                f"{limits.max_items_per_tenant} its jobs may hold together (policy ledger.maxItemsPerTenant)",
            )

    async def _plan_wave(self, found: Wave) -> None:
        job = self.job
        if found.invalid:
            await asyncio.to_thread(self.ledger.add_items, job.key, found.invalid)
        if not found.chosen:
            return
        what = planner.PlanInput(
            job.spec.model_dump(mode="json", by_alias=True), job.run_date, job.tenant, job.model, self.provider.name
        )
        chosen = found.chosen
        limits = dataclasses.replace(
            self.settings.plan_limits, listed_invalid=self.settings.ledger_limits.listed_invalid_lines
        )
        try:  # rows already there (a wave repeated after a crash) are kept as they are: ledger.add_frames
            await planner.plan(job.key, what, lambda: iter(chosen), self.ledger, limits)
        except PlanError as exc:
            if exc.permanent:
                self.ledger.set_job(job.key, phase=NOT_ADMITTED, fatal=bound(str(exc)))
            raise

    async def _judge(self) -> None:
        if not self.closed:
            return  # more input may come: the job is not judged on part of it
        counts = self.ledger.counts(self.job.key)
        if sum(
            counts.get(s, 0)
            for s in ("pending", "submitting", "submitted", "succeeded", "refused", "invalid", "failed")
        ):
            await super()._judge()
            return
        row = self.ledger.job(self.job.key) or {}
        if row.get("phase") in ("Succeeded", "Failed") or row.get("fatal"):
            return
        up = self.upstream
        await self._write_outputs()  # empty results.jsonl and failures.jsonl: the night had nothing to take
        if up.phase == "Succeeded":
            self.ledger.set_job(self.job.key, phase="Succeeded", completed_at=self.clock())
            self.on_event(
                "Completed", f"LLMBatchJob {up.name!r} succeeded and select chose none of its results", "Normal"
            )
        else:
            self._fail(f"LLMBatchJob {up.name!r} is {up.phase} and gave this job no item")
