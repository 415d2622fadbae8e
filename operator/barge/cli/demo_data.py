"""Generated sample data for the demo and the examples: insurance claims, deterministic from a seed."""

from __future__ import annotations

import json
import random
from collections.abc import Iterator

KINDS = {
    "water": ["a burst pipe flooded the kitchen", "rain came through the roof", "the washing machine leaked"],
    "fire": ["a pan fire damaged the cooker hood", "an electrical fault scorched the wall"],
    "theft": ["a bicycle was stolen from the garage", "a laptop was taken from the car"],
    "glass": ["a stone cracked the windscreen", "the patio door shattered"],
}


def claims(count: int, seed: int = 7) -> Iterator[bytes]:
    rng = random.Random(seed)
    for n in range(count):
        kind = rng.choice(sorted(KINDS))
        yield json.dumps(
            {
                "id": str(8_800_000 + n),
                "policy": f"P-{rng.randint(10_000, 99_999)}",
                "text": f"On {rng.randint(1, 28)} November {rng.choice(KINDS[kind])}; the customer estimates "
                f"{rng.randint(80, 9_000)} EUR of damage.",
            }
        ).encode()
