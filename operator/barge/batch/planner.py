"""Planning in a separate, limited process: what a job's template and input cost stays that job's problem.

Why a process: rendering is user code (a template) over user data (the input). In the operator's own
process a template like `{% for i in range(10**4) %}{% for j in range(10**4) %}...` or a string doubled in a
loop took every job of every team down, and since a job re-plans after each restart the operator crash-looped.
The sandbox (sandbox.py) refuses what it can see coming; this process bounds the rest:

- memory: RLIMIT_AS (`PlanLimits.memory_bytes`; BARGE_PLANNER_MEMORY_MB in the operator): an allocation over
  it is a MemoryError, the line is `invalid`;
- CPU per line: a profiling timer (`line_seconds`): a line over it is `invalid` with reason `template_timeout`;
- CPU and wall time per job (`job_cpu_seconds`, `wall_seconds`): the planner is killed, the job not admitted;
- a template that hits a limit on its first lines (`give_up_after` lines, none succeeded) is a bad template:
  the job is `Admitted=False` with the limit it hit, instead of burning the limit on every line;
- the process runs at a lower CPU priority (nice 10), so the operator's event loop always comes first;
- once set up (spec, template, encoder), it may make no socket, connect, exec, trace, mount or namespace:
  each is EPERM (seccomp.py; the environment, no_new_privs and Landlock are set by its server, planner_env.py);
- it is a fork of a warm server (zygote.py) that has done the imports already, so a job's planner costs
  milliseconds to start instead of the interpreter's and its imports' ~0.4 CPU seconds.

The parent streams input lines to the child (length-prefixed frames) and the child answers with length-prefixed
frames: the rows as a JSON array of lists (`ledger.PLANNED` order) and the frame's payloads as one page
(ledger/pages.py: the index of line, end pairs packed, the UTF-8 text after it). The parent decodes neither: it
hands the rows' JSON to the ledger as it came (SQLite parses it inside one INSERT, `Ledger.add_frames`) and the
page as bytes, in large chunks in a thread while the child renders the next ones; input is read in a thread
too, so the operator's event loop never waits on storage or on the ledger.
The child side is `child()`: zygote.py forks it; `python -m barge.batch.planner` runs it alone, for debugging.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import resource
import signal
import struct
import sys
from array import array
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from itertools import islice
from typing import TYPE_CHECKING, Any

import orjson

from barge.api.batchjob import LLMBatchJobSpec
from barge.batch import plan_input, seccomp, zygote
from barge.batch.bounded import bound
from barge.batch.plan import RequestFactory, admit_line, invalid_row
from barge.batch.render import PlanError, Renderer
from barge.providers.encoding import encoder
from barge.storage import OversizeLine

if TYPE_CHECKING:
    from barge.ledger import Ledger
    from barge.ledger.pages import Page

FRAME = struct.Struct("!QI")  # line number, length
#: A frame from the child: the lengths of its rows (JSON), of its page's index (int64 pairs, little-endian), of its
#: page's text, and of a plan error (UTF-8; 0: none), which follow in that order.
ROWS = struct.Struct("!IIII")
ROWS_BYTES = 1 << 20  # the child sends a frame of rows once it holds this many bytes ...
ROWS_COUNT = 2000  # ... or this many rows
#: Ledger writes (one transaction each, at most two chunks held: one being written): the payload pages once they
#: hold this many bytes ...
WRITE_BYTES = 4 << 20
#: ... and the rows, with the pages held then, once their JSON holds this many bytes (~15,000-20,000 rows). Apart
#: because the rows are small and their writes cost by the transaction: `items` is clustered on custom_id, so rows
#: whose ids do not sort by line land all over it, and every transaction wrote again each page it touched. Written
#: with the pages, every ~2,000 rows of ~2 KB payloads, 100k rows with random ids took 1.7 s of the writer's CPU;
#: 1.0 s by 20,000 (0.55 s either way with ids in line order; bench/README.md, Submission, sixth round).
WRITE_ROW_BYTES = 2 << 20
LIMIT_ERRORS = ("template_timeout", "resource_limit", "template_limit")
READ_BYTES = 1 << 20  # the child's read buffer on its input: each read empties the pipe (see child())


@dataclass(frozen=True)
class PlanLimits:
    line_seconds: float = 2.0
    """CPU seconds one line may take to render."""
    job_cpu_seconds: int = 900
    """CPU seconds the whole planning of one job may take."""
    wall_seconds: float = 3600.0
    """Wall-clock seconds the whole planning may take."""
    memory_bytes: int = 256 * 1024 * 1024
    """Address space of the planner process (ordinary planning needs under 128 MiB; the operator's pod limit
    must leave room for it beside the operator itself)."""
    reserve_bytes: int = 384 * 1024 * 1024
    """Memory of the container kept for the operator and the planner server (BARGE_OPERATOR_RESERVE_MB): a planner
    starts only while this, the planners running and its `memory_bytes` fit the cgroup's limit (batch/memory.py)."""
    give_up_after: int = 3
    """Lines hitting a limit, before any line succeeded, that make the template a bad one."""
    read_seconds: float = plan_input.READ_SECONDS
    """Seconds a read of the input may give nothing: then the plan fails and frees its slot (plan_input.py)."""
    listed_invalid: int = 1_000
    """Invalid lines sent back as rows (the policy's ledger.listedInvalidLines); later ones are only counted, by
    the lines the parent fed less the rows it got (batch/capacity.py), never a row each in the shared ledger."""


