"""Azure Service Bus at the SDK's boundary. Service Bus cannot run on this machine (no emulator ships in a
registry package this project may use), so this test uses a FAKE receiver with the SDK's method names, and
checks those names and parameters against the real `azure-servicebus` SDK so the fake cannot drift from it."""

from __future__ import annotations

import inspect
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from azure.servicebus.aio import ServiceBusClient, ServiceBusReceiver

from barge.emulator.core import REPLY_PREFIX
from barge.providers import make_provider
from barge.workers.queues import ServiceBus
from barge.workers.runtime import Worker, WorkerSettings
from tests.conftest import Factory


@dataclass
class FakeMessage:
    message_id: str
    body: bytes
    delivery_count: int = 0


@dataclass
class FakeReceiver:
    """Records what the worker asks of the broker (the calls the real ServiceBusReceiver offers)."""

    inbox: list[FakeMessage]
    calls: list[tuple[str, str, dict[str, Any]]] = field(default_factory=list)

    async def receive_messages(self, max_message_count: int = 1, max_wait_time: float | None = None) -> list[Any]:
        taken, self.inbox = self.inbox[:max_message_count], self.inbox[max_message_count:]
        return taken

    async def complete_message(self, message: FakeMessage) -> None:
        self.calls.append(("complete", message.message_id, {}))

    async def abandon_message(self, message: FakeMessage) -> None:
        self.calls.append(("abandon", message.message_id, {}))

    async def dead_letter_message(
        self, message: FakeMessage, reason: str | None = None, error_description: str | None = None
    ) -> None:
        self.calls.append(
            ("dead_letter", message.message_id, {"reason": reason, "error_description": error_description})
        )

    async def close(self) -> None:
        pass


@dataclass
class FakeClient:
    receiver: FakeReceiver

    def get_queue_receiver(self, queue_name: str, **_: Any) -> FakeReceiver:
        return self.receiver

    async def close(self) -> None:
        pass


def test_the_fake_matches_the_real_sdk() -> None:
    assert "queue_name" in inspect.signature(ServiceBusClient.get_queue_receiver).parameters
    assert "prefetch_count" in inspect.signature(ServiceBusClient.get_queue_receiver).parameters
    assert {"max_message_count", "max_wait_time"} <= set(
        inspect.signature(ServiceBusReceiver.receive_messages).parameters
    )
    assert {"reason", "error_description"} <= set(inspect.signature(ServiceBusReceiver.dead_letter_message).parameters)
    for name in ("complete_message", "abandon_message", "close"):
        assert hasattr(ServiceBusReceiver, name)


async def test_outcomes_map_to_complete_abandon_and_dead_letter(start_emulator: Factory, tmp_path: Path) -> None:
    def msg(cid: str, deliveries: int = 0) -> FakeMessage:
        return FakeMessage(cid, json.dumps({"correlationId": cid, "payload": {"text": cid}}).encode(), deliveries)

    settings = WorkerSettings.from_config({"model": "m", "output": {"url": str(tmp_path / "out")}, "maxDeliveries": 3})
    ok = FakeReceiver([msg("ok-1")])
    await Worker(
        ServiceBus("", "q", client=FakeClient(ok)),
        make_provider("openai", "k", base_url=f"{start_emulator().url}/v1", sync_retries=0),
        settings,
    ).run(idle_exit=True)
    assert ok.calls == [("complete", "ok-1", {})]
    assert json.loads((tmp_path / "out" / "ok-1.json").read_text())["output"] == f"{REPLY_PREFIX}ok-1"

    broken = start_emulator({"sync": {"outcomes": {"server_error": 1.0}}})
    flaky = FakeReceiver([msg("retry-me", deliveries=0), msg("give-up", deliveries=2)])
    await Worker(
        ServiceBus("", "q", client=FakeClient(flaky)),
        make_provider("openai", "k", base_url=f"{broken.url}/v1", sync_retries=0),
        settings,
    ).run(idle_exit=True)
    assert ("abandon", "retry-me", {}) in flaky.calls
    reason = next(c for c in flaky.calls if c[1] == "give-up")
    assert reason[0] == "dead_letter"
    assert reason[2]["reason"] == "infrastructure"

    invalid = start_emulator({"sync": {"outcomes": {"invalid_request": 1.0}}})
    bad = FakeReceiver([msg("bad-1"), FakeMessage("garbage", b"{not json")])
    await Worker(
        ServiceBus("", "q", client=FakeClient(bad)),
        make_provider("openai", "k", base_url=f"{invalid.url}/v1", sync_retries=0),
        settings,
    ).run(idle_exit=True)
    assert sorted((c[0], c[1], c[2]["reason"]) for c in bad.calls) == [
        ("dead_letter", "bad-1", "invalid"),
        ("dead_letter", "garbage", "invalid"),
    ]
