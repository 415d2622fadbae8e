"""Amazon Bedrock batch inference through boto3: the `bedrock` control plane, records in S3, `bedrock-runtime` for
the synchronous fallback.

A shard becomes one JSONL object in S3 (`<inputS3Uri><name>/records.jsonl`, records `{recordId, modelInput}`:
providers/bedrock_encoding.py) and one model invocation job writing to `<outputS3Uri><name>/`; Bedrock puts
`<jobId>/records.jsonl.out` (`{recordId, modelInput, modelOutput | error}`) and `manifest.json.out` there.

Exactly-once: Bedrock is the one provider with an idempotency key on batch create. The job name is
`barge-<job tag>-<shard>-<digest>` and the `clientRequestToken` a hash of that name and of the shard's bytes, so both
are a function of the ledger's intent: a create retried (here, by botocore, up to 3 attempts; after a crash, by
the engine) is the same job, never a second one, and an orphan is found by its name (`keeps_metadata`: the name
carries the job tag and shard). The engine's own rule (an intent, then adoption) stays as for every provider.

Shards under Bedrock's minimum number of records per job (`minRecordsPerJob`, default 100, Bedrock's default
quota) are refused before anything is uploaded or created (Invalid `below_minimum_records`, naming both counts);
the engine sends a job's pending items under that minimum through the synchronous path instead (batch/runner.py,
`min_requests`), so this refusal is the backstop. Statuses PartiallyCompleted and Expired route the records the job
did not process as expired, Stopped as canceled, Failed as transient with the job's message (read from the input
object, by recordId). Retention deletes the input, output and manifest objects: Bedrock has no job delete.

Settings come from the job's Secret, a JSON object (keys in `BedrockSettings.from_secret`): the tenant's own keys,
region, role ARN and S3 prefixes; never the operator's own AWS identity.
"""

from __future__ import annotations

import asyncio
import hashlib
import re
from collections.abc import AsyncIterator, Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from typing import Any, TypeVar

import boto3  # type: ignore[import-untyped]
import orjson
from botocore.config import Config  # type: ignore[import-untyped]
from botocore.exceptions import (  # type: ignore[import-untyped]
    BotoCoreError,
    ClientError,
)

from barge.providers import jsonl
from barge.providers.base import UNREADABLE_ANSWER, BatchInfo, Outcome, Parsed, Request, Result, counted, flatten
from barge.providers.base import read_answer as read_body
from barge.providers.bedrock_encoding import MODEL_KEY as _MODEL_KEY
from barge.providers.bedrock_encoding import encode_bedrock, is_claude, model_input
from barge.providers.bedrock_settings import BedrockSettings, from_boto, refused_endpoint
from barge.providers.chat_convert import Unconvertible
from barge.providers.content import anthropic_output
from barge.providers.errors import Fatal, Invalid, ProviderError, Transient
from barge.providers.errors import sync_failure as failed
from barge.providers.guard import Allowed
from barge.providers.upload import LineReader
from barge.providers.urllib3_guard import guard_client

T = TypeVar("T")
ENDED = frozenset({"Completed", "PartiallyCompleted", "Failed", "Stopped", "Expired"})
UNPROCESSED = {
    "PartiallyCompleted": (Outcome.EXPIRED, "expired"),
    "Expired": (Outcome.EXPIRED, "expired"),
    "Stopped": (Outcome.CANCELED, "canceled"),
    "Failed": (Outcome.TRANSIENT, "job_failed"),
}
INPUT_NAME = "records.jsonl"
_NAME_SAFE = re.compile(r"[a-zA-Z0-9]{1,40}")


def _split(uri: str) -> tuple[str, str]:
    bucket, _, key = uri.removeprefix("s3://").partition("/")
    return bucket, key


