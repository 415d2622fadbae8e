"""results.jsonl and failures.jsonl, written from the ledger in line order, streamed.

Every input line appears in exactly one of the two: succeeded and refused items in results.jsonl, invalid
and failed items in failures.jsonl (with the line number and the reason).
"""

from __future__ import annotations

from collections.abc import Iterator

import orjson

from barge.ledger import Ledger
from barge.storage import StoragePolicy, join, write_lines

RESULT_STATES = ("succeeded", "refused")
FAILURE_STATES = ("invalid", "failed")


def _real_id(custom_id: str) -> str | None:
    return None if custom_id.startswith("#") else custom_id


def result_lines(ledger: Ledger, job: str) -> Iterator[bytes]:
    for (
        _,
        item_id,
        custom_id,
        state,
        via,
        attempts,
        output,
        tin,
        tout,
        tcr,
        tcw,
        rvia,
        rattempt,
    ) in ledger.joined_results(job, RESULT_STATES):
        yield orjson.dumps(
            {
                "id": item_id,
                "custom_id": custom_id,
                "status": state,
                "output": output or "",
                "usage": {
                    "input_tokens": tin or 0,
                    "output_tokens": tout or 0,
                    "cache_read_tokens": tcr or 0,
                    "cache_write_tokens": tcw or 0,
                },
                "via": rvia or via or "batch",
                "attempt": rattempt or attempts,
            }
        )


def failure_lines(ledger: Ledger, job: str) -> Iterator[bytes]:
    for item in ledger.iter_items(job, states=FAILURE_STATES):
        yield orjson.dumps(
            {
                "line": item["line"],
                "id": item["item_id"],
                "custom_id": _real_id(item["custom_id"]),
                "status": item["state"],
                "reason": item["reason"],
                "error_type": item["error_type"],
            }
        )


def write_outputs(ledger: Ledger, job: str, output_url: str, policy: StoragePolicy) -> tuple[int, int]:
    ok = write_lines(join(output_url, "results.jsonl"), result_lines(ledger, job), policy)
    bad = write_lines(join(output_url, "failures.jsonl"), failure_lines(ledger, job), policy)
    return ok, bad
