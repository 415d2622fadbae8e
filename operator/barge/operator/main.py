"""`barge operator`: build the settings, the Kopf registry, and run until stopped."""

from __future__ import annotations

import asyncio
import logging

import kopf

from barge.config import OperatorConfig
from barge.operator.handlers import register


def run(config: OperatorConfig) -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    for chatty in ("httpx", "httpx2", "aiohttp.access"):  # one line per HTTP request drowns the useful ones
        logging.getLogger(chatty).setLevel(logging.WARNING)
    registry = kopf.OperatorRegistry()
    register(registry, config)
    settings = kopf.OperatorSettings()
    settings.peering.lifetime = config.peering_lifetime
    asyncio.run(
        kopf.operator(
            registry=registry,
            settings=settings,
            standalone=config.peering is None,
            peering_name=config.peering,
            priority=config.peering_priority,
            clusterwide=config.all_namespaces,
            namespaces=config.namespaces,
        )
    )
