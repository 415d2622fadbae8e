"""`barge worker --config FILE`: wire the queue, the provider and the metrics, then run until SIGTERM."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
from pathlib import Path
from typing import Any

import yaml
from prometheus_client import CollectorRegistry, start_http_server

from barge.providers import make_provider
from barge.workers.queues import Queue, RabbitMQ, RedisStreams, ServiceBus
from barge.workers.runtime import Metrics, Worker, WorkerSettings


def make_queue(config: dict[str, Any]) -> Queue:
    q = config["queue"]
    secret = os.environ.get("BARGE_QUEUE_SECRET") or None
    if q["type"] == "redis-streams":
        return RedisStreams(
            q["address"],
            q["stream"],
            q.get("consumerGroup", "barge"),
            # the pod's name: on the host's network every replica has the node's hostname, one consumer for all
            consumer=os.environ.get("POD_NAME", ""),
            password=secret,
            claim_idle_ms=int(config.get("claimIdleMs", 30_000)),
        )
    if q["type"] == "rabbitmq":
        return RabbitMQ(secret or q["address"], q["queueName"])
    if q["type"] == "azure-servicebus":
        if not secret:
            raise ValueError("azure-servicebus needs queue.authSecretRef (a connection string)")
        return ServiceBus(secret, q["queueName"])
    raise ValueError(f"unknown queue type {q['type']!r}")


def serve_metrics(config: dict[str, Any], registry: CollectorRegistry) -> int | None:
    """Serve /metrics on the config's metricsPort and return the port; none without one. 0 is a port the kernel
    picks: the operator writes 0 for pods on the host's network (k8s/workers.py WORKER_PORT), where replicas on
    one node must not share a port. The port is logged, as nothing else names it."""
    if config.get("metricsPort") is None:
        return None
    # BARGE_METRICS_HOST: on the host's network the pod's IP (the node's), not every interface of the node
    host = os.environ.get("BARGE_METRICS_HOST") or "0.0.0.0"
    server, _ = start_http_server(int(config["metricsPort"]), addr=host, registry=registry)
    port = int(server.server_port)
    logging.getLogger("barge.worker").info("metrics on %s:%d", host, port)
    return port


def run(config_path: Path) -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    logging.getLogger("httpx2").setLevel(logging.WARNING)
    config = yaml.safe_load(config_path.read_text())
    provider_cfg = config["provider"]
    provider = make_provider(
        provider_cfg["type"],
        os.environ.get(provider_cfg.get("apiKeyEnv", "BARGE_API_KEY"), "none"),
        base_url=provider_cfg.get("baseURL", ""),
        api_version=provider_cfg.get("apiVersion", ""),
    )
    metrics = Metrics(pool=str(config.get("pool", "")), worker=str(config.get("worker", "")))
    serve_metrics(config, metrics.registry)
    worker = Worker(make_queue(config), provider, WorkerSettings.from_config(config), metrics)

    async def main() -> None:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, worker.stopping.set)
        try:
            await worker.run()
        finally:
            await worker.queue.close()
            await provider.close()

    asyncio.run(main())
