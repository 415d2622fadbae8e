"""results.jsonl and failures.jsonl, written from the ledger in line order, streamed.

Every input line appears in exactly one of the two: succeeded and refused items in results.jsonl, invalid
and failed items in failures.jsonl (with the line number and the reason).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from barge.ledger import Ledger
from barge.storage import StoragePolicy, join, write_lines

RESULT_STATES = ("succeeded", "refused")
FAILURE_STATES = ("invalid", "failed")


def _real_id(custom_id: str) -> str | None:
    return None if custom_id.startswith("#") else custom_id


def result_lines(ledger: Ledger, job: str) -> Iterator[bytes]:
    page: list[dict[str, Any]] = []

    def emit(items: list[dict[str, Any]]) -> Iterator[bytes]:
        found = ledger.results_by_id(job, [i["custom_id"] for i in items])
        for item in items:
            r = found.get(item["custom_id"], {})
            yield json.dumps(
                {
                    "id": item["item_id"],
                    "custom_id": item["custom_id"],
                    "status": item["state"],
                    "output": r.get("output", ""),
                    "usage": {
                        k: int(r.get(k, 0))
                        for k in ("input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens")
                    },
                    "via": r.get("via", item["via"] or "batch"),
                    "attempt": int(r.get("attempt", item["attempts"])),
                },
                ensure_ascii=False,
            ).encode()

    for item in ledger.iter_items(job, states=RESULT_STATES):
        page.append(item)
        if len(page) >= 2000:
            yield from emit(page)
            page = []
    yield from emit(page)


def failure_lines(ledger: Ledger, job: str) -> Iterator[bytes]:
    for item in ledger.iter_items(job, states=FAILURE_STATES):
        yield json.dumps(
            {
                "line": item["line"],
                "id": item["item_id"],
                "custom_id": _real_id(item["custom_id"]),
                "status": item["state"],
                "reason": item["reason"],
                "error_type": item["error_type"],
            },
            ensure_ascii=False,
        ).encode()


def write_outputs(ledger: Ledger, job: str, output_url: str, policy: StoragePolicy) -> tuple[int, int]:
    ok = write_lines(join(output_url, "results.jsonl"), result_lines(ledger, job), policy)
    bad = write_lines(join(output_url, "failures.jsonl"), failure_lines(ledger, job), policy)
    return ok, bad
