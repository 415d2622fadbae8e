"""Ingesting an ended batch: stream its results, route every outcome, commit chunk by chunk.

Each chunk moves its items out of `submitted` and adds its usage to the batch in one transaction, and a
resumed ingestion only looks at items still `submitted`, so a crash mid-stream loses nothing and counts
nothing twice. Memory stays at one chunk plus the batch's ids. The returned id set is checked against the
submitted set: ids the provider never mentions are retried; ids Barge never sent are ignored (and a batch
holding none of ours is released, not ingested).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

import orjson

from barge.batch import failpoints
from barge.batch.routing import missing, route
from barge.ledger import ItemUpdate, Ledger
from barge.providers.base import BatchInfo, BatchProvider, Outcome, Result
from barge.providers.errors import Fatal

CHUNK = 5000
PartWriter = Callable[[str, list[bytes]], None]


@dataclass
class Report:
    states: dict[str, int] = field(default_factory=dict)
    foreign: int = 0
    released: bool = False
    fatal: Result | None = None

    def count(self, changes: list[ItemUpdate]) -> None:
        for c in changes:
            self.states[c.state] = self.states.get(c.state, 0) + 1


def _change(result: Result, attempts: int, max_attempts: int) -> ItemUpdate:
    change = route(result, attempts, max_attempts)
    if result.outcome in (Outcome.SUCCEEDED, Outcome.REFUSED):
        u = result.usage
        return ItemUpdate(
            change.custom_id,
            change.state,
            change.error_type,
            change.reason,
            change.attempts,
            "batch",
            result.text,
            (u.input_tokens, u.output_tokens, u.cache_read_tokens, u.cache_write_tokens),
        )
    return change


def _part(change: ItemUpdate) -> bytes:
    return orjson.dumps(
        {"custom_id": change.custom_id, "status": change.state, "output": change.output, "via": "batch"}
    )


async def ingest(
    ledger: Ledger,
    job: str,
    provider: BatchProvider,
    info: BatchInfo,
    max_attempts: int,
    write_part: PartWriter,
    clock: Callable[[], float] = time.time,
) -> Report:
    report = Report()
    expected = ledger.submitted_of(job, info.id)
    if info.errors:  # the whole batch failed validation (OpenAI / Azure)
        code = str(info.errors[0].get("code") or "batch_failed")
        message = "; ".join(str(e.get("message")) for e in info.errors[:3])
        outcome = Outcome.TRANSIENT if code == "token_limit_exceeded" else Outcome.INVALID
        changes = [
            route(Result(cid, outcome, error_type=code, message=message), n, max_attempts)
            for cid, n in expected.items()
        ]
        ledger.apply(job, changes, info.id)
        report.count(changes)
        ledger.set_batch(job, info.id, ingested=True, status=info.status, ended_at=clock())
        return report

    members: set[str] | None = None  # every id the batch was created with: loaded only if an unknown id shows up
    seen: set[str] = set()
    chunk: list[ItemUpdate] = []
    half = len(expected) // 2

    def commit() -> None:
        ledger.apply(job, chunk, info.id)
        parts = [_part(c) for c in chunk if c.output is not None]
        if parts:
            write_part(f"{info.id}-{time.time_ns()}", parts)
        report.count(chunk)
        chunk.clear()

    async for result in provider.results(info.id):
        cid = result.custom_id
        if cid not in expected or cid in seen:
            if cid not in expected:
                members = ledger.members_of(job, info.id) if members is None else members
                report.foreign += cid not in members  # members not expected were applied before a restart
            continue
        seen.add(cid)
        if len(seen) == half:
            failpoints.hit(failpoints.MID_INGEST)
        if result.outcome is Outcome.FATAL:
            report.fatal = result
            chunk.append(ItemUpdate(cid, "pending", result.error_type, result.message, expected[cid]))
        else:
            chunk.append(_change(result, expected[cid], max_attempts))
        if len(chunk) >= CHUNK:
            commit()
    if not seen and report.foreign and expected and members is not None and len(expected) == len(members):
        ledger.release(job, info.id)
        ledger.set_batch(job, info.id, ingested=True, status="foreign", ended_at=clock())
        report.released = True
        return report
    chunk += [route(missing(cid), n, max_attempts) for cid, n in expected.items() if cid not in seen]
    commit()
    ledger.set_batch(job, info.id, ingested=True, status=info.status, ended_at=clock())
    return report


def give_up(ledger: Ledger, job: str, batch_id: str, reason: str, clock: Callable[[], float] = time.time) -> int:
    """A batch the provider no longer knows, past the deadline: its items still `submitted` are failed (not
    resubmitted: if it runs after all, it must not be paid twice) and the batch is closed. Returns the count."""
    expected = ledger.submitted_of(job, batch_id)
    ledger.apply(job, [ItemUpdate(cid, "failed", "batch_not_found", reason, n + 1) for cid, n in expected.items()])
    ledger.set_batch(job, batch_id, ingested=True, status="not_found", ended_at=clock())
    return len(expected)


def report_events(info: BatchInfo, report: Report, on_event: Callable[[str, str, str], None]) -> None:
    """The events an ingested batch is worth; a fatal result raises Fatal (the job stops)."""
    if report.released:
        on_event("ForeignBatch", f"batch {info.id} held none of the shard's ids: not ours, released", "Warning")
        return
    states = report.states
    on_event(
        "BatchEnded",
        f"batch {info.id} {info.status}: "
        + ", ".join(f"{n} {s}" for s, n in sorted(states.items()))
        + (f"; {report.foreign} unknown ids ignored" if report.foreign else ""),
        "Normal",
    )
    if states.get("pending"):
        on_event("Retrying", f"{states['pending']} items from batch {info.id} will be resubmitted", "Normal")
    if states.get("invalid"):
        on_event(
            "InvalidItems",
            f"{states['invalid']} requests in batch {info.id} are invalid and will not be retried",
            "Warning",
        )
    if report.fatal is not None:
        raise Fatal(f"{report.fatal.error_type}: {report.fatal.message}", error_type=report.fatal.error_type)