@dataclass(frozen=True)
class PlanInput:
    """What the child needs to know about the job (all of it JSON)."""

    spec: dict[str, Any]
    run_date: str
    tenant: str
    model: str
    provider: str
    """The adapter's name (anthropic, openai, azure-openai): requests are encoded as it sends them."""


class LineTimeout(BaseException):
    """Raised by the profiling timer inside a line's rendering (a BaseException: templates catch Exception)."""


def planned(row: dict[str, Any]) -> list[Any]:
    """A row of admission (plan.admit_line) as `ledger.PLANNED` lists it (the child does not import the ledger)."""
    return [
        row["custom_id"],
        row["line"],
        row.get("item_id"),
        row["state"],
        row.get("error_type", ""),
        row.get("reason", ""),
        row.get("est_tokens", 0),
        row.get("size", 0),
    ]


# --- the parent side ------------------------------------------------------------------------------------------
def _take(
    lines: Iterator[tuple[int, bytes]], max_bytes: int = 2 << 20, max_lines: int = 2000
) -> list[tuple[int, bytes]]:
    out: list[tuple[int, bytes]] = []
    size = 0
    for item in islice(lines, max_lines):
        out.append(item)
        size += len(item[1])
        if size >= max_bytes:
            break
    return out


async def plan(
    key: str,
    job: PlanInput,
    lines: Callable[[], Iterator[tuple[int, bytes]]],
    ledger: Ledger,
    limits: PlanLimits | None = None,
    before_write: Callable[[int], None] | None = None,
) -> int:
    """Plan the job into the ledger through a planner process; returns the number of rows (lines) written.
    Raises PlanError when the template is bad or the planning passed its limits; input errors propagate.
    `before_write(bytes)` is called in the writer thread before each ledger write with the bytes it holds; what
    it raises ends the plan (batch/capacity.py: the volume's free-space floor)."""
    limits = limits or PlanLimits()
    proc = await zygote.SERVER.start(limits.memory_bytes, limits.reserve_bytes)  # within the container's memory
    stdin, stdout, stderr = proc.stdin, proc.stdout, proc.stderr
    from barge.ledger import pages  # the parent only: the child never imports the ledger (SQLAlchemy)

    rows: list[bytes] = []  # frames of rows, as the child sent them (JSON)
    held_pages: list[Page] = []
    written = 0
    error = ""
    tail = b""
    reader: asyncio.Task[None] | None = None
    writer: asyncio.Future[int] | None = None
    loop = asyncio.get_running_loop()
    pool = ThreadPoolExecutor(1, thread_name_prefix="barge-plan")  # one writer thread (one malloc arena)

    async def flush(*, pages_only: bool = False) -> None:
        """Write the rows and pages held so far in a thread, after the previous write (at most two chunks in
        memory); `pages_only` keeps the rows for a later write."""
        nonlocal written, writer, rows, held_pages
        if writer is not None:
            written += await writer
            writer = None
        if rows or held_pages:
            chunk, chunk_pages = ([] if pages_only else rows), held_pages
            rows, held_pages = (rows if pages_only else []), []
            writer = asyncio.ensure_future(
                loop.run_in_executor(pool, _write, ledger, key, chunk, chunk_pages, before_write)
            )

    async def feed() -> None:
        header = {"job": asdict(job), "limits": asdict(limits)}
        stdin.write(orjson.dumps(header) + b"\n")
        reading = plan_input.InputReader(lines, _take, limits.read_seconds)  # not the loop's executor: H7
        try:
            await _feed(reading)
        finally:
            reading.close()
        stdin.close()

    async def _feed(reading: plan_input.InputReader) -> None:
        while chunk := await reading.next():
            out = bytearray()  # one pipe write per chunk of lines (a write per line cost 4 us of the event loop)
            for number, raw in chunk:
                if isinstance(raw, OversizeLine):  # never sent: the parent knows the answer
                    row = invalid_row(number, "line_too_long", f"line of {raw.length} bytes is over the limit")
                    rows.append(orjson.dumps([planned(row)]))
                    continue
                out += FRAME.pack(number, len(raw))
                out += raw
            stdin.write(out)
            del out
            await stdin.drain()
        stdin.close()

    async def collect() -> None:
        nonlocal error
        held = held_rows = 0
        while True:
            try:
                lengths = ROWS.unpack(await stdout.readexactly(ROWS.size))
                if sum(lengths) > limits.memory_bytes:  # more than the child may hold (RLIMIT_AS): not ours (M8)
                    error = f"the planner process sent a frame of {sum(lengths)} bytes, more than it may hold"
                    return
                frame, index, text, said = [await stdout.readexactly(n) if n else b"" for n in lengths]
            except asyncio.IncompleteReadError:
                return  # the child is done (or died: its exit code says why)
            if frame:
                rows.append(frame)
            page = pages.packed(index, text)
            if page is not None:
                held_pages.append(page)
            if said:
                error = said.decode(errors="replace")
                return
            held += len(text)
            held_rows += len(frame)
            if held_rows >= WRITE_ROW_BYTES:
                held = held_rows = 0
                await flush()
            elif held >= WRITE_BYTES:
                held = 0
                await flush(pages_only=True)

    try:
        async with asyncio.timeout(limits.wall_seconds):
            reader = asyncio.create_task(collect())
            # The child may stop reading (a bad template, a limit): its answer or exit code says why. A ledger
            # error while collecting stops the feeding too, and is raised (M12).
            await plan_input.together(feed(), reader)
            await flush()
            await flush()  # the last chunk
            code = await proc.wait()
    except TimeoutError:
        raise PlanError(f"planning took longer than {limits.wall_seconds:.0f} s", permanent=False) from None
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
        if reader is not None and not reader.done():
            reader.cancel()
        if writer is not None:  # a write in flight finishes (its thread cannot be stopped) before we return
            with contextlib.suppress(Exception):
                await asyncio.shield(writer)
        pool.shutdown(wait=False)
        if proc.returncode:
            tail = (await stderr.read())[-2000:]
        proc.close()
    if error:
        raise PlanError(error)
    if code != 0:
        said = tail.decode(errors="replace").strip().splitlines()
        why = {
            -signal.SIGXCPU: f"more than {limits.job_cpu_seconds} CPU seconds",
            -signal.SIGKILL: "killed",
            # what a planner at its address-space limit died of, planning 10M lines in 256 MiB (bench_scale)
            -signal.SIGSEGV: f"crashed, most likely out of its {limits.memory_bytes >> 20} MiB of memory "
            "(BARGE_PLANNER_MEMORY_MB)",
        }.get(code, f"exit code {code}")
        message = bound(f"planning stopped ({why}): {said[-1] if said else ''}", 500)
        raise PlanError(message, permanent=code == -signal.SIGXCPU)
    return written


