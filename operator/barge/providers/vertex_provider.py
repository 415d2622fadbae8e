"""Vertex AI batch prediction, for Gemini and for Claude on Vertex, through `google-genai` (`vertexai=True`).

A shard becomes one JSONL object in GCS (`<gcsPrefix><job tag>/<shard>-<digest>/input.jsonl`, written by
providers/gcs.py) and one batch prediction job (`batches.create(model, src=gs://.../input.jsonl,
dest=gs://.../output/)`); Vertex writes `predictions*.jsonl` under a directory of `dest` (`outputInfo`).

- Gemini (`gemini-*`): lines `{"request": GenerateContentRequest}`, the custom id in `request.labels`; read back
  as `{"request", "response" | "status"}` (the request echoed, its labels with it); fallback
  `models.generate_content` on Vertex.
- Claude (`claude-*`): lines `{"custom_id", "request"}` (the Anthropic params without `model`, with
  `anthropic_version: vertex-2023-10-16`); read back as `{"custom_id", "response" | "status"}`; fallback
  AsyncAnthropicVertex's messages (rawPredict).

Gemini lines have no id field of their own: the custom id rides in the request's `labels` (Vertex's
GenerateContentRequest takes string labels, kept with the request Vertex echoes in each output line). A label value
is at most 63 lowercase characters, so the id (`[A-Za-z0-9_-]{1,64}`) is written with `_` doubled and each capital
as `_` and its lowercase letter, cut into `barge_id0`, `barge_id1`, ...; a line without them is skipped (its
request is then missing, and retried). Verified against `barge emulator` only (no Google account here).

Creation is not idempotent and a job has no metadata: Barge's (the job tag, the shard) and the objects' digest ride
in the display name (`barge?barge_job=..&barge_shard=..&d=..`, under Vertex's 128 characters), read back by
`list_recent`, so an orphan left by a crash between create and record is adopted by it (batch/adoption.py).
States JOB_STATE_* as the Gemini adapter's (EXPIRED after Vertex's own limit; Barge's deadline falls first). Claude
on Vertex allows 4 live batch jobs per project by default: a 5th create is a 429 RESOURCE_EXHAUSTED, transient,
retried later; the admission queue caps live Claude batches at 4 unless an InferencePool declares otherwise.
Retention deletes the input object, the output objects and the job. Tokens: providers/google_tokens.py.
"""

from __future__ import annotations

import asyncio
import hashlib
import re
import tempfile
from collections.abc import AsyncIterator, Iterable, Iterator
from typing import Any
from urllib.parse import urlencode

import anthropic
import httpx2
import orjson
from google import genai
from google.genai import errors, types

from barge.providers import jsonl
from barge.providers.anthropic_provider import AnthropicProvider
from barge.providers.anthropic_provider import parse_line as anthropic_line
from barge.providers.base import BatchInfo, Outcome, Parsed, Request, Result, flatten
from barge.providers.encoding import anthropic_params
from barge.providers.errors import Fatal, Invalid, Transient, classify
from barge.providers.gcs import Gcs
from barge.providers.gemini_encoding import gemini_request
from barge.providers.gemini_provider import (
    DISPLAY_PREFIX,
    ENDED,
    RETRIED_STATUSES,
    GeminiProvider,
    display_metadata,
    from_gemini,
    job_state,
    response_parsed,
)
from barge.providers.google_tokens import Tokens
from barge.providers.guard import Allowed, CappedTransport, guarded_transport
from barge.providers.vertex_settings import VertexSettings

ANTHROPIC_VERSION = "vertex-2023-10-16"
LABEL = "barge_id"
MAX_LABEL = 63
CLAUDE_LIVE_BATCHES = 4
_MODEL_KEY = b',"barge_model":'
_ONCE = types.HttpOptions(retry_options=types.HttpRetryOptions(attempts=1))


def is_claude(model: str) -> bool:
    return model.startswith(("claude", "publishers/anthropic/"))


def batch_model(model: str) -> str:
    """The model as batches.create takes it (the SDK prefixes publishers/google/models/ to a bare name)."""
    if is_claude(model) and not model.startswith("publishers/"):
        return f"publishers/anthropic/models/{model}"
    return model


def id_labels(custom_id: str) -> dict[str, str]:
    escaped = "".join("__" if c == "_" else "_" + c.lower() if c.isupper() else c for c in custom_id)
    return {f"{LABEL}{n}": escaped[at : at + MAX_LABEL] for n, at in enumerate(range(0, len(escaped), MAX_LABEL))}


