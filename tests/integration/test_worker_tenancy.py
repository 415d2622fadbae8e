"""Queue workers of one team against a real redis-server and the emulator: the attacks of issue 12 on workers.

Each test is named after the attack; on the code before the tenancy policy each one fails (the message's own
`tenant` was metered, the idempotency key was the correlationId alone, and payloadUrl could be any path).
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

from barge.emulator.core import REPLY_PREFIX
from barge.providers import make_provider
from barge.workers.queues import RedisStreams
from barge.workers.runtime import Worker, WorkerSettings
from tests.conftest import Factory
from tests.integration.test_workers import dead_letters, pending, push


def team_worker(redis_url: str, stream: str, emu_url: str, root: Path, tenant: str, **over: Any) -> Worker:
    """A worker as the operator configures it for a pool of `tenant` (storage prefix: root/tenant/)."""
    config: dict[str, Any] = {
        "model": "gpt-4o-mini",
        "output": {"url": f"file://{root}/{tenant}/out"},
        "maxDeliveries": 2,
        "request": {"template": "{{ text }}", "maxTokens": 20},
        "tenant": tenant,
        "storage": {"prefixes": [f"file://{root}/{tenant}/"]},
        **over,
    }
    queue = RedisStreams(redis_url, stream, "barge", consumer="w1", claim_idle_ms=100)
    provider = make_provider("openai", "k", base_url=f"{emu_url}/v1", sync_retries=0)
    return Worker(queue, provider, WorkerSettings.from_config(config))


def tokens_by_tenant(worker: Worker) -> dict[str, float]:
    out: dict[str, float] = {}
    for metric in worker.metrics.registry.collect():
        for sample in metric.samples:
            if sample.name == "barge_worker_tokens_total":
                out[sample.labels["tenant"]] = out.get(sample.labels["tenant"], 0) + sample.value
    return out


async def test_worker_message_cannot_meter_its_spend_to_another_tenant(
    redis_url: str, start_emulator: Factory, tmp_path: Path
) -> None:
    stream = f"s-{uuid.uuid4().hex[:8]}"
    emu = start_emulator()
    await push(
        redis_url,
        stream,
        {"correlationId": "bill-globex", "tenant": "globex", "payload": {"text": "charge it to globex"}},
        {"correlationId": "plain", "payload": {"text": "no tenant named"}},
        {"correlationId": "same", "tenant": "acme", "payload": {"text": "repeats the pool's tenant"}},
    )
    w = team_worker(redis_url, stream, emu.url, tmp_path, "acme")
    await w.run(idle_exit=True, wait_ms=200)
    dead = await dead_letters(redis_url, stream)
    assert [d["reason"] for d in dead] == ["invalid"], dead
    assert "globex" in dead[0]["detail"]
    assert "acme" in dead[0]["detail"]
    spend = tokens_by_tenant(w)
    assert set(spend) == {"acme"}
    assert spend["acme"] > 0
    records = [json.loads(p.read_text()) for p in (tmp_path / "acme" / "out" / "acme").glob("*.json")]
    assert sorted(r["correlationId"] for r in records) == ["plain", "same"]
    assert {r["tenant"] for r in records} == {"acme"}
    assert await pending(redis_url, stream) == 0
    await w.queue.close()
    await w.provider.close()


async def test_worker_idempotency_key_of_another_producer_cannot_suppress_a_message(
    redis_url: str, start_emulator: Factory, tmp_path: Path
) -> None:
    stream = f"s-{uuid.uuid4().hex[:8]}"
    emu = start_emulator()
    out = tmp_path / "acme" / "out"
    out.mkdir(parents=True)
    # Another producer got "order-7" answered first where the old key (correlationId alone) would look.
    (out / "order-7.json").write_text(json.dumps({"correlationId": "order-7", "output": "someone else's"}))
    await push(redis_url, stream, {"correlationId": "order-7", "payload": {"text": "acme's own order"}})
    w = team_worker(redis_url, stream, emu.url, tmp_path, "acme")
    await w.run(idle_exit=True, wait_ms=200)
    assert w.model_calls == 1, "acme's message was answered, not taken for a duplicate"
    answer = json.loads((out / "acme" / "order-7.json").read_text())
    assert answer["output"] == f"{REPLY_PREFIX}acme's own order"
    await w.queue.close()
    await w.provider.close()


async def test_claim_check_payload_url_cannot_read_dev_zero_etc_or_another_teams_files(
    redis_url: str, start_emulator: Factory, tmp_path: Path
) -> None:
    stream = f"s-{uuid.uuid4().hex[:8]}"
    emu = start_emulator()
    (tmp_path / "globex").mkdir()
    (tmp_path / "globex" / "claim.json").write_text(json.dumps({"text": "GLOBEX-PRIVATE-BYTES"}))
    (tmp_path / "acme").mkdir()
    (tmp_path / "acme" / "claim.json").write_text(json.dumps({"text": "acme's claim"}))
    (tmp_path / "acme" / "huge.json").write_text(json.dumps({"text": "x" * 2000}))
    (tmp_path / "acme" / "link.json").symlink_to(tmp_path / "globex" / "claim.json")
    attacks = {
        "zero": "file:///dev/zero",
        "passwd": "file:///etc/passwd",
        "other-team": f"file://{tmp_path}/globex/claim.json",
        "dotdot": f"file://{tmp_path}/acme/../globex/claim.json",
        "symlink": f"file://{tmp_path}/acme/link.json",
        "bucket": "s3://globex-bucket/claim.json",
        "too-big": f"file://{tmp_path}/acme/huge.json",
    }
    await push(
        redis_url,
        stream,
        *({"correlationId": cid, "payloadUrl": url} for cid, url in attacks.items()),
        {"correlationId": "fine", "payloadUrl": f"file://{tmp_path}/acme/claim.json"},
    )
    w = team_worker(redis_url, stream, emu.url, tmp_path, "acme", maxPayloadBytes=1000)
    await w.run(idle_exit=True, wait_ms=200)
    dead = await dead_letters(redis_url, stream)
    assert len(dead) == len(attacks)
    assert all(d["reason"] == "invalid" for d in dead)
    assert all("StoragePolicy" in d["detail"] or "limit" in d["detail"] for d in dead), dead
    assert w.model_calls == 1
    answers = list((tmp_path / "acme" / "out").rglob("*.json"))
    assert [p.stem for p in answers] == ["fine"]
    assert "GLOBEX-PRIVATE-BYTES" not in "".join(p.read_text() for p in answers) + json.dumps(dead)
    await w.queue.close()
    await w.provider.close()
