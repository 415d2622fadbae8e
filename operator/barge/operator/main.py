"""`barge operator`: build the settings, the Kopf registry, and run until stopped."""

from __future__ import annotations

import asyncio
import gc
import logging
import logging.handlers
import queue

import kopf

from barge.config import OperatorConfig
from barge.operator.handlers import register

#: Garbage collections every 50,000 container allocations instead of 700 (and an older generation every 20 of
#: them). A collection holds the GIL, so it stops Kopf's loop: at 2,000 jobs the default thresholds made 4,800
#: collections (35 of them full, up to 1.3 s each), 30 s of pauses in a 429 s run, and Kopf's loop lag p99 113 ms
#: (floor 33); these made 28 (5 s of pauses) and a p99 of 62 ms (floor 18) (bench/README.md, bench_operator.py).
#: Memory: the youngest generation holds up to 50,000 objects before it is collected (peak RSS 397 against 375 MB).
GC_THRESHOLDS = (50_000, 20, 10)


def preload_providers() -> None:
    """Import the provider SDKs now, before this replica joins the peering. Otherwise the first job step imports
    them inside the event loop that also sends Kopf's keep-alives: seconds on a cold or busy machine (25 s was
    seen here without bytecode), and a keep-alive more than 5-10 s late lets a standby resume beside this replica.
    Standalone operators keep the lazy import (the anthropic SDK alone is ~90 MB of RSS)."""
    from barge.providers import anthropic_provider, openai_provider  # noqa: F401


def log_off_the_loop() -> logging.handlers.QueueListener:
    """Log records are queued by the thread that makes them and written by a thread of their own.

    Why: a write to stderr is a system call, and a thread coming back from one waits for the GIL, which the engine
    threads hold for up to a switch interval (5 ms) each. Written from Kopf's loop, the ~5 lines per job that
    Kopf logs at INFO were a third of that loop's busy time at 500 jobs (bench_operator.py with BENCH_SAMPLE=1).
    """
    handler = logging.StreamHandler()
    handler.setFormatter(logging.Formatter("%(asctime)s %(name)s %(levelname)s %(message)s"))
    records: queue.SimpleQueue[logging.LogRecord] = queue.SimpleQueue()
    queued = logging.handlers.QueueHandler(records)
    queued.setFormatter(logging.Formatter("%(message)s"))  # the message only: `handler` adds the rest once
    logging.basicConfig(level=logging.INFO, handlers=[queued], force=True)
    listener = logging.handlers.QueueListener(records, handler, respect_handler_level=True)
    listener.start()
    return listener


def run(config: OperatorConfig) -> None:
    listener = log_off_the_loop()
    try:
        _run(config)
    finally:
        listener.stop()  # every record queued so far is written


#: How often Kopf re-checks a deleted resource's timer or daemon that did not exit at once (Kopf's default is 60 s).
#: A pool's timer is often mid-reconcile (awaiting the API server) when its pool is deleted: with the default,
#: `kubectl delete inferencepool` then waited a whole minute after the reconcile had ended. Each re-check is one
#: small patch of the resource being deleted, so a short interval costs little.
CANCELLATION_POLLING_SECONDS = 2.0


def kopf_settings(config: OperatorConfig) -> kopf.OperatorSettings:
    settings = kopf.OperatorSettings()
    settings.peering.lifetime = config.peering_lifetime
    settings.background.cancellation_polling = CANCELLATION_POLLING_SECONDS
    return settings


def peering_name(config: OperatorConfig) -> str | None:
    """The Kopf peering this replica joins. Each shard is its own peering (its replicas elect one leader among
    themselves, not one among every shard): shard 0 keeps the configured name, shard i>0 joins `<name>-shard-<i>`,
    an object the admin creates beside the first."""
    if config.peering is None or config.shard.first:
        return config.peering
    return f"{config.peering}-shard-{config.shard.index}"


def _run(config: OperatorConfig) -> None:
    for chatty in ("httpx", "httpx2", "aiohttp.access"):  # one line per HTTP request drowns the useful ones
        logging.getLogger(chatty).setLevel(logging.WARNING)
    if config.peering is not None:
        preload_providers()
    gc.freeze()  # what the imports made lives as long as the process: out of every later collection's scan
    gc.set_threshold(*GC_THRESHOLDS)
    registry = kopf.OperatorRegistry()
    register(registry, config)
    settings = kopf_settings(config)
    asyncio.run(
        kopf.operator(
            registry=registry,
            settings=settings,
            standalone=config.peering is None,
            peering_name=peering_name(config),
            priority=config.peering_priority,
            clusterwide=config.all_namespaces,
            namespaces=config.namespaces,
        )
    )
