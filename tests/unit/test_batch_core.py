"""The engine's pure parts: custom ids, rendering, admission of bad input, sharding, routing, prices, limiter."""

from __future__ import annotations

import asyncio
import json
import random
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from barge.api.batchjob import LLMBatchJobSpec
from barge.api.common import ModelPrice
from barge.batch import budget, plan, prices
from barge.batch.fallback import RateLimiter
from barge.batch.render import CUSTOM_ID, Renderer, make_custom_id
from barge.batch.routing import missing, route
from barge.providers.base import Outcome, Request, Result, Usage
from barge.storage import StorageError, StoragePolicy, locate, read_lines


def spec(**over: Any) -> LLMBatchJobSpec:
    base: dict[str, Any] = {
        "provider": {"type": "anthropic", "model": "claude-sonnet-4-6", "secretRef": {"name": "k"}},
        "input": {"url": "in.jsonl"},
        "output": {"url": "out/"},
        "request": {"template": "Claim {{ id }}: {{ text }}", "system": "Classify.", "maxTokens": 100},
    }
    base.update(over)
    return LLMBatchJobSpec.model_validate(base)


def encode(request: Request) -> bytes:
    return json.dumps({"custom_id": request.custom_id, "user": request.user}).encode()


def test_custom_id_is_deterministic_and_safe() -> None:
    values = {"id": "8841207", "promptVersion": "v3", "runDate": "2026-11-04"}
    assert make_custom_id("claim-{id}-{promptVersion}-{runDate}", values) == "claim-8841207-v3-2026-11-04"
    odd = make_custom_id("{id}", {"id": "ACME/claims 7#"})
    assert CUSTOM_ID.match(odd)
    assert odd == make_custom_id("{id}", {"id": "ACME/claims 7#"})  # stable across runs
    assert odd != make_custom_id("{id}", {"id": "ACME claims/7#"})  # sanitising never merges two ids
    long = make_custom_id("{id}", {"id": "x" * 200})
    assert len(long) == 64
    assert CUSTOM_ID.match(long)


CORPUS: list[tuple[bytes, str | None]] = [
    (b'{"id": "1", "text": "fine"}', None),
    (b'{"id": 2, "text": "integer ids are fine"}', None),
    (b'{"id": "3", "text": "crlf"}\r', None),
    (b"{not json", "malformed_json"),
    (b'{"text": "no id"}', "missing_id"),
    (b'{"id": "1", "text": "same id again"}', "duplicate_id"),
    (b'{"id": 4.5, "text": "float id"}', "bad_id"),
    (b'{"id": null, "text": "null id"}', "bad_id"),
    (b'{"id": "5"}', "template_error"),
    (b"", "empty_line"),
    (b"   ", "empty_line"),
    (b'["a", "list"]', "malformed_json"),
    (b'{"id": "6", "text": "' + b"y" * 2_000_000 + b'"}', "request_too_large"),
]


def test_bad_input_corpus_every_line_ends_visible(tmp_path: Path) -> None:
    path = tmp_path / "in.jsonl"
    path.write_bytes(b"\xef\xbb\xbf" + b"\n".join(line for line, _ in CORPUS) + b"\n")
    s = spec()
    lines = list(read_lines(str(path), StoragePolicy()))
    assert len(lines) == len(CORPUS)
    rows = list(plan.admit(lines, Renderer(s, "2026-11-30", "t"), plan.RequestFactory("m", s.request), encode))
    assert [r["line"] for r in rows] == list(range(1, len(CORPUS) + 1))
    for row, (_, expected) in zip(rows, CORPUS, strict=True):
        if expected is None:
            assert row["state"] == "pending", row
        else:
            assert row["state"] == "invalid"
            assert row["error_type"] == expected, row
            assert row["reason"]
    assert rows[0]["custom_id"] == "1-v1-2026-11-30"  # the BOM did not stick to the first line
    assert rows[0]["payload"] == "Claim 1: fine"
    assert rows[8]["reason"].startswith("template references a missing field")
    assert len({r["custom_id"] for r in rows}) == len(rows)


def test_empty_file(tmp_path: Path) -> None:
    path = tmp_path / "empty.jsonl"
    path.write_bytes(b"")
    assert list(read_lines(str(path), StoragePolicy())) == []


def test_sandbox_refuses_attribute_escapes() -> None:
    s = spec(request={"template": "{{ text.__class__.__mro__ }}"})
    rows = list(
        plan.admit(
            [(1, b'{"id": "1", "text": "x"}')], Renderer(s, "d", "t"), plan.RequestFactory("m", s.request), encode
        )
    )
    assert rows[0]["state"] == "invalid"
    assert rows[0]["error_type"] == "template_error"