def _names(metadata: dict[str, str], digest: str) -> tuple[str, str]:
    """(jobName, clientRequestToken) of a shard: a function of its intent (job tag, shard) and of its bytes."""
    job, shard = metadata.get("barge_job", ""), metadata.get("barge_shard", "")
    if _NAME_SAFE.fullmatch(job or "-") and _NAME_SAFE.fullmatch(shard or "-"):
        name = f"barge-{job}-{shard}-{digest[:8]}"
    else:  # metadata that does not fit a job name: the name is a hash, and the job is not adoptable by it
        name = "barge-x" + hashlib.sha256(orjson.dumps(metadata, option=orjson.OPT_SORT_KEYS)).hexdigest()[:24]
        name += f"-{digest[:8]}"
    return name, "barge-" + hashlib.sha256(f"{name}\0{digest}".encode()).hexdigest()[:56]


def metadata_of(name: str) -> dict[str, str]:
    parts = name.split("-")
    if len(parts) == 4 and parts[0] == "barge" and not parts[1].startswith("x"):
        return {"barge_job": parts[1], "barge_shard": parts[2]}
    return {}


def _info(job: dict[str, Any]) -> BatchInfo:
    status = str(job.get("status") or "")
    submitted = job.get("submitTime")
    created = submitted if isinstance(submitted, datetime) else datetime.now(UTC)
    total = job.get("totalRecordCount")
    errors = [{"code": status, "message": str(job.get("message") or "")}] if status == "Failed" else []
    return BatchInfo(
        str(job["jobArn"]),
        status,
        status in ENDED,
        created,
        int(total) if isinstance(total, int) else None,
        metadata_of(str(job.get("jobName") or "")),
        errors,
    )


def _message(custom_id: str, message: dict[str, Any]) -> Result:
    content = message.get("content")
    stop = message.get("stop_reason")
    text = anthropic_output(content if isinstance(content, list) else [], None if stop == "refusal" else stop)
    usage = message.get("usage") or {}
    try:
        counts = counted(
            int(usage.get("input_tokens") or 0),
            int(usage.get("output_tokens") or 0),
            int(usage.get("cache_read_input_tokens") or 0),
            int(usage.get("cache_creation_input_tokens") or 0),
        )
    except ValueError as exc:
        return Result(custom_id, Outcome.TRANSIENT, error_type=UNREADABLE_ANSWER, message=str(exc))
    if stop == "refusal":
        return Result(custom_id, Outcome.REFUSED, text, counts, "refusal")
    return Result(custom_id, Outcome.SUCCEEDED, text, counts)


#: Converse stop reasons that are a refusal (a content filter or a guardrail), not an answer.
CONVERSE_REFUSALS = ("content_filtered", "guardrail_intervened")


def _converse(custom_id: str, answer: dict[str, Any]) -> Result:
    """A Converse answer (`{output: {message: {content: [{text}]}}, stopReason, usage: {inputTokens, ...}}`)."""
    output = answer.get("output")
    message = output.get("message") if isinstance(output, dict) else None
    content = message.get("content") if isinstance(message, dict) else None
    blocks = content if isinstance(content, list) else []
    text = "".join(str(b.get("text") or "") for b in blocks if isinstance(b, dict) and "text" in b)
    usage = answer.get("usage") or {}
    try:
        counts = counted(
            int(usage.get("inputTokens") or 0),
            int(usage.get("outputTokens") or 0),
            int(usage.get("cacheReadInputTokens") or 0),
            int(usage.get("cacheWriteInputTokens") or 0),
        )
    except (ValueError, TypeError, AttributeError) as exc:
        return Result(custom_id, Outcome.TRANSIENT, error_type=UNREADABLE_ANSWER, message=str(exc)[:200])
    stop = answer.get("stopReason")
    if stop in CONVERSE_REFUSALS:
        return Result(custom_id, Outcome.REFUSED, text, counts, "refusal", str(stop))
    return Result(custom_id, Outcome.SUCCEEDED, text, counts)


