"""Deleting at the provider, with the real SDKs against the emulator: what Barge's cleanup relies on.

OpenAI and Azure: files are deleted one by one, a deleted file answers 404 for metadata and content (also after its
batch is read again), deleting twice is a 404; output_expires_after is checked for its shape and range (OpenAI
1 hour..30 days, Azure 14..30 days). Anthropic: a batch still processing cannot be deleted; an ended one can, and
then answers 404 everywhere and leaves the listing. The adapters' delete_objects is idempotent on top of that.
"""

from __future__ import annotations

import anthropic
import openai
import pytest

from barge.emulator.server import EmulatorThread
from barge.providers import make_provider
from barge.providers.base import Request
from tests.conftest import Factory, state, wait_until
from tests.contract.test_openai_sdk import azure, finished, line, oai, submit

DAY = 86400


def test_openai_deleted_files_404_and_stay_deleted(emulator: EmulatorThread) -> None:
    c = oai(emulator)
    batch = finished(c, submit(c, [line(f"r{n}", f"text {n}") for n in range(5)]).id)
    assert batch.output_file_id
    for file_id in (batch.input_file_id, batch.output_file_id):
        assert c.files.delete(file_id).deleted is True
        with pytest.raises(openai.NotFoundError):
            c.files.retrieve(file_id)
        with pytest.raises(openai.NotFoundError):
            c.files.delete(file_id)
    again = c.batches.retrieve(batch.id)  # the batch keeps naming its files, which stay gone
    assert again.output_file_id == batch.output_file_id
    with pytest.raises(openai.NotFoundError):
        c.files.content(batch.output_file_id)
    assert not [f for f in state(emulator)["files"] if f["batch"] == batch.id]


@pytest.mark.parametrize(
    ("seconds", "ok"), [(3600, True), (14 * DAY, True), (30 * DAY, True), (60, False), (31 * DAY, False)]
)
def test_openai_output_expires_after_range(emulator: EmulatorThread, seconds: int, ok: bool) -> None:
    c = oai(emulator)
    expiry: openai.types.batch_create_params.OutputExpiresAfter = {"anchor": "created_at", "seconds": seconds}
    if ok:
        batch = submit(c, [line("r0", "hello")], output_expires_after=expiry)
        assert state(emulator)["batches"][-1]["output_expires_after"] == dict(expiry)
        assert batch.id
    else:
        with pytest.raises(openai.BadRequestError, match="output_expires_after"):
            submit(c, [line("r0", "hello")], output_expires_after=expiry)


def test_azure_output_expiry_starts_at_14_days(emulator: EmulatorThread) -> None:
    c = azure(emulator)
    rows = [line("r0", "hello", model="gpt-4o-mini-batch")]
    with pytest.raises(openai.BadRequestError, match="1209600"):
        submit(c, rows, output_expires_after={"anchor": "created_at", "seconds": 3600})
    assert submit(c, rows, output_expires_after={"anchor": "created_at", "seconds": 14 * DAY}).id


def test_anthropic_delete_refused_while_processing_then_gone(start_emulator: Factory) -> None:
    emu = start_emulator({"batch": {"processingSeconds": 1.5}})
    c = anthropic.Anthropic(api_key="k", base_url=emu.url, max_retries=0)
    batch = c.messages.batches.create(
        requests=[
            {
                "custom_id": "a",
                "params": {"model": "m", "max_tokens": 10, "messages": [{"role": "user", "content": "x"}]},
            }
        ]
    )
    with pytest.raises(anthropic.BadRequestError, match="finished processing"):
        c.messages.batches.delete(batch.id)
    wait_until(lambda: c.messages.batches.retrieve(batch.id).processing_status == "ended", timeout=10)
    assert c.messages.batches.delete(batch.id).id == batch.id
    with pytest.raises(anthropic.NotFoundError):
        c.messages.batches.retrieve(batch.id)
    with pytest.raises(anthropic.NotFoundError):
        c.messages.batches.results(batch.id)
    with pytest.raises(anthropic.NotFoundError):
        c.messages.batches.delete(batch.id)
    assert batch.id not in [b.id for b in c.messages.batches.list()]


@pytest.mark.parametrize(("kind", "objects"), [("openai", 2), ("azure-openai", 3), ("anthropic", 1)])
async def test_adapter_delete_objects_is_idempotent(emulator: EmulatorThread, kind: str, objects: int) -> None:
    """openai: input + output (no error file when nothing failed); Azure: its empty error file too."""
    url = f"{emulator.url}/v1" if kind == "openai" else emulator.url
    provider = make_provider(kind, "k", base_url=url, sync_retries=0)
    model = "gpt-4o-mini-batch" if kind == "azure-openai" else "m-1"
    lines = [provider.encode(Request(f"r{n}", model, f"text {n}", 10)) for n in range(3)]
    info = await provider.create_batch(lines, {"barge_job": "t"} if kind != "anthropic" else {})
    wait_until(lambda: state(emulator)["batches"][-1]["status"] in ("ended", "completed"), timeout=10)
    assert [r async for r in provider.results(info.id)]  # readable before deletion
    assert await provider.delete_objects(info.id) == objects
    assert await provider.delete_objects(info.id) == 0
    left = state(emulator)
    assert not [f for f in left["files"] if f["batch"] == info.id]
    if kind == "anthropic":
        assert next(b for b in left["batches"] if b["id"] == info.id)["archived"]
    await provider.close()
