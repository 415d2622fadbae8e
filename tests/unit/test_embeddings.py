"""spec.request.endpoint embeddings, the pure parts: what admission refuses (the operator's InvalidSpec message),
how a request line is encoded, how an answer line is read and written to results.jsonl, and the price."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import orjson
import pytest
from pydantic import ValidationError

from barge.api.batchjob import LLMBatchJobSpec
from barge.batch import prices
from barge.batch.plan import RequestFactory, admit_line
from barge.batch.render import Renderer
from barge.emulator.embeddings import vector
from barge.providers import Outcome, Request
from barge.providers.base import Usage
from barge.providers.content import unpack
from barge.providers.encoding import encoder, openai_encoder
from barge.providers.openai_provider import parse_line, result_from_line


def spec(provider: dict[str, Any], **request: Any) -> dict[str, Any]:
    return {
        "provider": {"secretRef": {"name": "k"}, **provider},
        "input": {"url": "in.jsonl"},
        "output": {"url": "out/"},
        "request": request,
    }


@pytest.mark.parametrize("kind", ["anthropic", "mistral"])
def test_providers_without_embeddings_are_refused_with_the_reason(kind: str) -> None:
    with pytest.raises(ValidationError, match=f"spec.request.endpoint embeddings is not offered by {kind}"):
        LLMBatchJobSpec.model_validate(spec({"type": kind, "model": "m"}, endpoint="embeddings"))


@pytest.mark.parametrize(
    ("request_fields", "reason"),
    [
        ({"dimensions": 8}, "need spec.request.endpoint embeddings"),
        ({"endpoint": "embeddings", "mode": "passthrough"}, "mode passthrough sends chat bodies"),
        (
            {"endpoint": "embeddings", "responseFormat": {"name": "x", "schema": {"type": "object"}}},
            "an embeddings job has none",
        ),
        ({"endpoint": "embeddings", "params": {"input": "x"}}, "may not set input"),
        ({"endpoint": "embeddings", "encodingFormat": "int8"}, "encodingFormat"),
    ],
)
def test_embeddings_fields_are_checked(request_fields: dict[str, Any], reason: str) -> None:
    with pytest.raises(ValidationError, match=reason):
        LLMBatchJobSpec.model_validate(spec({"type": "openai", "model": "m"}, **request_fields))


def test_openai_azure_and_pool_jobs_are_admitted() -> None:
    for provider in ({"type": "openai", "model": "m"}, {"type": "azure-openai", "model": "d"}):
        parsed = LLMBatchJobSpec.model_validate(spec(provider, endpoint="embeddings", dimensions=256))
        assert parsed.request.endpoint == "embeddings"
    pool = {"type": "pool", "poolRef": {"name": "bge"}}
    assert LLMBatchJobSpec.model_validate(spec(pool, endpoint="embeddings")).request.dimensions is None
    assert LLMBatchJobSpec.model_validate(spec(pool)).request.endpoint == "chat"  # the default


def test_a_request_line_is_the_rendered_input_at_the_embeddings_url() -> None:
    parsed = LLMBatchJobSpec.model_validate(
        spec(
            {"type": "openai", "model": "text-embedding-3-small"},
            endpoint="embeddings",
            system="ignored",
            dimensions=64,
            encodingFormat="base64",
            params={"user": "team-a"},
        )
    )
    factory = RequestFactory("text-embedding-3-small", parsed.request)
    line = orjson.loads(factory.line_encoder(encoder("openai"))("c-1", "hello"))
    assert line == {
        "custom_id": "c-1",
        "method": "POST",
        "url": "/v1/embeddings",
        "body": {
            "user": "team-a",
            "model": "text-embedding-3-small",
            "input": "hello",
            "dimensions": 64,
            "encoding_format": "base64",
        },
    }
    assert orjson.loads(encoder("azure-openai")(factory("c-2", "x")))["url"] == "/embeddings"
    assert factory.estimate("12345678") == 2  # the input alone: no system prompt is sent
    chat = orjson.loads(openai_encoder("/v1/chat/completions")(Request("c", "m", "hi", 5)))
    assert chat["url"] == "/v1/chat/completions"


def answer_line(body: dict[str, Any], status: int = 200) -> dict[str, Any]:
    return {"custom_id": "c-1", "response": {"status_code": status, "body": body}, "error": None}


def test_an_answer_line_keeps_the_vector_and_the_input_tokens() -> None:
    vec = vector("hello", 4)
    body = {"object": "list", "data": [{"embedding": vec, "index": 0}], "usage": {"prompt_tokens": 7}}
    cid, outcome, text, tin, tout, *_ = parse_line(answer_line(body))
    assert (cid, outcome, tin, tout) == ("c-1", Outcome.SUCCEEDED, 7, 0)
    assert unpack(text) == ("", {"embedding": vec})
    b64 = {"object": "list", "data": [{"embedding": "AAAAAA=="}], "usage": {"prompt_tokens": 1}}
    assert unpack(result_from_line(answer_line(b64)).text)[1] == {"embedding": "AAAAAA=="}


@pytest.mark.parametrize(
    "data", [[], [{"embedding": []}], [{"embedding": ["x"]}], [{"embedding": None}], "nope", [{"embedding": [True]}]]
)
def test_an_answer_without_a_vector_is_transient_with_a_reason(data: Any) -> None:
    result = result_from_line(answer_line({"object": "list", "data": data, "usage": {"prompt_tokens": 1}}))
    assert result.outcome is Outcome.TRANSIENT
    assert result.error_type == "no_embedding"


def test_embedding_models_are_priced_per_input_token_at_half_in_batch() -> None:
    table = prices.load()
    usage = Usage(input_tokens=1_000_000)
    assert table.cost("text-embedding-3-small", usage, batch=False) == Decimal("0.02")
    assert table.cost("text-embedding-3-small", usage, batch=True) == Decimal("0.01")
    assert table.cost("text-embedding-3-large-batch", usage, batch=True) == Decimal("0.065")  # Azure deployment
    assert table.cost("text-embedding-3-small", Usage(output_tokens=10**6), batch=False) == 0


def test_a_line_that_reaches_an_encoder_without_embeddings_is_invalid_with_the_reason() -> None:
    """A pool whose provider is Anthropic passes the spec check (the pool's provider is known only in the cluster):
    admission makes each line invalid, naming why, and nothing is sent."""
    parsed = LLMBatchJobSpec.model_validate(spec({"type": "pool", "poolRef": {"name": "p"}}, endpoint="embeddings"))
    factory = RequestFactory("claude-haiku-4-5", parsed.request)
    encode = encoder("anthropic")
    renderer = Renderer(parsed, "2026-12-01", "t")
    row = admit_line(1, b'{"id": "a", "text": "x"}', renderer, factory, encode, set(), encode_line=None)
    assert row["state"] == "invalid"
    assert row["error_type"] == "unconvertible"
    assert row["reason"] == "Anthropic has no embeddings endpoint (spec.request.endpoint embeddings)"
    compiled = factory.line_encoder(encode)  # compiling the job's encoder does not raise: each line does
    with pytest.raises(ValueError, match="no embeddings endpoint"):
        compiled("c", "x")


def test_openai_shards_hold_at_most_50000_embedding_inputs() -> None:
    """One input per request: OpenAI's 50,000 requests per batch are its 50,000 embedding inputs per batch."""
    import openai

    from barge.batch.plan import spans
    from barge.providers.encoding import MAX_EMBEDDING_INPUTS
    from barge.providers.openai_provider import OpenAIProvider

    p = OpenAIProvider(openai.AsyncOpenAI(api_key="k", base_url="http://127.0.0.1:1/v1"))
    assert p.max_requests == MAX_EMBEDDING_INPUTS == 50_000
    shards = list(spans(((n, 60, 0, 3) for n in range(1, 120_002)), p.max_requests, p.max_bytes))
    assert [s.count for s in shards] == [50_000, 50_000, 20_001]
