"""The providers' admin usage and cost reports (#31.4) read by barge.providers.usage_reports, with the real SDKs,
from the emulator: the figures are those of the batches it processed (the tokens of each result), priced at the
batch rate of the shipped table, and `billing.overchargeRatio` bills more than that."""

from __future__ import annotations

import time
from decimal import Decimal
from typing import Any

import anthropic
import openai
import pytest

from barge.batch import prices
from barge.providers.base import Usage
from barge.providers.usage_reports import day_of, fetch_days
from tests.conftest import Factory
from tests.contract.test_anthropic_sdk import ended, req
from tests.contract.test_openai_sdk import finished, read_lines, submit
from tests.contract.test_openai_sdk import line as oa_line

DAY = 86400


def window() -> tuple[float, float]:
    today = time.time() // DAY * DAY
    return today - 2 * DAY, today + DAY


def anthropic_batch(url: str, n: int) -> tuple[int, Decimal]:
    """A batch of n requests through the anthropic SDK: (tokens billed, cost at the batch rate) from its results."""
    c = anthropic.Anthropic(api_key="sk-user", base_url=url, max_retries=0)
    batch = c.messages.batches.create(requests=[req(f"r-{i}", f"claim {i} about a flood") for i in range(n)])  # type: ignore[list-item]
    ended(c, batch.id)
    tokens, cost, table = 0, Decimal(0), prices.load()
    for r in c.messages.batches.results(batch.id):
        assert r.result.type == "succeeded"
        u = r.result.message.usage
        usage = Usage(
            u.input_tokens, u.output_tokens, u.cache_read_input_tokens or 0, u.cache_creation_input_tokens or 0
        )
        tokens += usage.input_tokens + usage.output_tokens + usage.cache_read_tokens + usage.cache_write_tokens
        cost += table.cost("claude-sonnet-4-6", usage, batch=True)
    return tokens, cost


def openai_batch(url: str, n: int) -> tuple[int, Decimal]:
    c = openai.OpenAI(api_key="sk-user", base_url=f"{url}/v1", max_retries=0)
    done = finished(c, submit(c, [oa_line(f"r-{i}", f"ticket {i}: refund please") for i in range(n)]).id)
    tokens, cost, table = 0, Decimal(0), prices.load()
    for row in read_lines(c, done.output_file_id):
        u: dict[str, Any] = row["response"]["body"]["usage"]
        cached = (u.get("prompt_tokens_details") or {}).get("cached_tokens", 0)
        tokens += u["prompt_tokens"] + u["completion_tokens"]
        cost += table.cost(
            "gpt-4o-mini", Usage(u["prompt_tokens"] - cached, u["completion_tokens"], cached), batch=True
        )
    return tokens, cost


@pytest.mark.parametrize("ratio", [1.0, 1.1])
def test_reports_bill_what_the_emulator_processed(start_emulator: Factory, ratio: float) -> None:
    emu = start_emulator({"billing": {"overchargeRatio": ratio}})
    a_tokens, a_cost = anthropic_batch(emu.url, 5)
    o_tokens, o_cost = openai_batch(emu.url, 4)
    lo, hi = window()
    today = day_of(time.time())

    (a_day,) = fetch_days("anthropic", "sk-ant-admin-k", emu.url, lo, hi)
    assert (a_day.provider, a_day.day) == ("anthropic", today)
    assert a_day.batch_tokens == a_tokens > 0
    assert a_day.other_tokens == 0
    assert a_day.cost_usd == a_cost * Decimal(str(ratio))

    (o_day,) = fetch_days("openai", "sk-admin-k", f"{emu.url}/v1", lo, hi)
    assert (o_day.provider, o_day.day) == ("openai", today)
    assert o_day.batch_tokens == o_tokens > 0
    assert abs(o_day.cost_usd - o_cost * Decimal(str(ratio))) < Decimal("1e-9")  # OpenAI's value is a JSON float


def test_an_invalid_admin_key_is_refused(start_emulator: Factory) -> None:
    emu = start_emulator()
    lo, hi = window()
    with pytest.raises(anthropic.AuthenticationError):
        fetch_days("anthropic", "invalid", emu.url, lo, hi)
    with pytest.raises(openai.AuthenticationError):
        fetch_days("openai", "invalid", f"{emu.url}/v1", lo, hi)
    with pytest.raises(ValueError, match="mistral"):
        fetch_days("mistral", "k", emu.url, lo, hi)
