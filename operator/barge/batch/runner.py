"""JobRunner: one reconcile step of an LLMBatchJob, resumable from the ledger at any point.

`step()` is what both `barge run` (in a loop) and the operator (on a timer) call. Each step: plan once,
reconcile open intents (adopt orphans or release), poll live batches and ingest ended ones, apply the
deadline, submit pending items in shards or send them through the synchronous fallback, then judge. Every
decision is derived from the ledger, so a process killed anywhere resumes without duplicate batches.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import time
from collections.abc import Callable, Iterable, Iterator
from decimal import Decimal

from barge.batch import (
    admission_queue,
    adoption,
    budget,
    capacity,
    failpoints,
    plan,
    planner,
    prices,
    retention,
    structured,
    tenant_budget,
)
from barge.batch.bounded import bound
from barge.batch.fallback import send_pending
from barge.batch.ingest import give_up, ingest, report_events
from barge.batch.job import EngineSettings, Job
from barge.batch.offloop import run as off_loop
from barge.batch.outputs import write_outputs
from barge.batch.outputs_parquet import Form
from barge.batch.render import PlanError
from barge.batch.snapshot import LEDGER_MISMATCH, Snapshot, build_snapshot, ledger_mismatch, mismatch_message
from barge.budget_policy import BudgetPolicy
from barge.ledger import ItemUpdate, Ledger, lifetime
from barge.providers.base import BatchInfo, BatchProvider
from barge.providers.errors import Fatal, Invalid, ProviderError, Transient
from barge.providers.upload import Replay
from barge.storage import join, write_lines

log = logging.getLogger("barge.batch")
Event = Callable[[str, str, str], None]  # (reason, message, type Normal|Warning)
NOT_ADMITTED = "NotAdmitted"  # ledger phase: the template can never be planned; fatal holds why
STOPPING = "Stopping"  # ledger phase: a fatal answer was seen; live batches are being cancelled and collected
STOP_GRACE = 900.0  # seconds a stopping job waits for its cancelled batches before failing without them


class JobRunner:
    def __init__(
        self,
        job: Job,
        provider: BatchProvider,
        ledger: Ledger,
        price_table: prices.PriceTable,
        settings: EngineSettings | None = None,
        *,
        clock: Callable[[], float] = time.time,
        on_event: Event | None = None,
        sync_only: bool = False,
        sync_limits: tuple[int, int, int] | None = None,
        guard: asyncio.Lock | None = None,
        halted: Callable[[], bool] = lambda: False,
        admission: admission_queue.Gate | None = None,
        budgets: BudgetPolicy | None = None,
    ) -> None:
        self.job = job
        self.provider = provider
        self.ledger = ledger
        self.prices = budget.job_prices(price_table, job.spec, job.model, job.pool_price)
        cap = tenant_budget.cap_for(ledger, budgets, price_table, job.key, job.tenant, job.model, clock)
        self.budget = budget.Budget(ledger, job.key, job.spec, job.model, self.prices, cap)
        self.settings = settings or EngineSettings()
        self.clock = clock
        self.on_event = on_event or (lambda reason, message, kind: log.info("%s: %s", reason, message))
        self.sync_only = sync_only
        self.sync_limits = sync_limits  # (concurrency, RPM, TPM) of a pool; None: spec.fallback's
        self.factory = plan.RequestFactory(job.model, job.spec.request)
        answers = job.spec.request.response_format  # every answer read against its schema (batch/structured.py)
        self.checker = structured.Checker(answers.json_schema) if answers is not None else None
        self.encode_line = self.factory.line_encoder(provider.encode)
        self.tag = hashlib.sha256(job.key.encode()).hexdigest()[:32]
        self.unknown: list[str] = []
        self.guard = guard or asyncio.Lock()
        """Held around each batch create and its record; the operator's delete handler takes it too."""
        self.halted = halted
        self._inflight: asyncio.Future[bool] | None = None
        """True once the job is being deleted: no new batch is created."""
        self.admission: admission_queue.Gate = admission or admission_queue.LocalGate()
        """Asked before batches are created: the deployment's batch quota and the token_limit_exceeded backoff."""
        self._sized = False  # unsized items (planned by an older Barge) measured (_measure_unsized)

    # --- the step ---------------------------------------------------------------------------------------------
    async def step(self) -> Snapshot:
        key = self.job.key
        self.unknown = ledger_mismatch(self.ledger, key, self.job.status_batches)
        if self.unknown:  # never submit again what was maybe paid already: hold until the ledger is back
            if LEDGER_MISMATCH not in self.job.reported:
                self.on_event(LEDGER_MISMATCH, mismatch_message(self.unknown), "Warning")
            return self.snapshot()
        row = self.ledger.ensure_job(
            key,
            self.job.spec_hash,
            self.job.tenant,
            self.job.model,
            provider=self.job.spec.provider.type,
            schedule=self.job.schedule,
        )
        if row["spec_hash"] != self.job.spec_hash and not row["fatal"]:
            self._fail(
                "the ledger holds this job with a different spec; immutable fields cannot change "
                "(use a new name or a new ledger)"
            )
        row = self.ledger.job(key) or row
        if row["phase"] == STOPPING:
            await self._stop(row["fatal"])
            return self.snapshot()
        if row["fatal"] or row["phase"] in ("Succeeded", "Failed"):
            await self._clean_up()  # a Failed job's, or one left pending by a crash or an upgrade
            return self.snapshot()
        if row["phase"] == NOT_ADMITTED:  # a template that can never plan: not re-planned (the spec is immutable)
            cutoff = self.job.spec.deadline
            if cutoff is not None and self.clock() >= cutoff.timestamp():
                self._fail(f"deadline passed without admission: {row['fatal']}")
            return self.snapshot()
        if not row["planned"]:
            if self.budget.unpriced:  # not admitted: the snapshot says which price is missing
                return self.snapshot()
            await self._plan()
        self._admit_tenant()  # Refused (Admitted=False TenantBudgetExceeded) until the tenant's month has room
        if self.budget_hold():
            return self.snapshot()
        try:
            await self._reconcile_intents(give_up=bool(row["cutoff_done"]))
            await self._poll(cutoff_done=bool(row["cutoff_done"]))
            if self.job.spec.suspend:
                await self._cancel_live("Suspended", "suspended: in-flight batches cancelled, holding")
                return self.snapshot()
            now = self.clock()
            deadline = self.job.spec.deadline.timestamp() if self.job.spec.deadline else None
            if deadline is not None and now >= deadline and not row["cutoff_done"]:
                await self._cancel_live(
                    "DeadlineExceeded",
                    "deadline reached: in-flight batches cancelled, leftovers go to the synchronous path",
                )
                self.ledger.set_job(key, cutoff_done=True)
            if self.sync_only or (deadline is not None and deadline - now < self.settings.min_batch_window):
                await self._fallback()
            else:
                await self._submit()
        except Fatal as exc:  # billing, auth: cancel and collect what is in flight, then fail (see _stop)
            message = bound(f"{exc.error_type}: {exc.message}")
            self.ledger.set_job(key, fatal=message, phase=STOPPING, completed_at=self.clock())
            self.on_event(
                "Stopping", f"{message}; cancelling in-flight batches and collecting their results", "Warning"
            )
            await self._stop(message)
            return self.snapshot()
        await self._judge()
        return self.snapshot()

    def snapshot(self) -> Snapshot:
        return build_snapshot(
            self.ledger,
            self.job,
            self.prices,
            self.settings.status_batches,
            self.clock(),
            held=not self.unknown and self.budget_hold(),
            unknown_batches=self.unknown,
        )

    # --- planning and budget ----------------------------------------------------------------------------------
    async def _plan(self) -> None:
        job = self.job
        spec = job.spec.model_dump(mode="json", by_alias=True)
        what = planner.PlanInput(spec, job.run_date, job.tenant, job.model, self.provider.name)
        try:  # within the admin's ledger limits (batch/capacity.py): Refused, with no row left, if over one
            done = await capacity.plan(
                job.key, what, job.lines, self.ledger, self.settings.ledger_limits, self.settings.plan_limits
            )
        except PlanError as exc:
            if exc.permanent:
                self.ledger.set_job(job.key, phase=NOT_ADMITTED, fatal=bound(str(exc)))
            raise
        total = done.lines
        self.ledger.set_job(
            self.job.key, planned=True, total=total, unlisted=done.unlisted, started_at=self.clock(), phase="Submitting"
        )
        invalid = self.ledger.counts(self.job.key).get("invalid", 0)
        estimate = self.estimate(batch=not self.sync_only)
        self.on_event(
            "Admitted",
            f"{total} items read, {invalid} invalid; estimated cost up to ${prices.money(estimate)}",
            "Normal",
        )
        if invalid:
            self.on_event("InvalidItems", f"{invalid} input lines are invalid (see failures.jsonl)", "Warning")

    def estimate(self, *, batch: bool, states: tuple[str, ...] = ("pending", "submitting", "submitted")) -> Decimal:
        return self.budget.estimate(batch=batch, states=states)

    def _admit_tenant(self) -> None:
        cap = self.budget.tenant
        if cap is not None:
            tokens, count = self.ledger.estimate_inputs(self.job.key, ("pending", "submitting", "submitted"))
            cap.admit((tokens, count * self.job.spec.request.max_tokens), batch=not self.sync_only)

    def budget_hold(self) -> bool:
        return self.budget.hold(sync_only=self.sync_only)

    # --- submission -------------------------------------------------------------------------------------------
    def _shard_lines(self, shard: str) -> Iterator[bytes]:
        items = self.ledger.iter_items(self.job.key, "custom_id, payload", ("submitting",), shard=shard, page_size=1000)
        for _, cid, payload in items:  # pages of 1,000 payloads (~2 MB at 2 KB each): memory stays flat
            yield self.encode_line(cid, payload)

    def _shards(self) -> Iterator[plan.Span]:
        """The shards of the pending items, cut by count and by encoded bytes (`plan.spans`, the cut `barge plan`
        shows), and on a deployment with a batch quota by estimated tokens, so that every shard of a job over the
        quota fits it. Streamed: no shard's rows are held."""
        limit = min(self.provider.max_requests, self.settings.max_shard_requests or self.provider.max_requests)
        max_bytes = min(self.provider.max_bytes, self.settings.max_shard_bytes or self.provider.max_bytes)
        self._measure_unsized()
        rows = (
            (int(line), int(size), int(tries), int(tokens))
            for line, size, tries, tokens in self.ledger.iter_items(
                self.job.key, "size, attempts, est_tokens", ("pending",)
            )
        )
        yield from plan.spans(rows, limit, max_bytes, self.admission.max_shard_tokens)

    def _measure_unsized(self) -> None:
        """Items planned before sizes were recorded (size 0) are measured once, so no shard is cut blind. Once per
        runner: planning records every item's size, so none can be unsized later, and the search reads every
        pending item (1 s per million)."""
        if self._sized:
            return
        sizes = [
            (len(self.provider.encode(self.factory(cid, payload))), cid)
            for _, cid, payload in self.ledger.iter_items(
                self.job.key, "custom_id, payload", ("pending",), unsized=True
            )
        ]
        self.ledger.set_sizes(self.job.key, sizes)
        self._sized = True

    async def _submit(self) -> None:
        if not self.budget.within(self.on_event):
            return
        shards = list(self._shards())
        least = getattr(self.provider, "min_requests", 0)  # Bedrock: records per job at least (100 by default)
        if least and 0 < sum(s.count for s in shards) < least:  # too few for any batch: the synchronous path
            pending = sum(s.count for s in shards)
            self.on_event(
                "BelowBatchMinimum",
                f"{pending} pending requests, under {self.provider.name}'s minimum of {least} per batch: "
                "sent through the synchronous path",
                "Normal",
            )
            await self._fallback()
            return
        shards = [s for s in shards if s.count >= least]  # a tail under it waits, then goes alone (above)
        async with self.admission.turn([s.tokens for s in shards]) as admitted:  # the deployment's batch quota
            for s in shards[:admitted]:
                # Shielded: a daemon cancelled mid-create (the job is being deleted) still records what it created,
                # and holds the guard until then, so the delete handler sees and cancels that batch too.
                self._inflight = asyncio.ensure_future(self._create(s.first, s.last, s.count, s.tries))
                if not await asyncio.shield(self._inflight):
                    return

    async def settle(self) -> None:
        """Wait for a create the caller stopped waiting for (it was cancelled): the provider must stay open
        until that batch is recorded."""
        if self._inflight is not None and not self._inflight.done():
            with contextlib.suppress(Exception):
                await asyncio.shield(self._inflight)

    async def _create(self, first: int, last: int, count: int, tries: int) -> bool:
        """Intent, create, record for one shard; False when submission should stop for this step."""
        key = self.job.key
        async with self.guard:  # the delete handler waits for a create in flight to be recorded
            if self.halted():  # the job is being deleted: nothing new is created
                return False
            shard = f"s{self.ledger.intent_count(key):05d}"
            self.ledger.open_intent(key, shard, tries + 1, first, last, count)
            failpoints.hit(failpoints.AFTER_INTENT)
            try:
                info = await self.provider.create_batch(
                    Replay(lambda: self._shard_lines(shard)),  # read from the ledger as it is sent, again on a retry
                    {"barge_job": self.tag, "barge_shard": shard},
                    output_expires_after=self._retention()[1] * retention.DAY,
                )
            except Transient as exc:
                if exc.error_type == admission_queue.TOKEN_LIMIT:
                    self.admission.batch_ended(True)
                # The create may still have landed (a 500 after accept): the next step adopts or releases.
                self.on_event(
                    "CreateUncertain", f"shard {shard}: {exc.message}; reconciling before retrying", "Warning"
                )
                return False
            except Invalid as exc:
                self.ledger.abandon_intent(key, shard)
                rejected = [
                    ItemUpdate(cid, "invalid", exc.error_type, exc.message)
                    for line, cid in self.ledger.iter_items(key, "custom_id", ("pending",))
                    if first <= line <= last
                ]
                self.ledger.apply(key, rejected)
                self.on_event("BatchRejected", f"shard {shard} rejected: {exc.message}", "Warning")
                return True
            except Fatal:
                self.ledger.abandon_intent(key, shard)
                raise
            failpoints.hit(failpoints.AFTER_CREATE)
            self._record(shard, tries + 1, count, info)
        self.on_event("Submitted", f"batch {info.id}: {count} requests (shard {shard}, attempt {tries + 1})", "Normal")
        return True

    def _record(self, shard: str, attempt: int, requests: int, info: BatchInfo) -> None:
        self.ledger.record_batch(
            self.job.key,
            shard,
            info.id,
            self.provider.name,
            attempt,
            requests,
            info.status,
            info.created_at.timestamp(),
        )

    async def _reconcile_intents(self, *, give_up: bool = False) -> None:
        await adoption.reconcile_intents(
            self.ledger,
            self.job.key,
            self.provider,
            self.tag,
            self.settings.adopt_window,
            self._record,
            self.on_event,
            give_up=give_up,
        )

    # --- polling and ingestion ----------------------------------------------------------------------------------
    async def _poll(self, *, cutoff_done: bool = False) -> None:
        """Retrieve every live batch and ingest the ended ones. One batch the provider cannot answer for does not
        stop the others nor the deadline: it is skipped with a Warning, and past the deadline cut-off a batch the
        provider does not know (404) is given up (its items failed, never resubmitted: it might still run)."""
        for batch in self.ledger.batches_of(self.job.key, live_only=True):
            try:
                info = await self.provider.retrieve(batch["batch_id"])
            except (Invalid, Transient) as exc:
                if isinstance(exc, Invalid) and cutoff_done:
                    n = give_up(
                        self.ledger, self.job.key, batch["batch_id"], f"{exc.error_type}: {exc.message}", self.clock
                    )
                    self.on_event(
                        "BatchLost",
                        bound(f"batch {batch['batch_id']} given up at the deadline ({n} items failed): {exc.message}"),
                        "Warning",
                    )
                else:
                    self.on_event(
                        "PollFailed", bound(f"batch {batch['batch_id']}: {exc.error_type}: {exc.message}"), "Warning"
                    )
                continue
            if info.status != batch["status"]:
                self.ledger.set_batch(self.job.key, batch["batch_id"], status=info.status)
            if info.ended:
                report = await ingest(
                    self.ledger,
                    self.job.key,
                    self.provider,
                    info,
                    self.job.spec.retry.max_attempts,
                    self._write_part,
                    self.clock,
                    check=None if self.checker is None else self.checker.page,
                )
                self.admission.batch_ended(  # after ingestion: the quota it held is free in the ledger now
                    bool(info.errors) and str(info.errors[0].get("code")) == admission_queue.TOKEN_LIMIT
                )
                report_events(info, report, self.on_event)

    def _write_part(self, name: str, lines: Iterable[bytes]) -> None:
        """Copy results as they arrive (provider results expire after 14-30 days)."""
        write_lines(join(join(self.job.spec.output.url, "parts"), f"{name}.jsonl"), lines, self.job.storage)

    async def _cancel_live(self, reason: str, message: str) -> None:
        live = [b for b in self.ledger.batches_of(self.job.key, live_only=True) if not b["canceled"]]
        for batch in live:
            try:
                await self.provider.cancel(batch["batch_id"])
            except ProviderError as exc:
                log.warning("cancel of %s failed: %s", batch["batch_id"], exc)
                continue
            self.ledger.set_batch(self.job.key, batch["batch_id"], canceled=True)
        if live:
            self.on_event(reason, f"{message} ({len(live)} batches)", "Warning")

    # --- the synchronous path -----------------------------------------------------------------------------------
    async def _fallback(self) -> None:
        """The pending items through the synchronous path, read a page at a time (batch/fallback.py)."""
        fb = self.job.spec.fallback
        limits = (fb.concurrency, fb.requests_per_minute, fb.tokens_per_minute)
        if self.sync_limits is not None and self.sync_limits[0]:
            limits = self.sync_limits
        await send_pending(
            self.ledger,
            self.job.key,
            self.provider,
            self.factory,
            self.budget,
            sync=fb.sync or self.sync_only,
            limits=limits,
            max_tokens=self.job.spec.request.max_tokens,
            tries=self.settings.sync_tries,
            on_event=self.on_event,
            halted=self.halted,
            check=None if self.checker is None else self.checker.result,
            clock=self.clock,
        )

    # --- judgement ------------------------------------------------------------------------------------------------
    async def _stop(self, message: str) -> None:
        """A fatal answer (or a deadline passed while steps kept failing: faults.fail_at_deadline) stops the job,
        but its live batches are paid for: cancel them, ingest what they return, then fail. Waits at most
        STOP_GRACE seconds, and not at all once the provider refuses us; a collection that keeps failing
        (storage, ledger) is retried until then."""
        row = self.ledger.job(self.job.key) or {}
        await self._cancel_live("Stopping", "stopping: in-flight batches cancelled")
        try:
            await self._poll(cutoff_done=True)
        except Fatal:
            pass  # cannot even read: nothing more to collect
        except Exception:
            if self.clock() - float(row.get("completed_at") or 0) < STOP_GRACE:
                raise  # a failed step, retried
            log.warning("%s: collecting its batches still fails after the stop grace", self.job.key, exc_info=True)
        else:
            if (
                self.ledger.batches_of(self.job.key, live_only=True)
                and self.clock() - float(row.get("completed_at") or 0) < STOP_GRACE
            ):
                return
        live = [b["batch_id"] for b in self.ledger.batches_of(self.job.key, live_only=True)]
        if live:
            message += f"; batches not collected (kept in the ledger): {', '.join(live[:20])}"
        self._fail(message)
        await self._failed_outputs()
        await self._clean_up()

    def _fail(self, message: str) -> None:
        """The job is Failed; a caller with outputs to write then awaits `_failed_outputs` (off the loop)."""
        self.ledger.set_job(self.job.key, fatal=message, phase="Failed", completed_at=self.clock())
        self.on_event("Failed", message, "Warning")

    async def _outputs(self) -> None:
        """results and failures (jsonl or parquet) written off the engine loop (batch/offloop.py)."""
        job = self.job
        await off_loop(
            "outputs",
            write_outputs,
            self.ledger,
            job.key,
            job.spec.output.url,
            job.storage,
            self.checker is not None,
            Form.of(job.spec),
        )

    async def _failed_outputs(self) -> None:
        """A failed job's outputs, off the engine loop (batch/offloop.py), then its texts dropped."""
        await self._outputs()
        retention.drop_texts(self.ledger, self.job.key, self.job.spec.retention, self.clock())

    async def _write_outputs(self) -> None:
        """results.jsonl and failures.jsonl, once every item has its final outcome. A job that keeps no payload
        drops them meanwhile, in a thread (they are not read here; on SQLite zeroing them is ~0.5 s per 100,000)."""
        dropping = None
        if retention.drops_payloads_early(self.job.spec.retention):
            loop = asyncio.get_running_loop()  # run_in_executor starts it now, not when write_outputs lets go
            dropping = loop.run_in_executor(None, lifetime.drop_payloads, self.ledger, self.job.key)
        try:  # off the engine loop: a slow store stalls this job only (M10)
            await self._outputs()
        finally:
            if dropping is not None:
                await asyncio.wait([dropping])  # never left running past the step
        if dropping is not None:
            dropping.result()

    def _retention(self) -> tuple[bool, int]:
        s = self.settings
        return retention.choose(self.job.spec.retention, s.delete_provider_copies, s.output_expires_after_days)

    async def _clean_up(self) -> bool:
        """Delete the provider copies of ingested batches (call only once outputs are written); True: none pending."""
        job, delete = self.job.key, self._retention()[0]
        return (
            await retention.clean_up(self.ledger, job, self.provider, delete=delete, on_event=self.on_event)
        ).pending == 0

    async def _judge(self) -> None:
        counts = self.ledger.counts(self.job.key)
        if any(counts.get(s) for s in ("pending", "submitting", "submitted")):
            return
        row = self.ledger.job(self.job.key) or {}
        if row.get("phase") in ("Succeeded", "Failed") or row.get("fatal"):
            return
        total = sum(counts.get(s, 0) for s in ("succeeded", "refused", "invalid", "failed"))
        good = counts.get("succeeded", 0) + counts.get("refused", 0)
        if total == 0:
            self._fail("the input has no items")
            await self._failed_outputs()
            return
        ratio = Decimal(good) / Decimal(total)
        phase = "Succeeded" if ratio >= self.job.spec.ratio else "Failed"
        await self._write_outputs()
        if not await self._clean_up():  # the final phase waits until no provider copy is pending
            return
        self.ledger.set_job(self.job.key, phase=phase, completed_at=self.clock())
        retention.drop_texts(self.ledger, self.job.key, self.job.spec.retention, self.clock())
        self.on_event(
            "Completed" if phase == "Succeeded" else "Failed",
            f"{good}/{total} items with a result ({ratio:.4f} vs successRatio {self.job.spec.success_ratio})",
            "Normal" if phase == "Succeeded" else "Warning",
        )
