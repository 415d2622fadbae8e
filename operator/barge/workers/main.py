"""`barge worker --config FILE`: wire the queue, the provider and the metrics, then run until SIGTERM."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
from pathlib import Path
from typing import Any

import yaml
from prometheus_client import start_http_server

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
    if config.get("metricsPort"):
        start_http_server(int(config["metricsPort"]), registry=metrics.registry)
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
