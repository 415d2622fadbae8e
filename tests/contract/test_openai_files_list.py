"""`client.files.list(...)` of the real `openai` SDK against the emulator: purpose, limit, after, order, and the
SDK's own pagination (it follows `after` = the last id of each page while `has_more`)."""

from __future__ import annotations

import io

import openai
import pytest

from barge.emulator.server import EmulatorThread
from tests.contract.test_openai_sdk import finished, line, oai, submit


def _upload(c: openai.OpenAI, n: int) -> list[str]:
    return [c.files.create(file=(f"in-{i}.jsonl", io.BytesIO(b"{}\n")), purpose="batch").id for i in range(n)]


def test_files_list_pages_through_every_file_with_after_and_limit(emulator: EmulatorThread) -> None:
    c = oai(emulator)
    ids = _upload(c, 7)
    first = c.files.list(limit=3, order="asc")
    assert [f.id for f in first.data] == ids[:3]
    assert first.has_more is True
    second = c.files.list(limit=3, order="asc", after=ids[2])
    assert [f.id for f in second.data] == ids[3:6]
    # The SDK's auto-pagination: every file once, in order, in pages of 3.
    assert [f.id for f in c.files.list(limit=3, order="asc")] == ids
    last = c.files.list(limit=3, order="asc", after=ids[5])
    assert [f.id for f in last.data] == ids[6:]
    assert last.has_more is False


def test_files_list_is_newest_first_by_default(emulator: EmulatorThread) -> None:
    c = oai(emulator)
    ids = _upload(c, 4)
    assert [f.id for f in c.files.list()] == list(reversed(ids))
    assert [f.id for f in c.files.list(order="desc", limit=2, after=ids[2]).data] == [ids[1], ids[0]]


def test_files_list_filters_by_purpose(emulator: EmulatorThread) -> None:
    c = oai(emulator)
    batch = submit(c, [line("a", "hello"), line("b", "world")])
    done = finished(c, batch.id)
    assert done.status == "completed"
    assert done.output_file_id
    inputs = [f.id for f in c.files.list(purpose="batch")]
    outputs = [f.id for f in c.files.list(purpose="batch_output")]
    assert inputs == [batch.input_file_id]
    assert outputs == [done.output_file_id]
    assert {f.purpose for f in c.files.list()} == {"batch", "batch_output"}


def test_files_list_drops_deleted_files(emulator: EmulatorThread) -> None:
    c = oai(emulator)
    ids = _upload(c, 3)
    c.files.delete(ids[1])
    assert [f.id for f in c.files.list(order="asc")] == [ids[0], ids[2]]
    later = _upload(c, 1)  # a new id, never a deleted one's nor one still listed (it overwrote the last file before)
    assert later[0] not in ids
    assert [f.id for f in c.files.list(order="asc")] == [ids[0], ids[2], later[0]]


@pytest.mark.parametrize(
    ("query", "param"),
    [({"limit": 0}, "limit"), ({"limit": 10_001}, "limit"), ({"order": "sideways"}, "order")],
)
def test_files_list_refuses_bad_parameters_naming_them(
    emulator: EmulatorThread, query: dict[str, object], param: str
) -> None:
    c = oai(emulator)
    with pytest.raises(openai.BadRequestError) as caught:
        c.files.list(**query)  # type: ignore[arg-type]
    assert param in str(caught.value)


def test_files_list_refuses_an_unknown_cursor(emulator: EmulatorThread) -> None:
    c = oai(emulator)
    _upload(c, 1)
    with pytest.raises(openai.BadRequestError) as caught:
        c.files.list(after="file-nope")
    assert "file-nope" in str(caught.value)


def test_azure_lists_files_too(emulator: EmulatorThread) -> None:
    az = openai.AzureOpenAI(
        api_key="azure-key", azure_endpoint=emulator.url, api_version="2025-04-01-preview", max_retries=0
    )
    uploaded = az.files.create(file=("in.jsonl", io.BytesIO(b"{}\n")), purpose="batch").id
    assert [f.id for f in az.files.list()] == [uploaded]
