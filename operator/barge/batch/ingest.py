"""Ingesting an ended batch: stream its results, route every outcome, commit chunk by chunk.

Each chunk moves its items out of `submitted` and adds its usage to the batch in one transaction, and a
resumed ingestion only looks at items still `submitted`, so a crash mid-stream loses nothing and counts
nothing twice. Memory stays at one chunk plus the batch's ids. The returned id set is checked against the
submitted set: ids the provider never mentions are retried; ids Barge never sent are ignored (and a batch
holding none of ours is released, not ingested).

A chunk ends at `CHUNK` rows or `CHUNK_BYTES` of result text, whichever comes first. Cut by rows only, one
Anthropic batch of 100,000 results of ~4 KB was one chunk: +490 MiB of the shared operator's memory, past the
chart's limit, and since that one chunk never committed, the restarted operator streamed the whole batch again
and was killed again (REVIEW-3 C2). By bytes, what is held is ~2 x CHUNK_BYTES whatever the batch, and a killed
ingestion resumes after its last committed chunk. All ingestions of the process together hold at most
`memory.INGEST_TEXT`: past it, each commits at its next page (batch/memory.py).

Why the shape: this is the hot path of a 100,000-result batch. Results arrive a page per network read, each as
a tuple (`providers.base.Parsed`) that becomes a ledger row tuple (`ledger.bulk.ROW`, no intermediate objects),
and a chunk is large because the ledger applies it in one sorted pass: every chunk rewrites pages all over the
items table (see ledger/bulk.py).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from functools import partial

import orjson

from barge.batch import failpoints, memory
from barge.batch.routing import missing, route, unreadable
from barge.ledger import ItemUpdate, Ledger
from barge.ledger.bulk import Row
from barge.providers.base import BatchInfo, BatchProvider, Outcome, Parsed, Result, as_result
from barge.providers.errors import Fatal
from barge.providers.jsonl import UNREADABLE

CHUNK = 100_000  # rows per transaction at most: a whole Anthropic batch of short results, two OpenAI ones ...
#: ... and result text (characters) per transaction at most: 4,000 results of 4 KB, 8,000 of 2 KB. Each chunk is a
#: sorted pass over the items table (ledger/bulk.py), so fewer, larger chunks ingest faster; this is the memory the
#: operator's sizing rule counts for one ingestion (README, "Sizing the operator"). 100,000 results of 4 KB peaked
#: at +69 MiB of RSS with 16 MiB, +86 MiB with 32 MiB and +64 with 8 MiB, in the same time.
CHUNK_BYTES = 16 << 20
PartWriter = Callable[[str, Iterable[bytes]], None]
NO_USAGE = (0, 0, 0, 0)
_SUCCEEDED, _FATAL = Outcome.SUCCEEDED, Outcome.FATAL


@dataclass
class Report:
    states: dict[str, int] = field(default_factory=dict)
    foreign: int = 0
    released: bool = False
    fatal: Result | None = None
    unreadable: int = 0
    """Result lines that could not be read (`providers.jsonl.UNREADABLE`); `why`: the first one's reason."""
    why: str = ""

    def count(self, rows: list[Row]) -> None:
        for r in rows:
            self.states[r[1]] = self.states.get(r[1], 0) + 1


def _row(result: Result, attempts: int, max_attempts: int) -> Row:
    """The ledger row `result` makes of its item (routing.route decides the state; results keep their text)."""
    u = result.usage
    if result.outcome is Outcome.SUCCEEDED:  # route's first rule, without an ItemUpdate per result: the hot path
        usage = (u.input_tokens, u.output_tokens, u.cache_read_tokens, u.cache_write_tokens)
        return (result.custom_id, "succeeded", "", "", attempts + 1, "batch", result.text, *usage)
    change = route(result, attempts, max_attempts)
    # a refusal is a result; an answer that broke the schema was paid for, retried or not: its usage goes to the
    # batch (a pending item may keep a failed attempt's usage: ledger/moves.py moves it all the same)
    if result.outcome is Outcome.REFUSED or result.outcome is Outcome.INVALID_OUTPUT:
        usage = (u.input_tokens, u.output_tokens, u.cache_read_tokens, u.cache_write_tokens)
        return (
            change.custom_id,
            change.state,
            change.error_type,
            change.reason,
            change.attempts,
            "batch",
            result.text if result.outcome is Outcome.REFUSED else None,
            *usage,
        )
    return _as_row(change)


def _parsed_row(parsed: Parsed, attempts: int, max_attempts: int) -> Row:
    """`_row` of a `Parsed` result: a success (nearly every result of a batch) builds no Result."""
    if parsed[1] is _SUCCEEDED:
        cid, _, text, tin, tout, tcr, tcw, _, _ = parsed
        return (cid, "succeeded", "", "", attempts + 1, "batch", text, tin, tout, tcr, tcw)
    return _row(as_result(parsed), attempts, max_attempts)