def id_from_labels(labels: Any) -> str | None:
    if not isinstance(labels, dict):
        return None
    parts, n = [], 0
    while isinstance(labels.get(f"{LABEL}{n}"), str):
        parts.append(labels[f"{LABEL}{n}"])
        n += 1
    escaped = "".join(parts)
    if not escaped:
        return None
    out, chars = [], iter(escaped)
    for c in chars:
        if c != "_":
            out.append(c)
            continue
        nxt = next(chars, "")
        out.append("_" if nxt == "_" else nxt.upper())
    return "".join(out)


def encode_vertex(request: Request) -> bytes:
    """One line of a Vertex batch input; the model is appended last (`_MODEL_KEY`) and stripped before upload."""
    if is_claude(request.model):
        params = anthropic_params(request)
        params.pop("model", None)
        params["anthropic_version"] = ANTHROPIC_VERSION
        line: dict[str, Any] = {"custom_id": request.custom_id, "request": params}
    else:
        body = gemini_request(request)
        body.pop("model", None)
        body["labels"] = id_labels(request.custom_id)
        line = {"request": body}
    return orjson.dumps(line)[:-1] + _MODEL_KEY + orjson.dumps(request.model) + b"}"


def _stripped(lines: Iterable[bytes]) -> Iterator[tuple[bytes, str]]:
    for line in lines:
        at = line.rfind(_MODEL_KEY)
        if at < 0:
            raise Invalid(
                "a line without its model (not encoded by VertexProvider.encode)", error_type="invalid_request"
            )
        yield line[:at] + b"}", str(orjson.loads(line[at + len(_MODEL_KEY) : -1]))


def _info(job: types.BatchJob) -> BatchInfo:
    from datetime import UTC, datetime

    status = job_state(job)
    error = [{"message": job.error.message, "code": "INVALID_ARGUMENT"}] if job.error and job.error.code == 3 else []
    meta = {k: v for k, v in display_metadata(job.display_name).items() if k != "d"}
    return BatchInfo(str(job.name), status, status in ENDED, job.create_time or datetime.now(UTC), None, meta, error)


def _line_error(key: str, status: str) -> Parsed:
    """A line's `status`: its error, e.g. `Internal Server Error: {"error": {"code": 500, ...}}`; the HTTP code in
    it decides the outcome (a 5xx or 429 is retried, another 4xx is invalid)."""
    message = status[:300]
    found = re.search(r'"code"\s*:\s*(\d{3})', status)
    cls = classify(int(found.group(1)) if found else None, "vertex_line_error", message)
    outcome = {Fatal: Outcome.FATAL, Transient: Outcome.TRANSIENT}.get(cls, Outcome.INVALID)
    return (key, outcome, "", 0, 0, 0, 0, "vertex_line_error", message)


def parse_line(line: dict[str, Any]) -> Parsed:
    """One output line, Claude's (`custom_id`) or Gemini's (the id in the echoed request's labels)."""
    status = line.get("status")
    if "custom_id" in line:
        key = line["custom_id"]
        if not isinstance(key, str):
            raise ValueError("a line without its custom_id")
        if isinstance(status, str) and status:
            return _line_error(key, status)
        return anthropic_line({"custom_id": key, "result": {"type": "succeeded", "message": line["response"]}})
    request = line.get("request")
    key = id_from_labels(request.get("labels") if isinstance(request, dict) else None)
    if key is None:
        raise ValueError("a line whose request carries no barge_id labels")
    if isinstance(status, str) and status:
        return _line_error(key, status)
    return response_parsed(key, line["response"])


#: An ended job's states whose requests missing from the output are routed so (read back from the input object).
UNFINISHED = {"JOB_STATE_EXPIRED": Outcome.EXPIRED, "JOB_STATE_CANCELLED": Outcome.CANCELED}


def input_key(line: dict[str, Any]) -> str:
    """The custom id of one input line (Claude's custom_id, Gemini's labels)."""
    if isinstance(line.get("custom_id"), str):
        return str(line["custom_id"])
    request = line.get("request")
    key = id_from_labels(request.get("labels") if isinstance(request, dict) else None)
    if key is None:
        raise ValueError("an input line without its id")
    return key


def _input_keys(lines: list[bytes]) -> Iterator[str]:
    for line in lines:
        try:
            yield input_key(orjson.loads(line))
        except (orjson.JSONDecodeError, ValueError, AttributeError):  # Barge wrote it: not a request of its own
            continue