def parse_line(line: dict[str, Any]) -> Parsed:
    """One line of `<input>.jsonl.out`: `{recordId, modelInput, modelOutput}` or `{..., error: {errorCode,
    errorMessage}}`."""
    record_id = line["recordId"]
    if type(record_id) is not str:
        raise ValueError("recordId is not a string")
    output = line.get("modelOutput")
    if type(output) is dict:
        r = _converse(record_id, output) if "output" in output else _message(record_id, output)
        u = r.usage
        return (
            r.custom_id,
            r.outcome,
            r.text,
            u.input_tokens,
            u.output_tokens,
            u.cache_read_tokens,
            u.cache_write_tokens,
            r.error_type,
            r.message,
        )
    error = line.get("error")
    error = error if type(error) is dict else {}
    code = error.get("errorCode")
    status = code if type(code) is int else 500
    message = str(error.get("errorMessage") or "no modelOutput and no error")[:500]
    outcome = Outcome.TRANSIENT if status in (408, 429) or status >= 500 else Outcome.INVALID
    return (record_id, outcome, "", 0, 0, 0, 0, f"bedrock_{status}", message)


class BedrockProvider:
    """BatchProvider over boto3's bedrock, bedrock-runtime and s3 clients (made by `make_bedrock`)."""

    name = "bedrock"
    max_bytes = 1024**3 - 1  # "Batch inference input file size": 1 GB
    keeps_metadata = True  # the job name carries the job tag and the shard

    def __init__(self, settings: BedrockSettings, clients: dict[str, Any] | None, threads: int = 64) -> None:
        self.settings = settings
        self.max_requests = settings.max_records
        self.min_requests = settings.min_records
        self._clients = clients or {}
        self._pool = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="bedrock")

    def _client(self, which: str) -> Any:
        if self.settings.problem:
            raise Fatal(self.settings.problem, error_type="bedrock_settings")
        return self._clients[which]

    async def _call(self, which: str, method: str, /, **kwargs: Any) -> Any:
        fn = getattr(self._client(which), method)
        try:
            return await asyncio.get_running_loop().run_in_executor(self._pool, lambda: fn(**kwargs))
        except (ClientError, BotoCoreError) as exc:
            raise from_boto(exc) from exc

    async def _run(self, fn: Callable[[], T]) -> T:
        try:
            return await asyncio.get_running_loop().run_in_executor(self._pool, fn)
        except (ClientError, BotoCoreError) as exc:
            raise from_boto(exc) from exc

    def encode(self, request: Request) -> bytes:
        return encode_bedrock(request)

    async def create_batch(
        self, lines: Iterable[bytes], metadata: dict[str, str], *, output_expires_after: int = 0
    ) -> BatchInfo:
        """`output_expires_after` is OpenAI's: the objects stay in S3 until retention deletes them."""
        s = self.settings
        source = lines if iter(lines) is not lines else list(lines)
        digest, count, model = hashlib.sha256(), 0, ""
        for record in _stripped(source):
            if not model:
                model = record[1]
            digest.update(record[0])
            count += 1
        if not count:
            raise Invalid("a batch needs at least one request", error_type="empty_batch")
        if count < s.min_records:
            raise Invalid(
                f"{count} records: under Bedrock's minimum of {s.min_records} records per batch inference job "
                "(Service Quotas: Minimum number of records per batch inference job); sent synchronously instead",
                error_type="below_minimum_records",
            )
        if count > s.max_records:
            raise Invalid(f"{count} records: over {s.max_records} per job", error_type="too_many_records")
        digest.update(model.encode())
        name, token = _names(metadata, digest.hexdigest())
        input_uri = f"{s.input_s3_uri}{name}/{INPUT_NAME}"
        bucket, key = _split(input_uri)
        s3 = self._client("s3")
        reader = LineReader(_Lines(source))
        await self._run(lambda: s3.upload_fileobj(reader, bucket, key))
        try:
            created = await self._call(
                "create",
                "create_model_invocation_job",
                jobName=name,
                roleArn=s.role_arn,
                clientRequestToken=token,
                modelId=model,
                inputDataConfig={"s3InputDataConfig": {"s3Uri": input_uri, "s3InputFormat": "JSONL"}},
                outputDataConfig={"s3OutputDataConfig": {"s3Uri": f"{s.output_s3_uri}{name}/"}},
                timeoutDurationInHours=24,
                modelInvocationType="InvokeModel" if is_claude(model) else "Converse",
                tags=[{"key": k, "value": v} for k, v in sorted(metadata.items())][:200],
            )
        except (Invalid, Fatal):  # refused for sure: no job will read the records, so they go now
            await self._run(lambda: s3.delete_object(Bucket=bucket, Key=key))
            raise
        return await self.retrieve(str(created["jobArn"]))

    async def _job(self, batch_id: str) -> dict[str, Any]:
        job: dict[str, Any] = await self._call("bedrock", "get_model_invocation_job", jobIdentifier=batch_id)
        return job

    async def retrieve(self, batch_id: str) -> BatchInfo:
        return _info(await self._job(batch_id))

    async def list_recent(self, limit: int = 100) -> list[BatchInfo]:
        out: list[BatchInfo] = []
        token: str | None = None
        while len(out) < limit:
            page = await self._call(
                "bedrock",
                "list_model_invocation_jobs",
                maxResults=min(limit, 1000),
                sortBy="CreationTime",
                sortOrder="Descending",
                nameContains="barge-",
                **({"nextToken": token} if token else {}),
            )
            out += [_info(j) for j in page.get("invocationJobSummaries") or []]
            token = page.get("nextToken")
            if not token:
                break
        return out[:limit]

    async def cancel(self, batch_id: str) -> BatchInfo:
        try:
            await self._call("bedrock", "stop_model_invocation_job", jobIdentifier=batch_id)
        except (Invalid, Transient):
            current = await self.retrieve(batch_id)
            if current.ended:  # stopping an ended job is not an error for Barge
                return current
            raise
        return await self.retrieve(batch_id)

    def results(self, batch_id: str) -> AsyncIterator[Result]:
        return flatten(self.parsed_pages(batch_id))

    def _objects(self, job: dict[str, Any]) -> tuple[str, str, str]:
        """(input, output, manifest) URIs of a job."""
        input_uri = str(job["inputDataConfig"]["s3InputDataConfig"]["s3Uri"])
        out = str(job["outputDataConfig"]["s3OutputDataConfig"]["s3Uri"]).rstrip("/")
        job_id = str(job["jobArn"]).rsplit("/", 1)[-1]
        name = input_uri.rsplit("/", 1)[-1]
        return input_uri, f"{out}/{job_id}/{name}.out", f"{out}/{job_id}/manifest.json.out"

    async def _chunks(self, uri: str) -> AsyncIterator[bytes]:
        bucket, key = _split(uri)
        s3 = self._client("s3")
        try:
            answer = await self._run(lambda: s3.get_object(Bucket=bucket, Key=key))
        except Invalid as exc:
            if exc.error_type in ("NoSuchKey", "http_404"):
                return  # no such object: nothing written (a job that failed, or stopped early)
            raise
        body = answer["Body"]
        try:
            while chunk := await self._run(lambda: body.read(1 << 20)):
                yield chunk
        finally:
            body.close()

    async def parsed_pages(self, batch_id: str) -> AsyncIterator[list[Parsed]]:
        job = await self._job(batch_id)
        status = str(job.get("status"))
        input_uri, output_uri, _ = self._objects(job)
        seen: set[str] = set()
        async for lines in jsonl.pages(self._chunks(output_uri)):
            page = jsonl.parsed(lines, parse_line)
            seen.update(p[0] for p in page)
            yield page
        unprocessed = UNPROCESSED.get(status)
        if unprocessed is None:
            return
        outcome, word = unprocessed
        why = f"job {status}: {job.get('message') or 'record not processed'}"[:300]
        async for lines in jsonl.pages(self._chunks(input_uri)):
            ids = [str(orjson.loads(x).get("recordId") or "") for x in lines]
            yield [(rid, outcome, "", 0, 0, 0, 0, word, why) for rid in ids if rid and rid not in seen]

    async def delete_objects(self, batch_id: str) -> int:
        try:
            job = await self._job(batch_id)
        except Invalid as exc:
            if exc.error_type == "ResourceNotFoundException":
                return 0
            raise
        s3 = self._client("s3")
        deleted = 0
        for uri in self._objects(job):
            bucket, key = _split(uri)
            try:
                await self._run(lambda b=bucket, k=key: s3.head_object(Bucket=b, Key=k))  # type: ignore[misc]
            except Invalid:
                continue  # already gone (404)
            await self._run(lambda b=bucket, k=key: s3.delete_object(Bucket=b, Key=k))  # type: ignore[misc]
            deleted += 1
        return deleted

    async def complete(self, request: Request) -> Result:
        try:
            body = model_input(request, batch=False)
        except Unconvertible as exc:
            return Result(request.custom_id, Outcome.INVALID, error_type="invalid_request", message=str(exc)[:300])
        if not is_claude(request.model):  # Converse: boto3 takes the body's fields and answers a dict
            try:
                answer = await self._call("runtime", "converse", modelId=request.model, **body)
            except Fatal:
                raise
            except ProviderError as exc:
                return failed(request.custom_id, exc, exc)
            return _converse(request.custom_id, answer)
        try:
            answer = await self._call(
                "runtime",
                "invoke_model",
                modelId=request.model,
                body=orjson.dumps(body),
                contentType="application/json",
                accept="application/json",
            )
            data = await self._run(answer["body"].read)
        except Fatal:
            raise
        except ProviderError as exc:
            return failed(request.custom_id, exc, exc)
        return read_body(request.custom_id, data, lambda cid, message: _message(cid, message))

    async def close(self) -> None:
        self._pool.shutdown(wait=False)


