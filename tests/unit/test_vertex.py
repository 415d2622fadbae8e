"""type vertex's pure parts: the Secret, the lines it sends (the Gemini custom id in labels, Claude's custom_id and
anthropic_version), and the output lines it reads back (providers/vertex_settings.py, vertex_provider.py)."""

from __future__ import annotations

import json
import random
import re
import string
from typing import Any

import pytest

from barge.providers import Outcome, Request
from barge.providers.vertex_provider import (
    ANTHROPIC_VERSION,
    _stripped,
    batch_model,
    encode_vertex,
    id_from_labels,
    id_labels,
    parse_line,
)
from barge.providers.vertex_settings import VertexSettings

LABEL_VALUE = re.compile(r"^[a-z0-9_-]{0,63}$")


ALPHABET = string.ascii_letters + string.digits + "_-"
IDS = [
    "a",
    "A",
    "_",
    "__A_b",
    "Z" * 64,
    "_" * 64,
    "claims-2026-12-01-c17",
    *("".join(random.Random(n).choices(ALPHABET, k=random.Random(-n).randint(1, 64))) for n in range(200)),
]


@pytest.mark.parametrize("custom_id", IDS)
def test_every_custom_id_survives_the_labels_and_each_value_is_a_valid_label(custom_id: str) -> None:
    labels = id_labels(custom_id)
    assert all(LABEL_VALUE.match(v) for v in labels.values()), labels
    assert all(re.match(r"^[a-z][a-z0-9_-]{0,62}$", k) for k in labels)
    assert id_from_labels(labels) == custom_id


def test_a_gemini_line_carries_its_id_in_labels_and_its_model_is_stripped_before_upload() -> None:
    line = encode_vertex(Request("Claim_A-7", "gemini-2.5-flash", "hello", 32, system="Be brief."))
    (record, model), *_ = list(_stripped([line]))
    assert model == "gemini-2.5-flash"
    sent = json.loads(record)
    assert set(sent) == {"request"}
    assert "model" not in sent["request"]
    assert id_from_labels(sent["request"]["labels"]) == "Claim_A-7"
    assert sent["request"]["contents"][0]["parts"][0]["text"] == "hello"
    assert sent["request"]["generationConfig"]["maxOutputTokens"] == 32
    assert batch_model("gemini-2.5-flash") == "gemini-2.5-flash"


def test_a_claude_line_is_anthropic_params_with_the_vertex_version_and_no_model() -> None:
    line = encode_vertex(Request("c1", "claude-haiku-4-5@20251001", "hello", 32, system="Be brief."))
    (record, model), *_ = list(_stripped([line]))
    sent = json.loads(record)
    assert sent["custom_id"] == "c1"
    assert sent["request"]["anthropic_version"] == ANTHROPIC_VERSION
    assert "model" not in sent["request"]
    assert sent["request"]["messages"] == [{"role": "user", "content": "hello"}]
    assert batch_model(model) == "publishers/anthropic/models/claude-haiku-4-5@20251001"


def gemini_out(custom_id: str, **line: Any) -> dict[str, Any]:
    return {"request": {"contents": [], "labels": id_labels(custom_id)}, "processed_time": "x", **line}


def test_output_lines_of_both_families_are_read() -> None:
    response = {
        "candidates": [{"content": {"parts": [{"text": "ok"}]}, "finishReason": "STOP"}],
        "usageMetadata": {"promptTokenCount": 7, "candidatesTokenCount": 3},
    }
    got = parse_line(gemini_out("Id_1", status="", response=response))
    assert got[:5] == ("Id_1", Outcome.SUCCEEDED, "ok", 7, 3)
    message = {
        "content": [{"type": "text", "text": "hi"}],
        "stop_reason": "end_turn",
        "usage": {"input_tokens": 5, "output_tokens": 2},
    }
    got = parse_line({"custom_id": "c2", "request": {}, "response": message, "status": ""})
    assert got[:5] == ("c2", Outcome.SUCCEEDED, "hi", 5, 2)
    failed = parse_line({"custom_id": "c3", "request": {}, "status": "Internal error occurred"})
    assert failed[0] == "c3"
    assert failed[1] in (Outcome.TRANSIENT, Outcome.INVALID)
    assert failed[8] == "Internal error occurred"
    with pytest.raises(ValueError, match="barge_id"):  # a line Barge did not write: skipped by jsonl.parsed
        parse_line({"request": {"labels": {"other": "x"}}, "response": response, "status": ""})


@pytest.mark.parametrize(
    ("secret", "problem"),
    [
        ("not json", "not a JSON object"),
        (json.dumps({"gcsPrefix": "gs://b/p/"}), "lacks serviceAccount"),
        (json.dumps({"serviceAccount": {"client_email": "a@b"}, "gcsPrefix": "gs://b/"}), "lacks private_key"),
        (json.dumps({"serviceAccount": {"client_email": "a", "private_key": "k"}, "gcsPrefix": "gs://b/"}), "project"),
        (
            json.dumps({"serviceAccount": {"client_email": "a", "private_key": "k", "project_id": "my-proj-1"}}),
            "lacks gcsPrefix",
        ),
    ],
)
def test_a_secret_that_is_not_vertex_s_names_what_is_missing(secret: str, problem: str) -> None:
    assert problem in VertexSettings.from_secret(secret).problem


def test_a_good_secret_has_google_s_defaults() -> None:
    account = {"client_email": "a@p.iam.gserviceaccount.com", "private_key": "k", "project_id": "my-proj-1"}
    s = VertexSettings.from_secret(json.dumps({"serviceAccount": account, "gcsPrefix": "gs://team-a/vertex"}))
    assert s.problem == ""
    assert (s.project, s.location, s.gcs_prefix, s.bucket) == (
        "my-proj-1",
        "us-central1",
        "gs://team-a/vertex/",
        "team-a",
    )
    assert s.endpoints() == ["https://oauth2.googleapis.com/token", "https://storage.googleapis.com"]
