"""Batch input files: checked line by line as they stream in, stored in the tenant's storage, never whole in memory.

Where: `<the tenant's first storage prefix>/gateway/<namespace>/files/<file id>.jsonl`, with `<file id>.json`
beside it (name, size, time, and what the check found: the model alias, the endpoint, the largest max_tokens).
Every byte goes through barge.storage, so the policy's prefixes, link and address rules hold for the gateway as
for jobs. A file is checked on upload as OpenAI checks it (JSON per line, `custom_id` a unique string, `method`
POST, one `url`, one `body.model` alias per file): a bad one is refused with the line numbers and nothing stays
stored. Uploads past `max_bytes` or `max_lines` are refused (413) as soon as the limit is crossed.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import queue
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from typing import Any

import orjson

from barge.storage import StorageError, StoragePolicy, join, locate, read_lines, read_text, write_lines

FILE_PREFIX = "file-"
ENDPOINTS = ("/v1/chat/completions",)
MAX_ERRORS = 100
MAX_CUSTOM_ID = 512
_END = object()


class TooLarge(Exception):
    """The upload is past a configured limit (HTTP 413)."""


@dataclass
class Check:
    """What the upload check found so far; `errors` are (line, message) of the first MAX_ERRORS bad lines."""

    max_lines: int
    lines: int = 0
    errors: list[tuple[int, str]] = field(default_factory=list)
    seen: set[str] = field(default_factory=set)
    url: str | None = None
    model: str | None = None
    max_tokens: int = 0

    def bad(self, line: int, message: str) -> None:
        if len(self.errors) < MAX_ERRORS:
            self.errors.append((line, message))

    def line(self, raw: bytes) -> None:
        self.lines += 1
        number = self.lines
        if number > self.max_lines:
            raise TooLarge(f"more than {self.max_lines} lines (the gateway's limit per file)")
        if not raw.strip():
            return self.bad(number, "empty line")
        try:
            item = orjson.loads(raw)
        except orjson.JSONDecodeError as exc:
            return self.bad(number, f"not JSON: {exc}")
        if not isinstance(item, dict):
            return self.bad(number, "a line must be a JSON object")
        cid = item.get("custom_id")
        if not isinstance(cid, str) or not cid.strip() or len(cid) > MAX_CUSTOM_ID:
            return self.bad(number, f"custom_id must be a non-empty string of at most {MAX_CUSTOM_ID} characters")
        if cid in self.seen:
            return self.bad(number, f"custom_id {cid[:80]!r} is used by an earlier line")
        self.seen.add(cid)
        if item.get("method") != "POST":
            return self.bad(number, "method must be POST")
        url = item.get("url")
        if url not in ENDPOINTS:
            return self.bad(number, f"url must be one of {list(ENDPOINTS)}")
        if self.url is not None and url != self.url:
            return self.bad(number, f"url {url!r} differs from the first line's {self.url!r}: one url per file")
        self.url = url
        body = item.get("body")
        if not isinstance(body, dict):
            return self.bad(number, "body must be a JSON object")
        model = body.get("model")
        if not isinstance(model, str) or not model:
            return self.bad(number, "body.model must name a model alias")
        if self.model is not None and model != self.model:
            return self.bad(number, f"body.model {model!r} differs from the first line's {self.model!r}: one per file")
        self.model = model
        for key in ("max_tokens", "max_completion_tokens"):
            value = body.get(key)
            if isinstance(value, int) and not isinstance(value, bool):
                self.max_tokens = max(self.max_tokens, value)
        return None


def new_file_id() -> str:
    return FILE_PREFIX + os.urandom(12).hex()


def valid_id(file_id: str) -> bool:
    rest = file_id.removeprefix(FILE_PREFIX)
    return rest != file_id and len(rest) == 24 and all(c in "0123456789abcdef" for c in rest)


@dataclass(frozen=True)
class Place:
    """One namespace's gateway folder in its tenant's storage."""

    root: str
    storage: StoragePolicy

    def data(self, file_id: str) -> str:
        return join(join(self.root, "files"), file_id + ".jsonl")

    def meta(self, file_id: str) -> str:
        return join(join(self.root, "files"), file_id + ".json")

    def outputs(self, batch_id: str) -> str:
        return join(join(self.root, "batches"), batch_id) + "/"


def _split(buffer: bytearray) -> Iterator[bytes]:
    while (end := buffer.find(b"\n")) >= 0:
        line = bytes(buffer[:end]).rstrip(b"\r")
        del buffer[: end + 1]
        yield line


async def store_upload(
    place: Place,
    file_id: str,
    chunks: AsyncIterator[bytes],
    *,
    filename: str,
    purpose: str,
    max_bytes: int,
    max_lines: int,
    max_line: int = 10 << 20,
    created_at: int,
) -> tuple[dict[str, Any], Check]:
    """Stream an upload into storage while checking it; (file object, check). A refused or oversize upload leaves
    nothing stored: the lines go through a bounded queue to a writer thread, which stops without renaming."""
    check = Check(max_lines)
    lines: queue.Queue[object] = queue.Queue(maxsize=256)

    def produced() -> Iterator[bytes]:
        while (item := lines.get()) is not _END:
            if isinstance(item, BaseException):
                raise item
            assert isinstance(item, bytes)
            yield item

    url = place.data(file_id)
    writer = asyncio.get_running_loop().run_in_executor(None, write_lines, url, produced(), place.storage)
    size = 0
    buffer = bytearray()

    async def put(item: object) -> None:
        while True:
            try:
                lines.put_nowait(item)
                return
            except queue.Full:
                if writer.done():
                    return
                await asyncio.sleep(0.001)

    try:
        async for chunk in chunks:
            size += len(chunk)
            if size > max_bytes:
                raise TooLarge(f"the file is over the gateway's limit of {max_bytes} bytes")
            buffer += chunk
            for line in _split(buffer):
                check.line(line)
                await put(line)
            if len(buffer) > max_line:
                raise TooLarge(f"line {check.lines + 1} is over {max_line} bytes")
        if buffer:
            check.line(bytes(buffer).rstrip(b"\r"))
            await put(bytes(buffer))
        if check.lines == 0:
            check.bad(1, "the file is empty")
        if check.errors:
            raise _Refused()
    except BaseException as exc:
        await put(exc if isinstance(exc, Exception) else RuntimeError("upload aborted"))
        with contextlib.suppress(Exception):
            await writer
        await asyncio.get_running_loop().run_in_executor(None, _remove, place, file_id)
        if isinstance(exc, _Refused):
            return {}, check
        raise
    await put(_END)
    await writer
    obj = {
        "id": file_id,
        "object": "file",
        "bytes": size,
        "created_at": created_at,
        "filename": filename,
        "purpose": purpose,
        "status": "processed",
        "expires_at": None,
        "status_details": None,
    }
    record = {**obj, "barge": {"model": check.model, "url": check.url, "max_tokens": check.max_tokens}}
    await asyncio.get_running_loop().run_in_executor(
        None, write_lines, place.meta(file_id), [orjson.dumps(record)], place.storage
    )
    return obj, check


class _Refused(Exception):
    pass


def _remove(place: Place, file_id: str) -> None:
    for url in (place.data(file_id), place.meta(file_id)):
        fs, path = locate(url, place.storage)
        for target in (path, path + ".partial"):
            with contextlib.suppress(FileNotFoundError, OSError):
                fs.rm(target)


def read_record(place: Place, file_id: str) -> dict[str, Any] | None:
    """The stored record of a file (its file object plus what the check found), or None."""
    if not valid_id(file_id):
        return None
    try:
        found = orjson.loads(read_text(place.meta(file_id), place.storage))
    except (StorageError, orjson.JSONDecodeError):
        return None
    return found if isinstance(found, dict) else None


def public(record: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in record.items() if k != "barge"}


def list_records(place: Place) -> list[dict[str, Any]]:
    try:
        fs, path = locate(join(place.root, "files"), place.storage)
        names = [str(p).rsplit("/", 1)[-1] for p in fs.ls(path, detail=False)]
    except (StorageError, FileNotFoundError, OSError):
        return []
    records = (read_record(place, n.removesuffix(".json")) for n in names if n.endswith(".json"))
    return sorted((r for r in records if r), key=lambda r: (-int(r.get("created_at") or 0), r["id"]))


def delete(place: Place, file_id: str) -> bool:
    if read_record(place, file_id) is None:
        return False
    _remove(place, file_id)
    return True


def content(place: Place, file_id: str) -> Iterator[bytes]:
    for _, line in read_lines(place.data(file_id), place.storage):
        yield line + b"\n"
