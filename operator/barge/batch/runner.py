"""JobRunner: one reconcile step of an LLMBatchJob, resumable from the ledger at any point.

`step()` is what both `barge run` (in a loop) and the operator (on a timer) call. Each step: plan once,
reconcile open intents (adopt orphans or release), poll live batches and ingest ended ones, apply the
deadline, submit pending items in shards or send them through the synchronous fallback, then judge. Every
decision is derived from the ledger, so a process killed anywhere resumes without duplicate batches.
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from barge.api.batchjob import IMMUTABLE_SPEC_FIELDS, LLMBatchJobSpec
from barge.batch import failpoints, plan, prices
from barge.batch.fallback import RateLimiter, SyncItem, run_sync
from barge.batch.outputs import write_outputs
from barge.batch.render import Renderer
from barge.batch.routing import missing, route
from barge.batch.snapshot import Snapshot, build_snapshot
from barge.ledger import ItemUpdate, Ledger
from barge.providers.base import BatchInfo, BatchProvider, Outcome, Result, Usage
from barge.providers.errors import Fatal, Invalid, ProviderError, Transient
from barge.storage import StoragePolicy, join, write_lines

log = logging.getLogger("barge.batch")
Event = Callable[[str, str, str], None]  # (reason, message, type Normal|Warning)


@dataclass(frozen=True)
class EngineSettings:
    """Knobs of the engine; the defaults suit real providers, tests shrink them."""

    min_batch_window: float = 3600.0
    """Closer than this to the deadline, leftovers go to the sync path instead of a new batch."""
    adopt_window: float = 600.0
    """Anthropic orphans: batches created up to this many seconds after an open intent may be ours."""
    sync_tries: int = 3
    """Transient answers retried this many times on the sync path."""
    status_batches: int = 20
    """How many batches the status lists (the ledger keeps them all)."""
    max_shard_requests: int = 0
    """Cap on requests per batch below the provider's limit (0 = the provider's); smaller shards fail smaller."""


@dataclass(frozen=True)
class Job:
    """Everything the engine needs to know about one job, independent of where it came from."""

    key: str
    spec: LLMBatchJobSpec
    tenant: str
    run_date: str
    model: str
    lines: Callable[[], Iterator[tuple[int, bytes]]]
    storage: StoragePolicy = field(default_factory=StoragePolicy)

    @property
    def spec_hash(self) -> str:
        fixed = self.spec.model_dump(mode="json", by_alias=True, include=set(_python_names()))
        return hashlib.sha256(json.dumps(fixed, sort_keys=True).encode()).hexdigest()


def _python_names() -> list[str]:
    fields = LLMBatchJobSpec.model_fields
    return [name for name, info in fields.items() if (info.alias or name) in IMMUTABLE_SPEC_FIELDS]


def _sum_usage(results: list[Result]) -> Usage:
    total = Usage()
    for r in results:
        total = total + r.usage
    return total


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
    ) -> None:
        self.job = job
        self.provider = provider
        self.ledger = ledger
        self.prices = price_table
        self.settings = settings or EngineSettings()
        self.clock = clock
        self.on_event = on_event or (lambda reason, message, kind: log.info("%s: %s", reason, message))
        self.sync_only = sync_only
        self.factory = plan.RequestFactory(job.model, job.spec.request)
        self.tag = hashlib.sha256(job.key.encode()).hexdigest()[:32]

    # --- the step ---------------------------------------------------------------------------------------------
    async def step(self) -> Snapshot:
        key = self.job.key
        row = self.ledger.ensure_job(key, self.job.spec_hash)
        if row["spec_hash"] != self.job.spec_hash:
            self.ledger.set_job(
                key,
                fatal="the ledger holds this job with a different spec; immutable fields "
                "cannot change (use a new name or a new ledger)",
                phase="Failed",
            )
        row = self.ledger.job(key) or row
        if row["fatal"] or row["phase"] in ("Succeeded", "Failed"):
            return self.snapshot()
        if not row["planned"]:
            self._plan()
        if self._budget_hold():
            return self.snapshot()
        try:
            await self._reconcile_intents()
            await self._poll()
            if self.job.spec.suspend:
                await self._cancel_live("Suspended", "suspended: in-flight batches cancelled, holding")
                return self.snapshot()
            now = self.clock()
            deadline = self.job.spec.deadline.timestamp() if self.job.spec.deadline else None
            if deadline is not None and now >= deadline and not self.ledger.job(key)["cutoff_done"]:  # type: ignore[index]
                await self._cancel_live(
                    "DeadlineExceeded",
                    "deadline reached: in-flight batches cancelled, leftovers go to the synchronous path",
                )
                self.ledger.set_job(key, cutoff_done=True)
            near = deadline is not None and deadline - now < self.settings.min_batch_window
            if self.sync_only or near:
                await self._fallback()
            else:
                await self._submit()
        except Fatal as exc:
            self._fail(f"{exc.error_type}: {exc.message}")
        self._judge()
        return self.snapshot()

    def snapshot(self) -> Snapshot:
        return build_snapshot(self.ledger, self.job, self.prices, self.settings.status_batches, self.clock())

    # --- planning ---------------------------------------------------------------------------------------------
    def _plan(self) -> None:
        renderer = Renderer(self.job.spec, self.job.run_date, self.job.tenant)
        rows = plan.admit(self.job.lines(), renderer, self.factory, self.provider.encode)
        total = self.ledger.add_items(self.job.key, rows)
        counts = self.ledger.counts(self.job.key)
        estimate = self._estimate(("pending",), batch=not self.sync_only)
        self.ledger.set_job(
            self.job.key,
            planned=True,
            total=total,
            started_at=self.clock(),
            estimated_cost=prices.money(estimate),
            phase="Submitting",
        )
        invalid = counts.get("invalid", 0)
        self.on_event(
            "Admitted",
            f"{total} items read, {invalid} invalid; estimated cost up to ${prices.money(estimate)}",
            "Normal",
        )
        if invalid:
            self.on_event("InvalidItems", f"{invalid} input lines are invalid (see failures.jsonl)", "Warning")

    def _estimate(self, states: tuple[str, ...], *, batch: bool) -> Decimal:
        """Upper bound: estimated input tokens plus max_tokens of output for every item in `states`."""
        tokens = 0
        count = 0
        for item in self.ledger.iter_items(self.job.key, states=states):
            tokens += int(item["est_tokens"])
            count += 1
        usage = Usage(input_tokens=tokens, output_tokens=count * self.job.spec.request.max_tokens)
        return self.prices.cost(self.job.model, usage, batch=batch)

    def _budget_hold(self) -> bool:
        """Refuse to submit while the estimate is over budget (the job waits for a larger budget)."""
        budget = self.job.spec.budget
        row = self.ledger.job(self.job.key) or {}
        if budget is None or self.ledger.batch_ids(self.job.key):
            return False
        estimate = Decimal(row.get("estimated_cost", "0"))
        return estimate > budget.max_cost

    # --- submission -------------------------------------------------------------------------------------------
    def _shard_lines(self, shard: str) -> Iterator[bytes]:
        for item in self.ledger.iter_items(self.job.key, states=("submitting",), shard=shard):
            yield self.provider.encode(self.factory(item["custom_id"], item["payload"]))

    async def _submit(self) -> None:
        key = self.job.key
        if not self._within_budget():
            return
        sizes = (
            (i["custom_id"], len(self.provider.encode(self.factory(i["custom_id"], i["payload"]))))
            for i in self.ledger.iter_items(key, states=("pending",))
        )
        limit = min(self.provider.max_requests, self.settings.max_shard_requests or self.provider.max_requests)
        for ids in plan.shards(sizes, limit, self.provider.max_bytes):
            shard = f"s{self.ledger.intent_count(key):05d}"
            attempt = 1 + max(
                (i["attempts"] for i in self.ledger.items_in(key, ("pending",), limit=len(ids))), default=0
            )
            self.ledger.open_intent(key, shard, attempt, ids)
            failpoints.hit(failpoints.AFTER_INTENT)
            try:
                info = await self.provider.create_batch(
                    self._shard_lines(shard), {"barge_job": self.tag, "barge_shard": shard}
                )
            except Transient as exc:
                # The create may still have landed (a 500 after accept): the next step adopts or releases.
                self.on_event(
                    "CreateUncertain", f"shard {shard}: {exc.message}; reconciling before retrying", "Warning"
                )
                return
            except Invalid as exc:
                self.ledger.abandon_intent(key, shard, state="invalid")
                self.ledger.update_items(key, [ItemUpdate(c, "invalid", exc.error_type, exc.message) for c in ids])
                self.on_event("BatchRejected", f"shard {shard} rejected: {exc.message}", "Warning")
                continue
            except Fatal:
                self.ledger.abandon_intent(key, shard)
                raise
            failpoints.hit(failpoints.AFTER_CREATE)
            self._record(shard, attempt, len(ids), info)
            self.on_event(
                "Submitted", f"batch {info.id}: {len(ids)} requests (shard {shard}, attempt {attempt})", "Normal"
            )

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

    def _within_budget(self) -> bool:
        """Resubmissions stop when what was spent plus what remains would pass the budget."""
        budget = self.job.spec.budget
        if budget is None or not self.ledger.batch_ids(self.job.key):
            return True
        spent = Decimal(self.snapshot().usage["costUSD"])
        remaining = self._estimate(("pending",), batch=True)
        if spent + remaining <= budget.max_cost:
            return True
        reason = f"budget: spent ${prices.money(spent)} + ${prices.money(remaining)} to go > ${budget.max_cost_usd}"
        left = [
            ItemUpdate(i["custom_id"], "failed", "budget_exceeded", reason)
            for i in self.ledger.iter_items(self.job.key, states=("pending",))
        ]
        self.ledger.update_items(self.job.key, left)
        self.on_event("BudgetExceeded", f"{len(left)} items not resubmitted: {reason}", "Warning")
        return False

    async def _reconcile_intents(self) -> None:
        """Open intents after a crash or an uncertain create: adopt the batch if it exists, else release."""
        open_intents = self.ledger.intents_open(self.job.key)
        if not open_intents:
            return
        known = self.ledger.all_batch_ids()
        recent = [b for b in await self.provider.list_recent(100) if b.id not in known]
        for intent in open_intents:
            found = next(
                (
                    b
                    for b in recent
                    if b.metadata.get("barge_job") == self.tag and b.metadata.get("barge_shard") == intent["shard"]
                ),
                None,
            )
            if found is None and self.provider.name == "anthropic":
                start = intent["created_at"] - 60
                found = next(
                    (
                        b
                        for b in sorted(recent, key=lambda b: b.created_at)
                        if start <= b.created_at.timestamp() <= intent["created_at"] + self.settings.adopt_window
                        and b.request_count == intent["requests"]
                    ),
                    None,
                )
            if found is not None:
                recent.remove(found)
                self._record(intent["shard"], intent["attempt"], intent["requests"], found)
                self.on_event(
                    "Adopted",
                    f"batch {found.id} adopted for shard {intent['shard']} (created before a "
                    "crash or an uncertain answer)",
                    "Normal",
                )
            else:
                self.ledger.abandon_intent(self.job.key, intent["shard"])

    # --- polling and ingestion ----------------------------------------------------------------------------------
    async def _poll(self) -> None:
        for batch in self.ledger.batches_of(self.job.key, live_only=True):
            info = await self.provider.retrieve(batch["batch_id"])
            if info.status != batch["status"]:
                self.ledger.set_batch(self.job.key, batch["batch_id"], status=info.status)
            if info.ended:
                await self._ingest(batch, info)

    async def _ingest(self, batch: dict[str, Any], info: BatchInfo) -> None:
        key, batch_id = self.job.key, batch["batch_id"]
        expected = self.ledger.attempts_of(key, batch_id)
        max_attempts = self.job.spec.retry.max_attempts
        changes: list[ItemUpdate] = []
        answered: list[Result] = []
        foreign = 0
        fatal: Result | None = None
        if info.errors:
            code = str(info.errors[0].get("code") or "batch_failed")
            message = "; ".join(str(e.get("message")) for e in info.errors[:3])
            outcome = Outcome.TRANSIENT if code == "token_limit_exceeded" else Outcome.INVALID
            for cid, attempts in expected.items():
                changes.append(route(Result(cid, outcome, error_type=code, message=message), attempts, max_attempts))
        else:
            seen: set[str] = set()
            async for result in self.provider.results(batch_id):
                if len(seen) == len(expected) // 2:
                    failpoints.hit(failpoints.MID_INGEST)
                if result.custom_id not in expected or result.custom_id in seen:
                    foreign += 1
                    continue
                seen.add(result.custom_id)
                if result.outcome is Outcome.FATAL:
                    fatal = result
                    changes.append(ItemUpdate(result.custom_id, "pending", result.error_type, result.message))
                    continue
                changes.append(route(result, expected[result.custom_id], max_attempts))
                if result.outcome in (Outcome.SUCCEEDED, Outcome.REFUSED):
                    answered.append(result)
            if not seen and foreign:
                self.ledger.release(key, batch_id)
                self.ledger.set_batch(key, batch_id, ingested=True, status="foreign", ended_at=self.clock())
                self.on_event(
                    "ForeignBatch", f"batch {batch_id} held none of the shard's ids: not ours, released", "Warning"
                )
                return
            changes += [route(missing(cid), expected[cid], max_attempts) for cid in expected.keys() - seen]
        usage = _sum_usage(answered)
        attempt_of = {c.custom_id: c.attempts for c in changes}
        rows = [self._result_row(r, "batch", attempt_of.get(r.custom_id) or 1) for r in answered]
        batch_values = {
            "status": info.status,
            "ended_at": self.clock(),
            "input_tokens": usage.input_tokens,
            "output_tokens": usage.output_tokens,
            "cache_read_tokens": usage.cache_read_tokens,
            "cache_write_tokens": usage.cache_write_tokens,
            "cost_usd": str(self.prices.cost(self.job.model, usage, batch=True)),
            "sync_cost_usd": str(self.prices.cost(self.job.model, usage, batch=False)),
        }
        if not self.ledger.ingest(key, batch_id, changes, rows, batch_values):
            return
        self._write_part(batch_id, rows)
        states = _tally(changes)
        self.on_event(
            "BatchEnded",
            f"batch {batch_id} {info.status}: "
            + ", ".join(f"{n} {s}" for s, n in sorted(states.items()))
            + (f"; {foreign} unknown ids ignored" if foreign else ""),
            "Normal",
        )
        if states.get("pending"):
            self.on_event("Retrying", f"{states['pending']} items from batch {batch_id} will be resubmitted", "Normal")
        if states.get("invalid"):
            self.on_event(
                "InvalidItems",
                f"{states['invalid']} requests in batch {batch_id} are invalid and will not be retried",
                "Warning",
            )
        if fatal is not None:
            raise Fatal(f"{fatal.error_type}: {fatal.message}", error_type=fatal.error_type)

    def _result_row(self, result: Result, via: str, attempt: int) -> dict[str, Any]:
        usage = result.usage
        cost = self.prices.cost(self.job.model, usage, batch=False) if via == "sync" else Decimal(0)
        return {
            "custom_id": result.custom_id,
            "status": result.outcome.value,
            "output": result.text,
            "input_tokens": usage.input_tokens,
            "output_tokens": usage.output_tokens,
            "cache_read_tokens": usage.cache_read_tokens,
            "cache_write_tokens": usage.cache_write_tokens,
            "via": via,
            "attempt": attempt,
            "cost_usd": str(cost),
            "sync_cost_usd": str(cost),
        }

    def _write_part(self, name: str, rows: list[dict[str, Any]]) -> None:
        """Copy results as they arrive (provider results expire after 14-30 days)."""
        if not rows:
            return
        url = join(join(self.job.spec.output.url, "parts"), f"{name}.jsonl")
        write_lines(
            url,
            (
                json.dumps(
                    {"custom_id": r["custom_id"], "status": r["status"], "output": r["output"], "via": r["via"]},
                    ensure_ascii=False,
                ).encode()
                for r in rows
            ),
            self.job.storage,
        )

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
        key = self.job.key
        todo = [
            SyncItem(i["custom_id"], i["payload"], int(i["est_tokens"]))
            for i in self.ledger.iter_items(key, states=("pending",))
        ]
        if not todo:
            return
        if not self.job.spec.fallback.sync and not self.sync_only:
            self.ledger.update_items(
                key,
                [
                    ItemUpdate(
                        i.custom_id, "failed", "deadline_exceeded", "deadline reached and spec.fallback.sync is false"
                    )
                    for i in todo
                ],
            )
            return
        attempts = {i["custom_id"]: int(i["attempts"]) for i in self.ledger.iter_items(key, states=("pending",))}
        fb = self.job.spec.fallback
        limiter = RateLimiter(fb.requests_per_minute, fb.tokens_per_minute)
        buffer: list[tuple[ItemUpdate, dict[str, Any] | None]] = []
        self.on_event("FallingBack", f"{len(todo)} items through the synchronous path", "Normal")

        def flush() -> None:
            self.ledger.record_sync(key, [c for c, _ in buffer], [r for _, r in buffer if r is not None])
            buffer.clear()

        async def on_result(result: Result) -> None:
            before = attempts[result.custom_id]
            change = route(result, before, before + 1, via="sync")
            row = None
            if result.outcome in (Outcome.SUCCEEDED, Outcome.REFUSED):
                row = self._result_row(result, "sync", before + 1)
            buffer.append((change, row))
            if len(buffer) >= 100:
                flush()

        try:
            await run_sync(
                todo,
                self.provider,
                self.factory,
                concurrency=fb.concurrency,
                limiter=limiter,
                max_tokens=self.job.spec.request.max_tokens,
                tries=self.settings.sync_tries,
                on_result=on_result,
            )
        except* Fatal as group:
            flush()
            raise group.exceptions[0] from None
        flush()

    # --- judgement ------------------------------------------------------------------------------------------------
    def _fail(self, message: str) -> None:
        self.ledger.set_job(self.job.key, fatal=message, phase="Failed", completed_at=self.clock())
        self.on_event("Failed", message, "Warning")
        self._write_outputs()

    def _judge(self) -> None:
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
            return
        ratio = Decimal(good) / Decimal(total)
        phase = "Succeeded" if ratio >= self.job.spec.ratio else "Failed"
        self._write_outputs()
        self.ledger.set_job(self.job.key, phase=phase, completed_at=self.clock())
        self.on_event(
            "Completed" if phase == "Succeeded" else "Failed",
            f"{good}/{total} items with a result ({ratio:.4f} vs successRatio {self.job.spec.success_ratio})",
            "Normal" if phase == "Succeeded" else "Warning",
        )

    def _write_outputs(self) -> None:
        write_outputs(self.ledger, self.job.key, self.job.spec.output.url, self.job.storage)


def _tally(changes: list[ItemUpdate]) -> dict[str, int]:
    out: dict[str, int] = {}
    for c in changes:
        out[c.state] = out.get(c.state, 0) + 1
    return out
