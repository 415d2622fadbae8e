"""OpenAI's flex tier (`service_tier: "flex"`) on the emulator's sync path, with the real `openai` SDK and Barge's
OpenAI provider: the answer reports its tier, and a "resource unavailable" 429 is retried."""

from __future__ import annotations

import openai
import pytest

from barge.providers.base import Outcome, Request
from barge.providers.factory import make_provider
from tests.conftest import Factory, state

MESSAGES: list[dict[str, str]] = [{"role": "user", "content": "hello"}]


def client(url: str, retries: int = 0) -> openai.OpenAI:
    return openai.OpenAI(api_key="sk-test", base_url=f"{url}/v1", max_retries=retries)


def test_a_flex_answer_reports_its_tier_and_a_standard_one_default(start_emulator: Factory) -> None:
    emu = start_emulator({"sync": {"flex": {"latencyMs": 20}}})
    c = client(emu.url)
    flex = c.chat.completions.create(model="gpt-4o-mini", messages=MESSAGES, service_tier="flex")  # type: ignore[arg-type]
    standard = c.chat.completions.create(model="gpt-4o-mini", messages=MESSAGES)  # type: ignore[arg-type]
    assert flex.service_tier == "flex"
    assert standard.service_tier == "default"
    assert flex.usage is not None
    assert flex.usage.total_tokens > 0  # billed as any answer


def test_flex_without_capacity_is_a_429_resource_unavailable_without_retry_after(start_emulator: Factory) -> None:
    emu = start_emulator({"sync": {"flex": {"unavailableRate": 1.0}}})
    with pytest.raises(openai.RateLimitError) as caught:
        client(emu.url).chat.completions.create(model="gpt-4o-mini", messages=MESSAGES, service_tier="flex")  # type: ignore[arg-type]
    assert caught.value.code == "resource_unavailable"
    assert "Resource unavailable" in caught.value.message
    assert "retry-after" not in caught.value.response.headers
    # the standard tier is not affected
    ok = client(emu.url).chat.completions.create(model="gpt-4o-mini", messages=MESSAGES)  # type: ignore[arg-type]
    assert ok.service_tier == "default"


def test_the_sdk_retries_a_flex_429_until_it_is_served(start_emulator: Factory) -> None:
    emu = start_emulator({"seed": 7, "sync": {"flex": {"latencyMs": 5, "unavailableRate": 0.5}}})
    c = client(emu.url, retries=8).with_options(timeout=30)
    answers = [
        c.chat.completions.create(model="gpt-4o-mini", messages=MESSAGES, service_tier="flex")  # type: ignore[arg-type]
        for _ in range(3)
    ]
    assert [a.service_tier for a in answers] == ["flex"] * 3
    served = state(emu)["requests"]
    calls = sum(n for route, n in served.items() if route.startswith("POST") and "chat/completions" in route)
    assert calls > 3, served  # some of the 3 took more than one call: 429s retried


async def test_barges_provider_reads_the_tier_and_a_429_as_transient(start_emulator: Factory) -> None:
    emu = start_emulator({"sync": {"flex": {"latencyMs": 5}}})
    provider = make_provider("openai", "sk-test", base_url=f"{emu.url}/v1", sync_retries=0)
    assert provider.flex_tier is True
    flexed = Request("a", "gpt-4o-mini", "hi", 20, params={"service_tier": "flex"})
    served = await provider.complete(flexed)
    standard = await provider.complete(Request("b", "gpt-4o-mini", "hi", 20))
    assert (served.outcome, served.service_tier) == (Outcome.SUCCEEDED, "flex")
    assert (standard.outcome, standard.service_tier) == (Outcome.SUCCEEDED, "default")
    await provider.close()
    busy = start_emulator({"sync": {"flex": {"unavailableRate": 1.0}}})
    provider = make_provider("openai", "sk-test", base_url=f"{busy.url}/v1", sync_retries=0)
    refused = await provider.complete(flexed)
    assert refused.outcome is Outcome.TRANSIENT
    assert refused.retry_after is None  # no Retry-After: the fallback backs off on its own (batch/fallback.py)
    assert refused.error_type == "resource_unavailable"
    await provider.close()
    azure = make_provider("azure-openai", "k", base_url=emu.url, sync_retries=0)
    assert azure.flex_tier is False
    await azure.close()