class VertexProvider:
    """BatchProvider over genai.Client(vertexai=True), GCS (providers/gcs.py) and AsyncAnthropicVertex."""

    name = "vertex"
    max_requests = 200_000  # Vertex: 200,000 requests per batch job
    max_bytes = 1024**3 - 1  # a GCS input file of at most 1 GB
    keeps_metadata = True  # in the display name

    def __init__(
        self,
        settings: VertexSettings,
        client: genai.Client | None = None,
        claude: anthropic.AsyncAnthropicVertex | None = None,
        gcs: Gcs | None = None,
        http: httpx2.AsyncClient | None = None,
    ) -> None:
        self.settings = settings
        self.client = client
        self._gemini = GeminiProvider(client, bare_model=True) if client is not None else None
        self._claude = AnthropicProvider(claude) if claude is not None else None  # type: ignore[arg-type]
        self._gcs = gcs
        self._http = http

    def _ready(self) -> tuple[Any, Gcs]:
        if self.settings.problem or self.client is None or self._gcs is None:
            raise Fatal(self.settings.problem or "vertex: no client", error_type="vertex_settings")
        return self.client.aio, self._gcs

    def encode(self, request: Request) -> bytes:
        return encode_vertex(request)

    def _paths(self, metadata: dict[str, str], digest: str) -> tuple[str, str]:
        base = f"{self.settings.gcs_prefix}{metadata.get('barge_job', 'barge')}/{metadata.get('barge_shard', '0')}"
        return f"{base}-{digest}/input.jsonl", f"{base}-{digest}/output/"

    async def create_batch(
        self, lines: Iterable[bytes], metadata: dict[str, str], *, output_expires_after: int = 0
    ) -> BatchInfo:
        """`output_expires_after` is OpenAI's: the objects stay in GCS until retention deletes them."""
        aio, gcs = self._ready()
        digest, model, count = hashlib.sha256(), "", 0
        with tempfile.TemporaryFile() as spool:
            for record, line_model in _stripped(lines):
                model = model or line_model
                digest.update(record)
                spool.write(record + b"\n")
                count += 1
            if not count:
                raise Invalid("a batch needs at least one request", error_type="empty_batch")
            digest.update(model.encode())
            short = digest.hexdigest()[:16]
            source, dest = self._paths(metadata, short)
            await gcs.upload(source, spool, spool.tell())
        name = DISPLAY_PREFIX + urlencode({**metadata, "d": short})
        config = types.CreateBatchJobConfig(display_name=name, dest=dest, http_options=_ONCE)
        try:
            job = await aio.batches.create(model=batch_model(model), src=source, config=config)
        except (errors.APIError, httpx2.HTTPError) as exc:
            error = from_gemini(exc)
            if isinstance(error, Invalid | Fatal):  # refused for sure: no job will read the object
                await gcs.delete(source)
            raise error from exc
        return _info(job)

    async def _job(self, batch_id: str) -> types.BatchJob:
        aio, _ = self._ready()
        try:
            job: types.BatchJob = await aio.batches.get(name=batch_id)
        except (errors.APIError, httpx2.HTTPError) as exc:
            raise from_gemini(exc) from exc
        return job

    async def retrieve(self, batch_id: str) -> BatchInfo:
        return _info(await self._job(batch_id))

    async def list_recent(self, limit: int = 100) -> list[BatchInfo]:
        aio, _ = self._ready()
        out: list[BatchInfo] = []
        try:
            pager = await aio.batches.list(config=types.ListBatchJobsConfig(page_size=100))
            async for job in pager:
                out.append(_info(job))
                if len(out) >= max(limit, 10_000):
                    break
        except (errors.APIError, httpx2.HTTPError) as exc:
            raise from_gemini(exc) from exc
        out.sort(key=lambda b: b.created_at, reverse=True)
        return out[:limit]

    async def cancel(self, batch_id: str) -> BatchInfo:
        aio, _ = self._ready()
        try:
            await aio.batches.cancel(name=batch_id)
        except (errors.APIError, httpx2.HTTPError) as exc:
            current = await self.retrieve(batch_id)
            if current.ended:
                return current
            raise from_gemini(exc) from exc
        return await self.retrieve(batch_id)

    def results(self, batch_id: str) -> AsyncIterator[Result]:
        return flatten(self.parsed_pages(batch_id))

    def _output_dir(self, job: types.BatchJob) -> str:
        found = job.output_info.gcs_output_directory if job.output_info else None
        return found or ""

    async def parsed_pages(self, batch_id: str) -> AsyncIterator[list[Parsed]]:
        job = await self._job(batch_id)
        _, gcs = self._ready()
        where = self._output_dir(job)
        if not where:
            return  # no output (failed, cancelled, expired before any): the engine retries the shard's requests
        seen: set[str] = set()
        for uri in await gcs.list(where.rstrip("/") + "/"):
            if uri.endswith(".jsonl"):
                async for lines in jsonl.pages(gcs.chunks(uri)):
                    page = jsonl.parsed(lines, parse_line)
                    seen.update(p[0] for p in page)
                    yield page
        ended = job_state(job)
        unfinished = UNFINISHED.get(ended)
        meta = display_metadata(job.display_name)
        if unfinished is None or not meta.get("d"):
            return
        # Vertex leaves out what an expired or cancelled job never ran: read from the job's own input object
        async for lines in jsonl.pages(gcs.chunks(self._paths(meta, meta["d"])[0])):
            page = [
                (key, unfinished, "", 0, 0, 0, 0, unfinished.value, f"the job ended {ended}")
                for key in _input_keys(lines)
                if key not in seen
            ]
            if page:
                yield page

    async def delete_objects(self, batch_id: str) -> int:
        aio, gcs = self._ready()
        try:
            job = await aio.batches.get(name=batch_id)
        except errors.APIError as exc:
            if exc.code == 404:
                return 0
            raise from_gemini(exc) from exc
        except httpx2.HTTPError as exc:
            raise from_gemini(exc) from exc
        meta = display_metadata(job.display_name)
        deleted = 0
        if meta.get("d"):
            source, dest = self._paths(meta, meta["d"])
            deleted += await gcs.delete(source)
            for uri in await gcs.list(dest):
                deleted += await gcs.delete(uri)
        try:
            await aio.batches.delete(name=batch_id)
        except errors.APIError as exc:
            if exc.code != 404:
                raise from_gemini(exc) from exc
            return deleted
        except httpx2.HTTPError as exc:
            raise from_gemini(exc) from exc
        return deleted + 1

    async def complete(self, request: Request) -> Result:
        self._ready()
        if is_claude(request.model):
            if self._claude is None:
                raise Fatal("vertex: no Claude client", error_type="vertex_settings")
            return await self._claude.complete(request)
        assert self._gemini is not None
        return await self._gemini.complete(request)

    async def close(self) -> None:
        if self._gemini is not None:
            await self._gemini.close()
        if self._claude is not None:
            await self._claude.close()
        if self._http is not None:
            await self._http.aclose()


