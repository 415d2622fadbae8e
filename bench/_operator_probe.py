"""`barge operator` with the benchmark's probes (run by bench_operator.py in place of `python -m barge.cli`).

The probes sit outside the operator's code so the same bench measures any version of it:
- event-loop lag: a task on the operator's loop sleeps 50 ms and records how late it wakes (asyncio.sleep drift);
- polls: JobRunner.step calls per job, and how many live batches each poll found (JobRunner._poll);
- provider clients built (the adapters' __init__).
Every second (and at exit) the figures go to the JSON file named by BENCH_PROBE_FILE. With the single argument
`floor` it runs only the lag monitor (the bench's floor); with BENCH_PROFILE=path the operator runs under cProfile.
"""

from __future__ import annotations

import asyncio
import gc
import json
import os
import signal
import sys
import threading
import time
from types import FrameType
from typing import Any

import kopf

from barge.batch.runner import JobRunner
from barge.cli.main import app
from barge.providers.anthropic_provider import AnthropicProvider
from barge.providers.openai_provider import OpenAIProvider

TICK = 0.05
COUNTING = threading.Lock()  # the engine threads count concurrently
OUT = os.environ["BENCH_PROBE_FILE"]
stats: dict[str, Any] = {"lag": [], "steps": {}, "live_polls": 0, "clients": 0}


def sample(every: float = 0.01, depth: int = 8) -> None:
    """A sampling profiler (no py-spy here): every `every` s, the stack of each thread, counted per thread name."""
    names = {}
    counts: dict[str, int] = {}
    stats["samples"] = counts
    while True:
        time.sleep(every)
        for ident, frame in sys._current_frames().items():
            if ident == threading.get_ident():
                continue
            if ident not in names:
                names[ident] = next((t.name for t in threading.enumerate() if t.ident == ident), str(ident))
            stack: list[str] = []
            f: FrameType | None = frame
            while f is not None and len(stack) < depth:
                stack.append(f"{f.f_code.co_filename.rsplit('/', 2)[-1]}:{f.f_code.co_name}:{f.f_lineno}")
                f = f.f_back
            key = f"{names[ident]} | " + " < ".join(stack)
            counts[key] = counts.get(key, 0) + 1


def dump() -> None:
    tmp = OUT + ".tmp"
    with open(tmp, "w") as fh:
        # copies: the engine threads add to these while this runs on Kopf's loop
        copied = {k: v.copy() if isinstance(v, dict | list) else v for k, v in stats.items()}
        # dumps, not dump: json.dump runs the pure-Python encoder (~10-20 ms for a 2,000-job run's lags, once a
        # second on the loop this measures: it set the p99 it was measuring); dumps runs the C one
        fh.write(json.dumps(copied))
    os.replace(tmp, OUT)


TICKED = [time.perf_counter()]


async def monitor() -> None:
    while True:
        started = time.perf_counter()
        await asyncio.sleep(TICK)
        TICKED[0] = time.perf_counter()
        stats["lag"].append(TICKED[0] - started - TICK)


def watchdog(late: float = 0.3, depth: int = 14) -> None:
    """When Kopf's loop has not ticked for `late` s, the stacks of every other thread (what held it up)."""
    stalls: list[dict[str, str]] = []
    stats["stalls"] = stalls
    while True:
        time.sleep(0.1)
        if time.perf_counter() - TICKED[0] < late or len(stalls) >= 300:
            continue
        names = {t.ident: t.name for t in threading.enumerate()}
        snapshot = {}
        for ident, frame in sys._current_frames().items():
            stack: list[str] = []
            f: FrameType | None = frame
            while f is not None and len(stack) < depth:
                stack.append(f"{f.f_code.co_filename.rsplit('/', 2)[-1]}:{f.f_code.co_name}:{f.f_lineno}")
                f = f.f_back
            if "select" not in stack[0] and "_worker" not in stack[0] and "wait" not in stack[0]:
                snapshot[str(names.get(ident, ident))] = " < ".join(stack)
        snapshot["late"] = f"{time.perf_counter() - TICKED[0]:.2f}"
        stalls.append(snapshot)