def _stripped(lines: Iterable[bytes]) -> Iterator[tuple[bytes, str]]:
    """(the record as sent, its model) of each encoded line (`encode` appended the model last)."""
    for line in lines:
        at = line.rfind(_MODEL_KEY)
        if at < 0:
            raise Invalid(
                "a record without its model (not encoded by BedrockProvider.encode)", error_type="invalid_request"
            )
        yield line[:at] + b"}", str(orjson.loads(line[at + len(_MODEL_KEY) : -1]))


class _Lines:
    """The records as sent, re-iterable when the source is (LineReader rewinds for a retried upload)."""

    def __init__(self, source: Iterable[bytes]) -> None:
        self.source = source

    def __iter__(self) -> Iterator[bytes]:
        return (record for record, _ in _stripped(self.source))


def make_bedrock(
    secret: str, *, base_url: str = "", timeout: float = 600.0, sync_retries: int = 2, guard: Allowed | None = None
) -> BedrockProvider:
    """The adapter with its clients: `base_url` is the endpoint_url of both bedrock and bedrock-runtime (empty:
    the region's); creates retry up to 3 attempts (the same clientRequestToken each time, so never a second job);
    reads and synchronous calls `sync_retries` times (botocore's standard mode). With `guard` (the operator), an
    endpoint the job names (baseURL, the Secret's s3EndpointURL) is checked against the endpoint policy when the
    client is made (a refused one makes every call Fatal, naming it), and every connection of the clients asks it
    again before it connects (providers/urllib3_guard.py: a name that re-resolves elsewhere later is refused then)."""
    settings = BedrockSettings.from_secret(secret)
    if guard is not None and not settings.problem:
        for url in (base_url, settings.s3_endpoint_url):
            why = refused_endpoint(url, guard) if url else ""
            if why:
                settings = BedrockSettings(problem=why)
    if settings.problem:
        return BedrockProvider(settings, None)
    session = boto3.session.Session(
        aws_access_key_id=settings.access_key_id,
        aws_secret_access_key=settings.secret_access_key,
        aws_session_token=settings.session_token or None,
        region_name=settings.region,
    )

    def config(attempts: int) -> Config:
        return Config(
            retries={"mode": "standard", "total_max_attempts": attempts},
            connect_timeout=min(timeout, 30.0),
            read_timeout=timeout,
            max_pool_connections=64,
        )

    endpoint = base_url or None
    clients = {
        "bedrock": session.client("bedrock", endpoint_url=endpoint, config=config(1 + sync_retries)),
        "create": session.client("bedrock", endpoint_url=endpoint, config=config(3)),
        "runtime": session.client("bedrock-runtime", endpoint_url=endpoint, config=config(1 + sync_retries)),
        "s3": session.client("s3", endpoint_url=settings.s3_endpoint_url or None, config=config(1 + sync_retries)),
    }
    if guard is not None:
        clients = {name: guard_client(client, guard) for name, client in clients.items()}
    return BedrockProvider(settings, clients)