def _http(guard: Allowed | None, timeout: float) -> httpx2.AsyncClient:
    transport = CappedTransport(guarded_transport(guard)) if guard is not None else None
    return httpx2.AsyncClient(transport=transport, follow_redirects=False, timeout=timeout)


def _refused(url: str, guard: Allowed) -> str:
    from barge.providers.bedrock_settings import refused_endpoint

    return refused_endpoint(url, guard).replace("bedrock:", "vertex:", 1)


def make_vertex(
    secret: str, *, base_url: str = "", timeout: float = 600.0, sync_retries: int = 2, guard: Allowed | None = None
) -> VertexProvider:
    """The adapter with its clients, each on an httpx2 client of its own behind the endpoint policy (`guard`),
    capped, no redirects; tokens through Barge's own connections. `base_url`: Vertex's (empty: the region's)."""
    settings = VertexSettings.from_secret(secret)
    if guard is not None and not settings.problem:
        for url in (base_url, *settings.endpoints()):
            why = _refused(url, guard) if url else ""
            if why:
                settings = VertexSettings(problem=why)
    if settings.problem:
        return VertexProvider(settings)
    tokens = Tokens(settings.service_account, guard, timeout=min(timeout, 30.0))
    retries = (
        types.HttpRetryOptions(attempts=sync_retries + 1, http_status_codes=RETRIED_STATUSES) if sync_retries else None
    )
    options = types.HttpOptions(
        base_url=base_url or None,
        timeout=int(timeout * 1000),
        retry_options=retries,
        httpx_async_client=_http(guard, timeout),
    )
    client = genai.Client(
        vertexai=True, project=settings.project, location=settings.location, credentials=tokens, http_options=options
    )
    claude = anthropic.AsyncAnthropicVertex(
        region=settings.location,
        project_id=settings.project,
        credentials=tokens,
        base_url=f"{base_url.rstrip('/')}/v1" if base_url else None,
        http_client=_http(guard, timeout),
        max_retries=sync_retries,
        timeout=timeout,
    )
    storage = _http(guard, timeout)

    async def token() -> str:
        return await asyncio.to_thread(tokens.current)

    return VertexProvider(settings, client, claude, Gcs(storage, settings.storage_endpoint, token), storage)
