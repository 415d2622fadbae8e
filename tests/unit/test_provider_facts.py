"""The providers table (barge.providers.facts) against the adapters it describes and the API it lists."""

from __future__ import annotations

import typing

import pytest
from typer.testing import CliRunner

from barge.api.batchjob import ProviderType
from barge.cli.local import provider_line
from barge.cli.main import app
from barge.providers import facts, make_provider

BASE_URLS = {"azure-openai": "https://example.openai.azure.com", "openai-compatible": "https://api.groq.com/openai/v1"}


def test_every_provider_type_has_a_row() -> None:
    types = set(typing.get_args(ProviderType)) - {"pool"}
    assert {f.type for f in facts.FACTS} == types


@pytest.mark.parametrize("kind", [f.type for f in facts.FACTS])
async def test_the_row_holds_the_adapters_own_shard_limits(kind: str) -> None:
    provider = make_provider(kind, "plan-only", base_url=BASE_URLS.get(kind))
    try:
        assert (provider.max_requests, provider.max_bytes) == (
            facts.BY_TYPE[kind].max_requests,
            facts.BY_TYPE[kind].max_bytes,
        )
    finally:
        await provider.close()


def test_sizes_read_as_the_providers_state_them() -> None:
    assert facts.size(256 * 1024 * 1024 - 1024) == "256 MB"
    assert facts.size(2 * 1024**3 - 1) == "2 GB"
    assert facts.size(100 * 1024 * 1024) == "100 MB"
    assert facts.size(1000) == "1,000 B"


def test_barge_providers_prints_every_type() -> None:
    out = CliRunner().invoke(app, ["providers"], terminal_width=200)
    assert out.exit_code == 0, out.output
    for f in facts.FACTS:
        assert f.type in out.output
    assert "clientRequestToken" in out.output  # Bedrock's idempotency key, the only one


def test_the_plan_line_names_the_limits_used_and_the_tables_ratio() -> None:
    from decimal import Decimal

    line = provider_line("bedrock", 20_000, 1024**3 - 1, Decimal("0.5"))
    assert line.startswith("provider bedrock: at most 20,000 requests and 1 GB per shard; batch price 0.5 x list")
    assert "create idempotent: yes" in line
    assert "**" not in line
    assert "`" not in line
    assert provider_line("pool", 10, 1024 * 1024, Decimal("0.5")) == (
        "provider pool: at most 10 requests and 1 MB per shard"
    )
