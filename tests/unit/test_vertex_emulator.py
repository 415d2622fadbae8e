"""The emulator's Vertex AI (operator/barge/emulator/vertex_api.py) with the real SDKs: google-auth's service-account
grant against its token endpoint, google-genai (vertexai=True) batch jobs over a real GCS JSON API server
(gcp-storage-emulator, in this process on a free loopback port), and anthropic's AnthropicVertex."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import anthropic
import pytest
from google import genai
from google.auth import exceptions as auth_exceptions
from google.auth.transport.requests import Request as AuthRequest
from google.genai import errors, types
from google.oauth2 import service_account

from barge.emulator import vertex_api
from barge.emulator.server import EmulatorThread
from tests.conftest import Factory, free_port, wait_until

BUCKET = "barge-vertex"
PROJECT = "barge-test"
LOCATION = "us-central1"
GEMINI = "gemini-2.5-flash"
CLAUDE = "publishers/anthropic/models/claude-sonnet-4-5@20250929"
SCOPES = ["https://www.googleapis.com/auth/cloud-platform"]


@pytest.fixture(scope="module")
def private_key() -> str:
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa

    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    return pem.decode()


@pytest.fixture(scope="module")
def gcs_server() -> Iterator[str]:
    from gcp_storage_emulator.server import create_server  # type: ignore[import-untyped]

    port = free_port()
    server = create_server("127.0.0.1", port, in_memory=True, default_bucket=BUCKET)
    server.start()
    yield f"http://127.0.0.1:{port}"
    server.stop()


@pytest.fixture
def gcs(gcs_server: str, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv(vertex_api.GCS_ENV, gcs_server)
    return gcs_server


def credentials(emu: EmulatorThread, key: str, email: str = "barge-batch") -> service_account.Credentials:
    info = {
        "type": "service_account",
        "project_id": PROJECT,
        "private_key_id": "k1",
        "private_key": key,
        "client_email": f"{email}@{PROJECT}.iam.gserviceaccount.com",
        "client_id": "1",
        "token_uri": f"{emu.url}/vertex/token",
    }
    return service_account.Credentials.from_service_account_info(info, scopes=SCOPES)  # type: ignore[no-any-return,no-untyped-call]


def client(emu: EmulatorThread, key: str, project: str = PROJECT) -> genai.Client:
    return genai.Client(
        vertexai=True,
        project=project,
        location=LOCATION,
        credentials=credentials(emu, key),
        http_options=types.HttpOptions(base_url=f"{emu.url}/vertex/"),
    )


def seed(name: str, lines: list[dict[str, Any]]) -> str:
    uri = f"gs://{BUCKET}/{name}"
    vertex_api.gcs_write(uri, b"".join(json.dumps(line).encode() + b"\n" for line in lines))
    return uri


def create(c: genai.Client, model: str, src: str, dest: str, name: str = "barge job") -> types.BatchJob:
    return c.batches.create(model=model, src=src, config=types.CreateBatchJobConfig(display_name=name, dest=dest))


def ended(c: genai.Client, job: types.BatchJob) -> types.BatchJob:
    assert job.name is not None
    done: types.BatchJob = wait_until(lambda: (j := c.batches.get(name=str(job.name))).done and j, 20)
    return done


def predictions(job: types.BatchJob) -> list[dict[str, Any]]:
    assert job.output_info is not None
    assert job.output_info.gcs_output_directory is not None
    data = vertex_api.gcs_read(job.output_info.gcs_output_directory + "/predictions.jsonl")
    return [json.loads(line) for line in data.splitlines()]


def http(url: str, token: str | None = None) -> tuple[int, dict[str, Any]]:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=10) as resp:  # noqa: S310
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def gemini_line(text: str, label: str) -> dict[str, Any]:
    contents = [{"role": "user", "parts": [{"text": text}]}]
    return {"request": {"contents": contents, "generationConfig": {"maxOutputTokens": 64}, "labels": {"id": label}}}


def claude_line(custom_id: str, text: str, **extra: Any) -> dict[str, Any]:
    request = {
        "anthropic_version": "vertex-2023-10-16",
        "max_tokens": 64,
        "messages": [{"role": "user", "content": text}],
    }
    return {"custom_id": custom_id, "request": request | extra}


def test_a_token_is_issued_to_the_service_account_and_calls_without_one_are_401(
    start_emulator: Factory, private_key: str
) -> None:
    emu = start_emulator()
    creds = credentials(emu, private_key)
    creds.refresh(AuthRequest())  # type: ignore[no-untyped-call]
    assert str(creds.token).startswith("ya29.barge-")
    jobs = f"{emu.url}/vertex/v1beta1/projects/{PROJECT}/locations/{LOCATION}/batchPredictionJobs"
    for token in (None, "ya29.never-issued"):
        status, body = http(jobs, token)
        assert status == 401
        assert body["error"]["status"] == "UNAUTHENTICATED"
    assert http(jobs, str(creds.token)) == (200, {"batchPredictionJobs": []})
    refused = credentials(emu, private_key, email="invalid-key")
    with pytest.raises(auth_exceptions.RefreshError, match="invalid_grant"):
        refused.refresh(AuthRequest())  # type: ignore[no-untyped-call]


def test_a_gemini_batch_from_gcs_echoes_each_request_with_its_labels(
    start_emulator: Factory, private_key: str, gcs: str
) -> None:
    emu = start_emulator()
    c = client(emu, private_key)
    src = seed("g/in.jsonl", [gemini_line(f"hello {i}", f"id{i}") for i in range(3)])
    job = create(c, GEMINI, src, f"gs://{BUCKET}/g/out/")
    assert job.state == types.JobState.JOB_STATE_PENDING
    assert job.model == f"publishers/google/models/{GEMINI}"
    assert str(job.name).startswith(f"projects/{PROJECT}/locations/{LOCATION}/batchPredictionJobs/")
    done = ended(c, job)
    assert done.state == types.JobState.JOB_STATE_SUCCEEDED
    assert done.dest is not None
    assert done.dest.gcs_uri == f"gs://{BUCKET}/g/out/"  # the SDK's dest is the prefix asked for ...
    assert done.output_info is not None  # ... and the directory written under it is outputInfo's
    assert str(done.output_info.gcs_output_directory).startswith(f"gs://{BUCKET}/g/out/prediction-model-")
    assert done.completion_stats is not None
    assert (done.completion_stats.successful_count, done.completion_stats.failed_count) == (3, 0)
    lines = predictions(done)
    by_label = {line["request"]["labels"]["id"]: line for line in lines}
    assert sorted(by_label) == ["id0", "id1", "id2"]
    for i in range(3):
        line = by_label[f"id{i}"]
        assert line["status"] == ""
        assert line["request"] == gemini_line(f"hello {i}", f"id{i}")["request"]
        assert line["processed_time"].endswith("+00:00")
        response = types.GenerateContentResponse.model_validate(line["response"])
        assert response.text == f"Emulated reply: hello {i}"
        assert response.usage_metadata is not None
        assert response.usage_metadata.prompt_token_count == 2
        assert response.usage_metadata.total_token_count == 2 + (response.usage_metadata.candidates_token_count or 0)


def test_the_profiles_server_errors_become_error_lines(start_emulator: Factory, private_key: str, gcs: str) -> None:
    emu = start_emulator({"batch": {"outcomes": {"server_error": 1.0}}})
    c = client(emu, private_key)
    done = ended(c, create(c, GEMINI, seed("e/in.jsonl", [gemini_line("x", "only")]), f"gs://{BUCKET}/e/out/"))
    assert done.state == types.JobState.JOB_STATE_SUCCEEDED
    [line] = predictions(done)
    assert "response" not in line
    assert line["status"].startswith("Internal Server Error: ")
    assert line["request"]["labels"] == {"id": "only"}


def test_a_claude_batch_answers_messages_by_custom_id_and_a_bad_line_is_an_error_line(
    start_emulator: Factory, private_key: str, gcs: str
) -> None:
    emu = start_emulator()
    c = client(emu, private_key)
    lines = [
        claude_line("c-1", "first"),
        claude_line("c-2", "second"),
        claude_line("old", "x", anthropic_version="bedrock-2023-05-31"),
        claude_line("named", "x", model="claude-sonnet-4-5"),
    ]
    done = ended(c, create(c, CLAUDE, seed("c/in.jsonl", lines), f"gs://{BUCKET}/c/out/"))
    assert done.state == types.JobState.JOB_STATE_SUCCEEDED
    assert done.completion_stats is not None
    assert (done.completion_stats.successful_count, done.completion_stats.failed_count) == (2, 2)
    out = {line["custom_id"]: line for line in predictions(done)}
    assert sorted(out) == ["c-1", "c-2", "named", "old"]
    for custom_id, text in (("c-1", "first"), ("c-2", "second")):
        assert out[custom_id]["status"] == ""
        assert out[custom_id]["request"] == claude_line(custom_id, text)["request"]
        message = anthropic.types.Message.model_validate(out[custom_id]["response"])
        assert message.content[0].type == "text"
        assert message.content[0].text == f"Emulated reply: {text}"
        assert message.usage.input_tokens > 0
        assert message.usage.output_tokens > 0
    assert "response" not in out["old"]
    assert "anthropic_version" in out["old"]["status"]
    assert "model" in out["named"]["status"]


def test_the_fifth_live_claude_job_of_a_project_is_429_and_cancel_frees_a_place(
    start_emulator: Factory, private_key: str, gcs: str
) -> None:
    emu = start_emulator({"batch": {"processingSeconds": 60, "cancelSeconds": 0.5}})
    c = client(emu, private_key)
    src = seed("q/in.jsonl", [claude_line("a", "x")])
    jobs = [create(c, CLAUDE, src, f"gs://{BUCKET}/q/out/") for _ in range(4)]
    with pytest.raises(errors.ClientError) as refused:
        create(c, CLAUDE, src, f"gs://{BUCKET}/q/out/")
    assert refused.value.code == 429
    assert refused.value.status == "RESOURCE_EXHAUSTED"
    assert "4 batch prediction jobs of Anthropic models" in str(refused.value.message)
    gemini = create(c, GEMINI, seed("q/g.jsonl", [gemini_line("x", "g")]), f"gs://{BUCKET}/q/out/")
    assert gemini.state == types.JobState.JOB_STATE_PENDING  # Gemini jobs have no such cap
    elsewhere = client(emu, private_key, project="another")
    other = create(elsewhere, CLAUDE, src, f"gs://{BUCKET}/q/out/")
    assert other.state == types.JobState.JOB_STATE_PENDING  # the cap is per project
    c.batches.cancel(name=str(jobs[0].name))
    assert c.batches.get(name=str(jobs[0].name)).state == types.JobState.JOB_STATE_CANCELLING
    assert ended(c, jobs[0]).state == types.JobState.JOB_STATE_CANCELLED
    assert create(c, CLAUDE, src, f"gs://{BUCKET}/q/out/").state == types.JobState.JOB_STATE_PENDING


def test_cancel_ends_a_job_cancelled_and_an_ended_job_cannot_be_cancelled(
    start_emulator: Factory, private_key: str, gcs: str
) -> None:
    emu = start_emulator({"batch": {"processingSeconds": 60, "cancelSeconds": 0.05}})
    c = client(emu, private_key)
    job = create(c, GEMINI, seed("x/in.jsonl", [gemini_line("x", "x")]), f"gs://{BUCKET}/x/out/")
    c.batches.cancel(name=str(job.name).rsplit("/", 1)[-1])  # the bare numeric id works as the SDK says
    done = ended(c, job)
    assert done.state == types.JobState.JOB_STATE_CANCELLED
    assert done.completion_stats is not None
    assert done.completion_stats.incomplete_count == 1  # cancelled before it was done: not in the output ...
    assert done.output_info is None  # ... and with nothing done, no output at all
    with pytest.raises(errors.ClientError) as refused:
        c.batches.cancel(name=str(job.name))
    assert refused.value.status == "FAILED_PRECONDITION"


def test_list_is_newest_first_in_pages_and_delete_removes_an_ended_job(
    start_emulator: Factory, private_key: str, gcs: str
) -> None:
    emu = start_emulator({"batch": {"processingSeconds": 1.5}})
    c = client(emu, private_key)
    src = seed("l/in.jsonl", [gemini_line("x", "x")])
    jobs = [create(c, GEMINI, src, f"gs://{BUCKET}/l/out/", name=f"job {i}") for i in range(3)]
    listed = list(c.batches.list(config=types.ListBatchJobsConfig(page_size=2)))
    assert [j.name for j in listed] == [j.name for j in reversed(jobs)]
    assert [j.display_name for j in listed] == ["job 2", "job 1", "job 0"]
    with pytest.raises(errors.ClientError) as live:
        c.batches.delete(name=str(jobs[0].name))
    assert live.value.status == "FAILED_PRECONDITION"
    ended(c, jobs[0])
    deleted = c.batches.delete(name=str(jobs[0].name))
    assert deleted.done is True
    assert deleted.error is None
    with pytest.raises(errors.ClientError) as gone:
        c.batches.get(name=str(jobs[0].name))
    assert gone.value.code == 404
    assert [j.name for j in c.batches.list()] == [jobs[2].name, jobs[1].name]


def test_the_display_name_is_kept_as_given_up_to_128_characters(
    start_emulator: Factory, private_key: str, gcs: str
) -> None:
    emu = start_emulator()
    c = client(emu, private_key)
    src = seed("n/in.jsonl", [gemini_line("x", "x")])
    name = "Nächtliche Läufe: barge_job=abc / shard 7 " + "x" * 86
    assert len(name) == 128
    assert create(c, GEMINI, src, f"gs://{BUCKET}/n/out/", name=name).display_name == name
    with pytest.raises(errors.ClientError) as refused:
        create(c, GEMINI, src, f"gs://{BUCKET}/n/out/", name=name + "y")
    assert refused.value.code == 400
    assert refused.value.status == "INVALID_ARGUMENT"


def test_a_missing_input_fails_the_job_with_its_reason(start_emulator: Factory, private_key: str, gcs: str) -> None:
    emu = start_emulator()
    c = client(emu, private_key)
    done = ended(c, create(c, GEMINI, f"gs://{BUCKET}/nowhere.jsonl", f"gs://{BUCKET}/m/out/"))
    assert done.state == types.JobState.JOB_STATE_FAILED
    assert done.error is not None
    assert done.error.code == 3
    assert "nowhere.jsonl" in str(done.error.message)
    assert done.output_info is None


def test_the_synchronous_calls_answer_gemini_and_claude(start_emulator: Factory, private_key: str) -> None:
    emu = start_emulator()
    gemini = client(emu, private_key)  # held: a Client closes its connections when collected
    reply = gemini.models.generate_content(model=GEMINI, contents="hi there")
    assert reply.text == "Emulated reply: hi there"
    assert reply.usage_metadata is not None
    assert reply.usage_metadata.prompt_token_count == 2
    creds = credentials(emu, private_key)
    creds.refresh(AuthRequest())  # type: ignore[no-untyped-call]
    claude = anthropic.AnthropicVertex(
        region=LOCATION, project_id=PROJECT, access_token=str(creds.token), base_url=f"{emu.url}/vertex/v1"
    )
    message = claude.messages.create(
        model="claude-sonnet-4-5@20250929", max_tokens=64, messages=[{"role": "user", "content": "hey"}]
    )
    assert message.content[0].type == "text"
    assert message.content[0].text == "Emulated reply: hey"
    assert message.model == "claude-sonnet-4-5@20250929"
    assert message.usage.output_tokens > 0
    with pytest.raises(anthropic.BadRequestError, match="anthropic_version"):
        claude.messages.create(
            model="claude-sonnet-4-5@20250929",
            max_tokens=64,
            messages=[{"role": "user", "content": "hey"}],
            extra_body={"anthropic_version": "bedrock-2023-05-31"},
        )
    unauthorized = anthropic.AnthropicVertex(
        region=LOCATION, project_id=PROJECT, access_token="ya29.made-up", base_url=f"{emu.url}/vertex/v1"
    )
    with pytest.raises(anthropic.AuthenticationError):
        unauthorized.messages.create(model="claude-x", max_tokens=8, messages=[{"role": "user", "content": "x"}])
    for closing in (gemini, claude, unauthorized):
        closing.close()