def test_shards_respect_count_and_bytes() -> None:
    items = [(n, 100, 0, 25) for n in range(1, 26)]
    assert [s.count for s in plan.spans(items, 10, 10_000)] == [10, 10, 5]
    assert [(s.count, s.size) for s in plan.spans(items, 100, 505)] == [(5, 500)] * 5  # 5 x (100 + 1 separator)
    assert [(s.first, s.last) for s in plan.spans(items, 7, 10_000)] == [(1, 7), (8, 14), (15, 21), (22, 25)]
    assert [(s.count, s.size) for s in plan.spans([(1, 900, 0, 1), (2, 10, 0, 1)], 10, 500)] == [(1, 900), (1, 10)]


def test_spans_cut_parts_within_the_token_limit() -> None:
    tokens = [300, 300, 300, 1200, 50, 950, 10]
    rows = [(n, 10, 0, t) for n, t in enumerate(tokens, start=1)]
    parts = [(s.first, s.last, s.tokens) for s in plan.spans(rows, 100, 10_000, 1000)]
    assert parts == [(1, 3, 900), (4, 4, 1200), (5, 6, 1000), (7, 7, 10)]  # an item over the limit alone
    assert [(s.first, s.last, s.count) for s in plan.spans(rows, 100, 10_000)] == [(1, 7, 7)]  # 0: no token cut
    assert list(plan.spans([], 100, 10_000, 10)) == []


def _shards(
    rows: list[tuple[int, int, int, int]], max_requests: int, max_bytes: int
) -> list[list[tuple[int, int, int, int]]]:
    """The reference cut by count and bytes (each request and its separator byte), holding every row."""
    out: list[list[tuple[int, int, int, int]]] = []
    size = 0
    for row in rows:
        if not out or len(out[-1]) >= max_requests or size + row[1] + 1 > max_bytes:
            out.append([])
            size = 0
        out[-1].append(row)
        size += row[1] + 1
    return out


def _parts(rows: list[tuple[int, int, int, int]], limit: int) -> list[list[tuple[int, int, int, int]]]:
    """The reference cut by tokens (what the engine did with a shard held as a list)."""
    out: list[list[tuple[int, int, int, int]]] = []
    for row in rows:
        if not out or (limit and out[-1] and sum(r[3] for r in out[-1]) + row[3] > limit):
            out.append([])
        out[-1].append(row)
    return out


@pytest.mark.parametrize("seed", range(40))
def test_spans_are_the_shards_then_the_token_cut_in_one_pass(seed: int) -> None:
    rng = random.Random(seed)
    rows = [
        (line, rng.randint(1, 60), rng.randint(0, 3), rng.randint(1, 40))
        for line in sorted(rng.sample(range(1, 400), rng.randint(0, 150)))
    ]
    max_requests, max_bytes, max_tokens = rng.randint(1, 30), rng.randint(50, 900), rng.choice([0, 30, 100, 400])
    expected = [
        plan.Span(p[0][0], p[-1][0], len(p), max(r[2] for r in p), sum(r[3] for r in p), sum(r[1] for r in p))
        for shard in _shards(rows, max_requests, max_bytes)
        for p in _parts(shard, max_tokens)
    ]
    assert list(plan.spans(rows, max_requests, max_bytes, max_tokens)) == expected


@pytest.mark.parametrize(
    ("outcome", "attempts", "state", "spent"),
    [
        (Outcome.SUCCEEDED, 0, "succeeded", 1),
        (Outcome.REFUSED, 0, "refused", 1),
        (Outcome.INVALID, 0, "invalid", 1),
        (Outcome.TRANSIENT, 0, "pending", 1),
        (Outcome.TRANSIENT, 2, "failed", 3),
        (Outcome.EXPIRED, 1, "pending", 2),
        (Outcome.EXPIRED, 2, "failed", 3),
        (Outcome.CANCELED, 2, "pending", 2),
    ],
)
def test_routing_table(outcome: Outcome, attempts: int, state: str, spent: int) -> None:
    change = route(Result("c", outcome, error_type="t", message="m"), attempts, max_attempts=3)
    assert change.state == state
    assert change.attempts == spent


def test_missing_results_are_transient() -> None:
    assert route(missing("c"), 0, 3).state == "pending"
    assert route(missing("c"), 0, 3).error_type == "missing_result"