async def flush() -> None:
    """What was measured so far, every 30 s (and at the end): a dump takes milliseconds on the loop it measures,
    and once a second it was 5% of the 50 ms ticks, enough to set the p99."""
    while True:
        await asyncio.sleep(30.0)
        dump()


def collections() -> None:
    """Record each garbage collection's generation and pause (it holds the GIL: every thread waits)."""
    started: list[float] = []
    stats["gc"] = []

    def timed(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            started[:] = [time.perf_counter()]
        elif started:
            stats["gc"].append((info["generation"], time.perf_counter() - started[0]))

    gc.callbacks.append(timed)


def patch() -> None:
    collections()
    step, poll = JobRunner.step, JobRunner._poll

    async def counted_step(self: JobRunner) -> Any:
        with COUNTING:
            stats["steps"][self.job.key] = stats["steps"].get(self.job.key, 0) + 1
        return await step(self)

    async def counted_poll(self: JobRunner, *, cutoff_done: bool = False) -> None:
        # The ledger read first, then the sum under a lock: `stats[k] += read()` loaded stats[k] before the read,
        # which releases the GIL, so the other engine thread's polls meanwhile were lost (1-2% of them at 500 and
        # 2,000 jobs: the "1.01-1.02 batch GETs per live batch per poll" of earlier runs).
        live = len(self.ledger.batches_of(self.job.key, live_only=True))
        with COUNTING:
            stats["live_polls"] += live
        await poll(self, cutoff_done=cutoff_done)

    JobRunner.step = counted_step  # type: ignore[method-assign]
    JobRunner._poll = counted_poll  # type: ignore[method-assign]
    for cls in (AnthropicProvider, OpenAIProvider):
        init = cls.__init__

        def counted_init(self: Any, *args: Any, __init: Any = init, **kwargs: Any) -> None:
            with COUNTING:
                stats["clients"] += 1
            __init(self, *args, **kwargs)

        cls.__init__ = counted_init  # type: ignore[method-assign]

    operator = kopf.operator

    async def probed(**kwargs: Any) -> None:
        tasks = [asyncio.create_task(monitor()), asyncio.create_task(flush())]
        try:
            await operator(**kwargs)
        finally:
            for task in tasks:
                task.cancel()
            if os.environ.get("BENCH_HEAP"):  # what the collector tracks at the end, by type (the biggest 25)
                counted: dict[str, int] = {}
                for obj in gc.get_objects():
                    name = type(obj).__qualname__
                    counted[name] = counted.get(name, 0) + 1
                stats["heap"] = dict(sorted(counted.items(), key=lambda kv: -kv[1])[:25])
                stats["heap_frozen"] = gc.get_freeze_count()
            dump()

    kopf.operator = probed


async def floor() -> None:
    """The floor: the same lag monitor in a process of its own that does nothing else (the machine's own lag).
    Ends at SIGTERM, with a last dump."""
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    tasks = [asyncio.create_task(monitor()), asyncio.create_task(flush())]
    await stop.wait()
    for task in tasks:
        task.cancel()
    dump()


def profiled(path: str) -> None:
    """The operator under cProfile (its main thread: Kopf's loop), stats written to `path` at exit."""
    import cProfile

    profiler = cProfile.Profile()
    try:
        profiler.runcall(app, sys.argv[1:])
    finally:
        profiler.dump_stats(path)


if __name__ == "__main__":
    if sys.argv[1:] == ["floor"]:
        asyncio.run(floor())
        sys.exit(0)
    patch()
    if os.environ.get("BENCH_SAMPLE"):
        threading.Thread(target=sample, daemon=True).start()
    if os.environ.get("BENCH_STALLS"):
        threading.Thread(target=watchdog, daemon=True).start()
    if os.environ.get("BENCH_PROFILE"):
        profiled(os.environ["BENCH_PROFILE"])
    else:
        app(sys.argv[1:])
