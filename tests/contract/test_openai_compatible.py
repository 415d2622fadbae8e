"""type openai-compatible: what Groq and Together do differently from OpenAI, handled by the adapter (the provider
contract itself runs on both in test_provider_contract.py)."""

from __future__ import annotations

import openai
import pytest
from pydantic import ValidationError

from barge.api.batchjob import LLMBatchJobSpec
from barge.api.pool import PoolProvider
from barge.providers import Request, make_provider
from barge.providers.encoding import encoder
from tests.conftest import Factory, state
from tests.contract.test_provider_contract import wait_ended

MODEL = "llama-3.1-8b-instant"


@pytest.mark.parametrize("path", ["/groq/openai/v1", "/together/v1"])
async def test_retention_and_statuses_are_the_adapters_business(start_emulator: Factory, path: str) -> None:
    """A job's retention asks OpenAI for output_expires_after; these services refuse the parameter, so the adapter
    does not send it. Together's upper-case statuses are read as OpenAI's."""
    emu = start_emulator()
    p = make_provider("openai-compatible", "k", base_url=emu.url + path, sync_retries=0)
    lines = [p.encode(Request(f"r{n}", MODEL, f"text {n}", 10)) for n in range(3)]
    info = await p.create_batch(lines, {"barge_job": "t", "barge_shard": "s00000"}, output_expires_after=86400)
    assert info.status == "validating"
    ended = await wait_ended(p, info.id)
    assert ended.status == "completed"
    assert state(emu)["batches"][0]["output_expires_after"] is None
    assert p.name == "openai-compatible"
    assert not p.keeps_metadata
    await p.close()


def test_the_emulator_refuses_output_expiry_and_knows_groqs_windows(start_emulator: Factory) -> None:
    emu = start_emulator()
    groq = openai.OpenAI(api_key="k", base_url=emu.url + "/groq/openai/v1", max_retries=0)
    file = groq.files.create(
        file=(
            "b.jsonl",
            b'{"custom_id":"a","method":"POST","url":"/v1/chat/completions",'
            b'"body":{"model":"m","messages":[{"role":"user","content":"x"}]}}\n',
        ),
        purpose="batch",
    )
    create = groq.batches.create
    assert create(input_file_id=file.id, endpoint="/v1/chat/completions", completion_window="7d").id  # type: ignore[arg-type]
    with pytest.raises(openai.BadRequestError, match="completion_window"):
        create(input_file_id=file.id, endpoint="/v1/chat/completions", completion_window="8d")  # type: ignore[arg-type]
    with pytest.raises(openai.BadRequestError, match="output_expires_after"):
        create(
            input_file_id=file.id,
            endpoint="/v1/chat/completions",
            completion_window="24h",
            output_expires_after={"anchor": "created_at", "seconds": 3600},
        )
    together = openai.OpenAI(api_key="k", base_url=emu.url + "/together/v1", max_retries=0)
    with pytest.raises(openai.BadRequestError, match="completion_window"):
        together.batches.create(input_file_id=file.id, endpoint="/v1/chat/completions", completion_window="7d")  # type: ignore[arg-type]
    listed = together.batches.list().data
    assert listed[0].status in ("VALIDATING", "IN_PROGRESS", "COMPLETED")
    assert listed[0].metadata is None
    assert listed[0].request_counts is None


def test_base_url_is_required() -> None:
    with pytest.raises(ValueError, match="baseURL"):
        make_provider("openai-compatible", "k")
    spec = {
        "provider": {"type": "openai-compatible", "model": MODEL, "secretRef": {"name": "k"}},
        "input": {"url": "in.jsonl"},
        "output": {"url": "out/"},
    }
    with pytest.raises(ValidationError, match="baseURL is required"):
        LLMBatchJobSpec.model_validate(spec)
    spec["provider"]["baseURL"] = "https://api.groq.com/openai/v1"  # type: ignore[index]
    assert LLMBatchJobSpec.model_validate(spec).provider.type == "openai-compatible"
    assert b'"url":"/v1/chat/completions"' in encoder("openai-compatible")(Request("a", MODEL, "x", 5))
    pool = {"type": "openai-compatible", "model": MODEL, "secretRef": {"name": "k"}}
    with pytest.raises(ValidationError, match="baseURL is required"):
        PoolProvider.model_validate(pool)
    assert PoolProvider.model_validate({**pool, "baseURL": "https://api.together.xyz/v1"}).base_url