def test_prices() -> None:
    table = prices.load()
    usage = Usage(
        input_tokens=1_000_000, output_tokens=1_000_000, cache_read_tokens=1_000_000, cache_write_tokens=1_000_000
    )
    assert table.cost("claude-sonnet-4-6", usage, batch=False) == Decimal("24.30")
    assert table.cost("claude-sonnet-4-6", Usage(input_tokens=1), batch=True) == Decimal("0.0000015")
    assert table.cost("claude-sonnet-4-6", usage, batch=True) == Decimal("12.15")
    assert table.price("gpt-4o-mini-batch") == table.price("gpt-4o-mini")  # Azure deployment names by prefix
    assert table.cost("unknown-model", usage, batch=True) == 0
    assert prices.money(Decimal("1.500000")) == "1.5"
    assert prices.money(Decimal("0")) == "0"


def test_price_resolution_job_then_pool_then_table() -> None:
    """A job's own spec.budget.price wins over its provider pool's spec.provider.price, which wins over the table."""
    table = prices.load()
    pool_price = ModelPrice.model_validate({"input": "1", "output": "2"})
    on_pool = {"type": "pool", "poolRef": {"name": "azure-eu"}}
    bare = spec(provider=on_pool, budget={"maxCostUSD": "5"})
    own = spec(provider=on_pool, budget={"maxCostUSD": "5", "price": {"input": "3", "output": "4"}})
    assert budget.job_prices(table, bare, "claims-eu", None).price("claims-eu") is None
    assert budget.job_prices(table, bare, "claims-eu", pool_price).price("claims-eu") == prices.Price(
        Decimal(1), Decimal(2), Decimal(0), Decimal(0)
    )
    assert budget.job_prices(table, own, "claims-eu", pool_price).price("claims-eu") == prices.Price(
        Decimal(3), Decimal(4), Decimal(0), Decimal(0)
    )
    listed = budget.job_prices(table, bare, "claude-sonnet-4-6", pool_price).price("claude-sonnet-4-6")
    assert listed == prices.Price(Decimal(1), Decimal(2), Decimal(0), Decimal(0))  # the pool's deployment price
    message = budget.missing_price_message("claims-eu", bare)
    assert "spec.budget.price" in message
    assert "spec.provider.price of InferencePool 'azure-eu'" in message
    assert "InferencePool" not in budget.missing_price_message("claims-eu", spec(budget={"maxCostUSD": "5"}))


async def test_rate_limiter_keeps_the_long_run_token_rate() -> None:
    now = [0.0]

    async def fake_sleep(seconds: float) -> None:
        now[0] += seconds

    limiter = RateLimiter(requests_per_minute=0, tokens_per_minute=600, clock=lambda: now[0], burst_seconds=1.0)
    original = asyncio.sleep
    asyncio.sleep = fake_sleep  # type: ignore[assignment]
    try:
        for _ in range(31):
            await limiter.acquire(100)  # each request is larger than the 10-token bucket
    finally:
        asyncio.sleep = original
    # 3,100 tokens at 600 a minute: about 5 minutes, not the 31 seconds a clipped count would allow
    assert now[0] == pytest.approx(300, rel=0.05)


async def test_rate_limiter_paces_requests() -> None:
    now = [0.0]
    slept: list[float] = []

    async def fake_sleep(seconds: float) -> None:
        slept.append(seconds)
        now[0] += seconds

    limiter = RateLimiter(requests_per_minute=60, tokens_per_minute=0, clock=lambda: now[0])
    original = asyncio.sleep
    asyncio.sleep = fake_sleep  # type: ignore[assignment]
    try:
        for _ in range(70):
            await limiter.acquire(10)
        limiter.pause(5)
        await limiter.acquire(10)
    finally:
        asyncio.sleep = original
    # 60 in the bucket, 10 more at one a second (t=10), then a 5 s pause during which the bucket refills
    assert now[0] == pytest.approx(15, abs=0.01)
    assert slept[-1] == pytest.approx(5, abs=0.01)


def test_storage_safety(tmp_path: Path) -> None:
    root = tmp_path / "allowed"
    root.mkdir()
    (root / "in.jsonl").write_text("{}\n")
    policy = StoragePolicy(allowed_roots=(root,))
    assert locate(f"file://{root}/in.jsonl", policy)[1] == str(root / "in.jsonl")
    for bad in (
        f"file://{root}/../secret",
        "file:///etc/passwd",
        "relative.jsonl",
        "ftp://host/x",
        "http://169.254.169.254/latest/meta-data",
        "http://metadata.google.internal/x",
        "s3://b/../x",
    ):
        with pytest.raises(StorageError):
            locate(bad, policy)
    (root / "link").symlink_to("/etc")
    with pytest.raises(StorageError, match="outside the allowed file roots"):
        locate(f"file://{root}/link/passwd", policy)
