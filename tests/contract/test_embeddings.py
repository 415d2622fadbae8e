"""Embeddings through the real `openai` SDK against the emulator: sync (OpenAI, Azure, vLLM) and batch lines.

The emulator's vectors are a pure function of (model, text, dimensions) (emulator/embeddings.py), so every vector
read back is checked against that function, not only its length.
"""

from __future__ import annotations

import asyncio
import math

import openai
import pytest

from barge.emulator.embeddings import from_base64, vector
from barge.emulator.profile import parse_profile
from barge.emulator.server import EmulatorThread
from barge.providers import BatchProvider, Outcome, Request, make_provider
from barge.providers.chat_convert import Unconvertible
from barge.providers.content import unpack
from barge.providers.encoding import encode_anthropic, encode_mistral
from tests.conftest import Factory
from tests.contract.test_adapters import provider, run_batch
from tests.contract.test_openai_sdk import azure, finished, oai, read_lines, submit

MODEL = "text-embedding-3-small"


def close(a: list[float], b: list[float], tol: float = 1e-6) -> bool:
    return len(a) == len(b) and all(math.isclose(x, y, abs_tol=tol) for x, y in zip(a, b, strict=True))


def test_embeddings_create_float_base64_and_dimensions(emulator: EmulatorThread) -> None:
    c = oai(emulator)
    plain = c.embeddings.create(model=MODEL, input="the cat sat", encoding_format="float")
    assert plain.data[0].embedding == vector("the cat sat", 1536, MODEL)
    assert plain.usage.prompt_tokens == 3  # 11 characters: the emulator's 4 characters a token
    assert math.isclose(sum(v * v for v in plain.data[0].embedding), 1.0)
    # The SDK asks for base64 by default and decodes the float32 bytes itself.
    short = c.embeddings.create(model=MODEL, input=["a", "b"], dimensions=8)
    assert [d.index for d in short.data] == [0, 1]
    for text, item in zip(["a", "b"], short.data, strict=True):
        assert close(item.embedding, vector(text, 8, MODEL))
    assert short.data[0].embedding != short.data[1].embedding
    with pytest.raises(openai.BadRequestError, match="dimensions"):
        c.embeddings.create(model=MODEL, input="x", dimensions=0)


def test_azure_embeddings_on_its_deployment_path(emulator: EmulatorThread) -> None:
    got = azure(emulator).embeddings.create(model="emb-deployment", input="hello", encoding_format="float")
    assert got.data[0].embedding == vector("hello", 1536, "emb-deployment")


def _embedding_line(custom_id: str, text: str, url: str = "/v1/embeddings", **body: object) -> dict[str, object]:
    return {"custom_id": custom_id, "method": "POST", "url": url, "body": {"model": MODEL, "input": text, **body}}


def test_a_batch_of_embeddings_lines(emulator: EmulatorThread) -> None:
    c = oai(emulator)
    lines = [_embedding_line(f"e-{n}", f"doc {n}", dimensions=16) for n in range(20)]
    batch = finished(c, submit(c, lines, endpoint="/v1/embeddings").id)
    assert batch.status == "completed"
    assert batch.endpoint == "/v1/embeddings"
    out = {x["custom_id"]: x["response"]["body"] for x in read_lines(c, batch.output_file_id)}
    assert len(out) == 20
    for n in range(20):
        assert out[f"e-{n}"]["data"][0]["embedding"] == vector(f"doc {n}", 16, MODEL)
        assert out[f"e-{n}"]["usage"]["prompt_tokens"] >= 1
    # a chat line in an embeddings batch fails the batch's validation, as OpenAI's does
    mixed = [_embedding_line("ok", "x"), _embedding_line("chat", "y", url="/v1/chat/completions")]
    refused = finished(c, submit(c, mixed, endpoint="/v1/embeddings").id)
    assert refused.status == "failed"
    assert refused.errors is not None
    assert refused.errors.data[0].code == "url_mismatch"


@pytest.mark.parametrize("kind", ["openai", "azure-openai"])
async def test_the_adapter_sends_embeddings_batches_and_sync_calls(start_emulator: Factory, kind: str) -> None:
    emu = start_emulator()
    p = provider(kind, emu.url)
    model = MODEL if kind == "openai" else "emb-batch"
    reqs = [Request(f"id-{i}", model, f"text {i}", 1, endpoint="embeddings", dimensions=12) for i in range(10)]
    reqs.append(Request("id-b64", model, "packed", 1, endpoint="embeddings", dimensions=4, encoding_format="base64"))
    try:
        results = {r.custom_id: r for r in await run_batch(p, reqs)}
        sync = await p.complete(reqs[0])
    finally:
        await p.close()
    url = "/v1/embeddings" if kind == "openai" else "/embeddings"
    assert {b.endpoint for b in emu.store.batches.values()} == {url}  # the batch's endpoint is its lines' URL
    for i in range(10):
        r = results[f"id-{i}"]
        assert r.outcome is Outcome.SUCCEEDED
        text, kept = unpack(r.text)
        assert text == ""
        assert kept["embedding"] == vector(f"text {i}", 12, model)
        assert r.usage.input_tokens >= 1
        assert r.usage.output_tokens == 0
    assert close(from_base64(unpack(results["id-b64"].text)[1]["embedding"]), vector("packed", 4, model))
    assert sync.outcome is Outcome.SUCCEEDED
    assert unpack(sync.text)[1]["embedding"] == vector("text 0", 12, model)


def test_vllm_serves_embeddings_to_an_engine_pool_client(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("VLLM_API_KEY", raising=False)

    async def call() -> object:
        with EmulatorThread(parse_profile({"sync": {"latencyMs": 1}}), vllm_model="bge-m3") as emu:
            p: BatchProvider = make_provider("openai", "k", base_url=f"{emu.url}/v1", sync_retries=0)
            try:
                return await p.complete(Request("v-1", "bge-m3", "pool text", 1, endpoint="embeddings"))
            finally:
                await p.close()

    result = asyncio.run(call())
    assert getattr(result, "outcome", None) is Outcome.SUCCEEDED
    assert unpack(getattr(result, "text", ""))[1]["embedding"] == vector("pool text", 1536, "bge-m3")


def test_anthropic_and_mistral_encoders_refuse_an_embeddings_request() -> None:
    request = Request("x", "m", "text", 1, endpoint="embeddings")
    with pytest.raises(Unconvertible, match="Anthropic has no embeddings endpoint"):
        encode_anthropic(request)
    with pytest.raises(Unconvertible, match="Mistral has no embeddings endpoint"):
        encode_mistral(request)