def _as_row(c: ItemUpdate) -> Row:
    return (c.custom_id, c.state, c.error_type, c.reason, c.attempts, c.via, c.output, *c.usage)


def _part(row: Row) -> bytes:
    return orjson.dumps({"custom_id": row[0], "status": row[1], "output": row[6], "via": "batch"})


async def ingest(
    ledger: Ledger,
    job: str,
    provider: BatchProvider,
    info: BatchInfo,
    max_attempts: int,
    write_part: PartWriter,
    clock: Callable[[], float] = time.time,
    check: Callable[[list[Parsed]], list[Parsed]] | None = None,
) -> Report:
    """`check`: spec.request.responseFormat's reading of a page of results (structured.Checker.page), or None;
    run in a thread: jsonschema takes ~0.1 ms an answer, 10 s per 100,000 that the event loop must not wait."""
    report = Report()
    expected = ledger.submitted_of(job, info.id)
    if info.errors:  # the whole batch failed validation (OpenAI / Azure)
        code = str(info.errors[0].get("code") or "batch_failed")
        message = "; ".join(str(e.get("message")) for e in info.errors[:3])
        outcome = Outcome.TRANSIENT if code == "token_limit_exceeded" else Outcome.INVALID
        rows = [
            _as_row(route(Result(cid, outcome, error_type=code, message=message), n, max_attempts))
            for cid, n in expected.items()
        ]
        ledger.apply_rows(job, rows, info.id)
        report.count(rows)
        ledger.set_batch(job, info.id, ingested=True, status=info.status, ended_at=clock())
        return report

    members: set[str] | None = None  # every id the batch was created with: loaded only if an unknown id shows up
    count = len(expected)
    left = expected  # ids not seen yet: an id met twice, or never sent, is not in it (then `members` says which)
    seen = 0
    chunk: list[Row] = []
    held = 0  # characters of result text in `chunk`, counted in memory.INGESTING too
    half = count // 2

    def commit() -> None:
        nonlocal held
        ledger.apply_rows(job, chunk, info.id)
        if any(r[6] is not None for r in chunk):  # streamed: a list of 100,000 orjson outputs holds ~4 KB each
            write_part(f"{info.id}-{time.time_ns()}", (_part(r) for r in chunk if r[6] is not None))
        report.count(chunk)
        chunk.clear()
        memory.INGESTING.release(held)
        held = 0

    try:
        async for read in provider.parsed_pages(info.id):
            page = read if check is None else await asyncio.to_thread(check, read)
            added = 0
            for parsed in page:
                cid = parsed[0]
                attempts = left.pop(cid, None)
                if attempts is None:
                    if not cid and parsed[7] == UNREADABLE:  # a line nobody can read: its item is left unseen
                        report.unreadable += 1
                        report.why = report.why or parsed[8]
                        continue
                    members = ledger.members_of(job, info.id) if members is None else members
                    report.foreign += cid not in members  # members not expected: applied before a restart
                    continue
                seen += 1
                if seen == half:
                    failpoints.hit(failpoints.MID_INGEST)
                if parsed[1] is _FATAL:
                    report.fatal = as_result(parsed)
                    chunk.append((cid, "pending", parsed[7], parsed[8], attempts, "", None, *NO_USAGE))
                else:
                    chunk.append(_parsed_row(parsed, attempts, max_attempts))
                added += len(parsed[2]) + len(parsed[8])
            held += added
            crowded = memory.INGESTING.add(added)  # every ingestion together holds INGEST_TEXT: commit now
            if chunk and (len(chunk) >= CHUNK or held >= CHUNK_BYTES or crowded):
                commit()
        if not seen and report.foreign and count and members is not None and count == len(members):
            ledger.release(job, info.id)
            ledger.set_batch(job, info.id, ingested=True, status="foreign", ended_at=clock())
            report.released = True
            return report
        # the unseen items' results may be among the unreadable lines: then they are retried as such
        unseen = partial(unreadable, lines=report.unreadable, why=report.why) if report.unreadable else missing
        chunk += [_as_row(route(unseen(cid), n, max_attempts)) for cid, n in left.items()]
        commit()
    finally:  # a read or ledger error mid-stream: what this ingestion held is no longer held
        memory.INGESTING.release(held)
        held = 0
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
    if report.unreadable:
        on_event(
            "UnreadableResults",
            f"{report.unreadable} result lines of batch {info.id} could not be read (first: {report.why}); "
            "the requests without a readable result are retried",
            "Warning",
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
