"""An embeddings job through `barge run` (operator-less) on OpenAI and Azure against the emulator: every vector in
results.jsonl is the emulator's deterministic one for its rendered input, usage is input tokens only, and the cost
is those tokens at the embedding model's batch price. An Anthropic or Mistral embeddings job is refused, naming why.
"""

from __future__ import annotations

import json
import math
from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
import yaml

from barge.batch import prices
from barge.emulator.core import estimate_tokens
from barge.emulator.embeddings import from_base64, vector
from barge.emulator.profile import load_profile
from barge.emulator.server import EmulatorThread
from tests.integration.test_cli_run import barge

COUNT = 40


def manifest(tmp_path: Path, provider: dict[str, Any], output_format: str = "jsonl", **request: Any) -> Path:
    lines = [json.dumps({"id": f"doc-{n}", "text": f"document number {n}"}) for n in range(COUNT)]
    (tmp_path / "docs.jsonl").write_text("\n".join(lines) + "\n")
    doc = {
        "apiVersion": "barge.dev/v1alpha1",
        "kind": "LLMBatchJob",
        "metadata": {"name": "embed-docs"},
        "spec": {
            "provider": {"secretRef": {"name": "k"}, **provider},
            "input": {"url": "docs.jsonl"},
            "output": {"url": "out/", "format": output_format},
            "request": {"endpoint": "embeddings", "template": "passage: {{ text }}", **request},
        },
    }
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def written(out: Path, output_format: str, encoding: str) -> list[dict[str, Any]]:
    """results.jsonl's lines with each vector as floats; or results.parquet's rows (read by pyarrow, a reader of
    its own) shaped as those lines."""
    if output_format == "jsonl":
        lines = [json.loads(x) for x in (out / "results.jsonl").read_text().splitlines()]
        for line in lines:
            line["embedding"] = line["embedding"] if encoding == "float" else from_base64(line["embedding"])
        return lines
    assert not (out / "results.jsonl").exists()
    table = pq.read_table(out / "results.parquet")
    assert str(table.schema.field("embedding").type) == "fixed_size_list<item: float not null>[24]"
    return [
        {**row, "usage": {"input_tokens": row["input_tokens"], "output_tokens": row["output_tokens"]}}
        for row in table.to_pylist()
    ]


@pytest.mark.parametrize(
    ("kind", "model", "encoding", "output_format"),
    [
        ("openai", "text-embedding-3-small", "float", "jsonl"),
        ("azure-openai", "text-embedding-3-small-batch", "base64", "jsonl"),
        ("openai", "text-embedding-3-small", "float", "parquet"),
        ("azure-openai", "text-embedding-3-small-batch", "base64", "parquet"),
    ],
)
def test_an_embeddings_job_writes_each_items_vector(
    tmp_path: Path, kind: str, model: str, encoding: str, output_format: str
) -> None:
    with EmulatorThread(load_profile(None)) as emu:
        url = f"{emu.url}/v1" if kind == "openai" else emu.url
        path = manifest(
            tmp_path,
            {"type": kind, "model": model, "baseURL": url},
            output_format,
            dimensions=24,
            encodingFormat=encoding,
        )
        out = barge("run", str(path), "--json", cwd=tmp_path)
        endpoints = [b.endpoint for b in emu.store.batches.values()]
    assert out.returncode == 0, out.stderr
    final = json.loads(out.stdout)
    assert final["phase"] == "Succeeded"
    assert final["counts"]["succeeded"] == COUNT
    assert endpoints == ["/v1/embeddings" if kind == "openai" else "/embeddings"]
    assert final["resultsURL"].endswith(f"/results.{output_format}")
    results = written(tmp_path / "out", output_format, encoding)
    assert [r["id"] for r in results] == [f"doc-{n}" for n in range(COUNT)]
    tokens = 0
    for n, r in enumerate(results):
        text = f"passage: document number {n}"
        want = vector(text, 24, model)
        got = r["embedding"]
        if encoding == "float" and output_format == "jsonl":
            assert got == want  # exactly: floats survive the JSON round trips
        else:
            assert len(got) == 24
            assert all(math.isclose(a, b, abs_tol=1e-6) for a, b in zip(got, want, strict=True))
        assert r["output"] == ""
        assert r["usage"]["input_tokens"] == estimate_tokens(text)
        assert r["usage"]["output_tokens"] == 0
        tokens += estimate_tokens(text)
    assert final["usage"]["inputTokens"] == tokens
    price = prices.load().price(model)
    assert price is not None
    expected = Decimal(tokens) * price.input / 1_000_000 * Decimal("0.5")  # the batch discount
    assert Decimal(final["usage"]["costUSD"]) == expected.quantize(Decimal(final["usage"]["costUSD"]))
    assert Decimal(final["usage"]["costUSD"]) > 0


@pytest.mark.parametrize(("kind", "model"), [("anthropic", "claude-haiku-4-5"), ("mistral", "mistral-embed")])
def test_an_embeddings_job_on_a_provider_without_them_is_refused(tmp_path: Path, kind: str, model: str) -> None:
    path = manifest(tmp_path, {"type": kind, "model": model, "baseURL": "http://127.0.0.1:1"})
    out = barge("run", str(path), "--json", cwd=tmp_path)
    assert out.returncode == 2
    said = " ".join(out.stderr.split())  # rich wraps the message at the terminal's width
    assert f"spec.request.endpoint embeddings is not offered by {kind}: its batch API has no embeddings" in said
    assert not (tmp_path / "out").exists()  # nothing sent, nothing written


def test_plan_of_an_embeddings_job_counts_no_output_tokens(tmp_path: Path) -> None:
    """A vector has no output tokens: `barge plan` bounds an embeddings job by its input alone (maxTokens, 1,024
    by default, counted 40,960 output tokens before)."""
    path = manifest(tmp_path, {"type": "openai", "model": "text-embedding-3-small", "baseURL": "http://127.0.0.1:1"})
    out = barge("plan", str(path))
    assert out.returncode == 0, out.stderr
    header = next(line.split() for line in out.stdout.splitlines() if "out tok" in line and "items" in line)
    row = next(line.split() for line in out.stdout.splitlines() if line.split()[:1] == [str(COUNT)])
    cells = dict(zip([h for h in " ".join(header).replace(" tok", "_tok").split()], row, strict=True))
    assert cells["out_tok"] == "0", out.stdout
    assert int(cells["in_tok"].replace(",", "")) == sum(
        estimate_tokens(f"passage: document number {n}") for n in range(COUNT)
    )
