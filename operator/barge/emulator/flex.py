"""OpenAI's flex tier on the emulator's synchronous chat path: `service_tier: "flex"` in a request.

A flex call takes `sync.flex.latencyMs` instead of `sync.latencyMs`, and a share of them (`sync.flex.unavailableRate`,
drawn from the profile's seed) is answered 429 "resource unavailable" with no Retry-After, as OpenAI answers a
flex request it has no capacity for (not billed). The answer reports the tier it was served at: `"flex"`, and
`"default"` for a request that did not ask for flex, as OpenAI does.
"""

from __future__ import annotations

import asyncio
import random
import weakref

from aiohttp import web

from barge.emulator.core import STORE, Item, Store, sync_call
from barge.emulator.openai_shapes import error

FLEX = "flex"
UNAVAILABLE = "resource_unavailable"

_rngs: weakref.WeakKeyDictionary[Store, random.Random] = weakref.WeakKeyDictionary()
#: Flex 429s answered, per store (tests read them with `unavailable_count`).
_unavailable: weakref.WeakKeyDictionary[Store, int] = weakref.WeakKeyDictionary()


def asks_flex(body: dict[str, object]) -> bool:
    return body.get("service_tier") == FLEX


def tier_of(body: dict[str, object]) -> str:
    """The tier an answer to this request reports."""
    return FLEX if asks_flex(body) else "default"


def unavailable_count(store: Store) -> int:
    return _unavailable.get(store, 0)


async def flex_call(app: web.Application, item: Item) -> str | float:
    """`sync_call` at flex's latency, or UNAVAILABLE for a drawn share of calls (answered at once)."""
    store = app[STORE]
    rng = _rngs.setdefault(store, random.Random(f"{store.profile.seed}:flex"))
    if rng.random() < store.profile.sync.flex_unavailable:
        _unavailable[store] = _unavailable.get(store, 0) + 1
        return UNAVAILABLE
    extra = store.profile.sync.flex_latency_ms - store.profile.sync.latency_ms
    await asyncio.sleep(max(0.0, extra) / 1000)
    return await sync_call(app, item)


def unavailable() -> web.Response:
    return error(
        429,
        "Resource unavailable: there is no flex capacity for this request right now. Retry later, "
        "or send it at the default service tier.",
        type_=UNAVAILABLE,
        code=UNAVAILABLE,
    )