def _write(
    ledger: Ledger, key: str, frames: list[bytes], chunk: list[Page], before: Callable[[int], None] | None
) -> int:
    if before is not None:
        before(sum(map(len, frames)) + sum(len(p[3]) + len(p[4]) for p in chunk))
    return ledger.add_frames(key, frames, chunk)


# --- the child side -------------------------------------------------------------------------------------------
def _on_timer(_signum: int, _frame: Any) -> None:
    raise LineTimeout


def _read_exact(stream: Any, n: int) -> bytes:
    data = stream.read(n)
    return bytes(data) if data else b""


def _reader(stream: Any) -> Any:
    """A reader of the same file with a large buffer: read in 8 KiB (the default), the input pipe woke the parent's
    writer once per 8 KiB (40,000 times per 100,000 lines of 2 KB, a second of its event loop)."""
    try:
        fd = stream.fileno()
    except (AttributeError, OSError, io.UnsupportedOperation):
        return stream  # not a file (a test's BytesIO)
    return open(fd, "rb", buffering=READ_BYTES, closefd=False)  # the caller owns the fd


def child(stdin: Any = None, stdout: Any = None) -> int:
    stdin = _reader(stdin or sys.stdin.buffer)  # before the first read: nothing is buffered yet
    stdout = stdout or sys.stdout.buffer
    header = orjson.loads(stdin.readline())
    limits = PlanLimits(**header["limits"])
    job = PlanInput(**header["job"])
    resource.setrlimit(resource.RLIMIT_AS, (limits.memory_bytes, limits.memory_bytes))
    resource.setrlimit(resource.RLIMIT_CPU, (limits.job_cpu_seconds, limits.job_cpu_seconds + 5))
    signal.signal(signal.SIGPROF, _on_timer)

    frame: list[list[Any]] = []
    index = array("q")  # line, end, line, end, ... of the payloads in `texts`
    texts: list[bytes] = []
    end = held = 0

    def send(plan_error: str = "") -> None:
        nonlocal held, end, index
        if sys.byteorder != "little":
            index.byteswap()
        parts = (orjson.dumps(frame) if frame else b"", index.tobytes(), b"".join(texts), plan_error.encode())
        stdout.write(ROWS.pack(*map(len, parts)))
        for part in parts:
            stdout.write(part)
        frame.clear()
        index = array("q")
        texts.clear()
        held = end = 0

    def answer(row: dict[str, Any]) -> None:
        nonlocal held, end
        frame.append(planned(row))
        payload = row.get("payload")
        if payload is not None:
            text = payload.encode()
            end += len(text)
            index.extend((row["line"], end))
            texts.append(text)
            held += len(text)
        held += len(row.get("reason") or "") + 100
        if held >= ROWS_BYTES or len(frame) >= ROWS_COUNT:
            send()

    try:
        spec = LLMBatchJobSpec.model_validate(job.spec)
        renderer = Renderer(spec, job.run_date, job.tenant)
        encode = encoder(job.provider)  # the adapters' own encoding, without importing an SDK
    except (PlanError, ValueError) as exc:
        send(bound(str(exc)))
        stdout.flush()
        return 0
    timed = renderer.parts is None  # the fast path (no Jinja) is linear in the line, which is bounded
    factory = RequestFactory(job.model, spec.request)
    encode_line = factory.line_encoder(encode)
    seccomp.install()  # set up: from here no socket, exec or namespace (the server logged it once if not)
    seen: set[str] = set()
    limited = succeeded = invalid = 0
    while head := _read_exact(stdin, FRAME.size):
        number, length = FRAME.unpack(head)
        raw = _read_exact(stdin, length)
        try:
            if timed:
                signal.setitimer(signal.ITIMER_PROF, limits.line_seconds)
            row = admit_line(number, raw, renderer, factory, encode, seen, encode_line=encode_line)
        except LineTimeout:
            row = invalid_row(number, "template_timeout", f"rendering took over {limits.line_seconds} CPU seconds")
        except MemoryError:
            row = invalid_row(number, "resource_limit", "rendering needed more memory than the planner may use")
        finally:
            if timed:
                signal.setitimer(signal.ITIMER_PROF, 0)
        hit = row["state"] == "invalid" and row["error_type"] in LIMIT_ERRORS
        limited += hit
        succeeded += row["state"] == "pending"
        if hit and not succeeded and limited >= limits.give_up_after:
            send(bound(f"spec.request.template hits a limit on every line tried: {row['reason']}"))
            break
        if row["state"] == "invalid":
            invalid += 1
            if invalid > limits.listed_invalid:
                continue  # counted by the parent (lines fed less rows sent), not stored
        answer(row)
    if frame:
        send()
    stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(child())
