"""Input and output through fsspec (file, s3, az, gs, http), streamed, with path safety.

Why here and nowhere else: every byte Barge reads from or writes to a user's storage passes through these
functions, so the safety rules are enforced in one place, at the moment of use (REVIEW-3 H1-H3, L2):
- the tenant's storage prefixes from barge.policy for every scheme, http(s) paths percent-decoded before the
  check and sent exactly as checked (re-encoded), so `%2e%2e` cannot climb out of a prefix on the server;
- file:// under a prefix opened relative to the prefix's directory handle, no link followed (storage/local.py);
- http(s) and s3 endpoints connected only to addresses the connect-time check allows (barge.netguard: the endpoint
  policy in operator mode, never a metadata or link-local address otherwise), no redirect followed, no proxy
  from the environment, a whole-body read capped at 16 MiB (streamed reads are bounded per line);
- what a credentials Secret may name (storage/credentials.py).
Without prefixes (local runs) a path is the user's own: links are followed and the SDKs keep their defaults.
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import socket
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO
from urllib.parse import quote, urlparse

import fsspec
from fsspec.implementations.local import LocalFileSystem

from barge.netguard import MAX_ANSWER, AddressCheck, Allowed, Blocked, GuardedResolver, SessionFactory
from barge.policy import Refused, check_storage, normalise
from barge.storage import local
from barge.storage.credentials import credential_endpoints, credential_options
from barge.storage.errors import StorageError, StorageRefused

__all__ = [
    "BOM",
    "MAX_LINE_BYTES",
    "WRITE_BUFFER",
    "OversizeLine",
    "StorageError",
    "StoragePolicy",
    "StorageRefused",
    "bounded_lines",
    "credential_endpoints",
    "credential_options",
    "join",
    "locate",
    "open_binary",
    "read_lines",
    "read_text",
    "write_lines",
    "write_stream",
]

BOM = b"\xef\xbb\xbf"
REMOTE_SCHEMES = {"s3": "s3", "az": "az", "abfs": "abfs", "gs": "gcs", "gcs": "gcs", "http": "http", "https": "https"}
#: Longest input line read; a longer one becomes an invalid item (a request over 1 MiB is refused anyway).
MAX_LINE_BYTES = 4 * 1024 * 1024
METADATA_HOSTS = {"metadata.google.internal", "metadata", "instance-data"}


@dataclass(frozen=True)
class StoragePolicy:
    """Where file:// may point, and how relative paths resolve."""

    allowed_roots: tuple[Path, ...] | None = None
    """None: any local path (local runs). Otherwise file:// must resolve inside one of these (operator mode)."""
    base_dir: Path | None = None
    """Relative paths resolve against this (the manifest's folder in local runs)."""
    options: dict[str, dict[str, Any]] = field(default_factory=dict)
    """fsspec storage options per protocol (credentials from a Secret in operator mode)."""
    prefixes: tuple[str, ...] | None = None
    """None: no tenancy (local runs). Otherwise every URL must lie under one of these (the tenant's storage
    prefixes, placeholders expanded), file:// URLs also after symlinks are resolved."""
    addresses: Allowed | None = None
    """With prefixes: the connect-time check of http(s) and s3 endpoint addresses (`AddressCheck(policy)`, the
    admin's endpoint policy, in operator mode); None: `AddressCheck()`, never a metadata or link-local address."""


def _checked(url: str, policy: StoragePolicy) -> None:
    if policy.prefixes is None:
        return
    try:
        check_storage(url, policy.prefixes)
    except Refused as exc:
        raise StorageRefused(str(exc)) from None


def _check_http_host(host: str) -> None:
    if host.lower() in METADATA_HOSTS:
        raise StorageError(f"refusing http(s) input from metadata host {host!r}")
    try:
        infos = socket.getaddrinfo(host, None)
    except OSError as exc:
        raise StorageError(f"cannot resolve {host!r}: {exc}") from exc
    for info in infos:
        address = ipaddress.ip_address(info[4][0])
        if address.is_link_local or str(address) in ("169.254.169.254", "fd00:ec2::254"):
            raise StorageError(f"refusing http(s) input from link-local/metadata address {address} ({host})")


def _local(path_text: str, policy: StoragePolicy) -> Path:
    path = Path(path_text)
    if not path.is_absolute():
        if policy.allowed_roots is not None:
            raise StorageError(f"relative path {path_text!r} is not allowed here; use file:// under an allowed root")
        path = (policy.base_dir or Path.cwd()) / path
    try:
        resolved = Path(os.path.realpath(path))  # follows symlinks: a link cannot smuggle a path out of a root
    except OSError as exc:  # a link loop, or a folder swapped meanwhile
        raise StorageError(f"cannot resolve {path_text!r}: {exc.strerror}") from None
    if policy.allowed_roots is not None and not any(
        resolved == root.resolve() or resolved.is_relative_to(root.resolve()) for root in policy.allowed_roots
    ):
        roots = ", ".join(str(r) for r in policy.allowed_roots) or "(none configured)"
        raise StorageError(f"{path_text!r} resolves outside the allowed file roots: {roots}")
    return resolved


#: Characters of an http(s) path sent as they are (RFC 3986 pchar and "/"); everything else is percent-encoded.
PATH_SAFE = "/:@!$&'()*+,;=~"


def _as_checked(url: str) -> str:
    """An http(s) URL as the prefix check saw it (decoded, dot segments refused), encoded again: what is sent."""
    try:
        scheme, rest = normalise(url).split("://", 1)
    except Refused as exc:
        raise StorageRefused(str(exc)) from None
    netloc, _, path = rest.partition("/")
    return f"{scheme}://{netloc}{quote('/' + path, safe=PATH_SAFE)}"


def _check(policy: StoragePolicy) -> Allowed:
    return policy.addresses or AddressCheck()


def _s3_options(opts: dict[str, Any], policy: StoragePolicy) -> dict[str, Any]:
    """s3fs options whose connections (aiobotocore's aiohttp) pass the connect-time check."""
    check = _check(policy)
    endpoint = str((opts.get("client_kwargs") or {}).get("endpoint_url") or "")
    host = urlparse(endpoint).hostname or ""
    with contextlib.suppress(ValueError):  # a literal address is connected to without a lookup: check it now
        if not check(host, str(ipaddress.ip_address(host))):
            raise StorageRefused(f"endpoint policy: the s3 endpoint {endpoint} is an address the policy refuses")
    config = dict(opts.get("config_kwargs") or {})
    config["connector_args"] = {**(config.get("connector_args") or {}), "resolver": GuardedResolver(check)}
    return {**opts, "config_kwargs": config}


def locate(url: str, policy: StoragePolicy) -> tuple[Any, str]:
    """(fsspec filesystem, path) for a URL, after the safety checks."""
    parsed = urlparse(url)
    scheme = parsed.scheme.lower()
    if scheme in ("", "file") or (len(scheme) == 1 and url[1:3] == ":\\"):
        text = parsed.path if scheme == "file" else url
        if scheme == "file" and parsed.netloc not in ("", "localhost"):
            raise StorageError(f"file:// URLs must not name a host: {url!r}")
        if policy.prefixes is not None and not Path(text).is_absolute():
            raise StorageError(f"relative path {text!r} is not allowed here; use file:// under a storage prefix")
        _checked(url if scheme == "file" else "file://" + text, policy)
        resolved = _local(text, policy)
        _checked("file://" + str(resolved), policy)  # a symlink cannot lead out of the tenant's prefix
        return fsspec.filesystem("file"), str(resolved)
    _checked(url, policy)
    if scheme not in REMOTE_SCHEMES:
        raise StorageError(f"unsupported URL scheme {scheme!r} in {url!r}: use file://, s3://, az://, gs://, https://")
    protocol = REMOTE_SCHEMES[scheme]
    if ".." in parsed.path.split("/"):
        raise StorageError(f"'..' is not allowed in {url!r}")
    opts = dict(policy.options.get(protocol, {}))
    if protocol in ("http", "https"):
        if policy.prefixes is None:  # a local run: the user's own URL, the SDK's defaults
            _check_http_host(parsed.hostname or "")
            return fsspec.filesystem(protocol, **opts), url
        if (parsed.hostname or "").lower().rstrip(".") in METADATA_HOSTS:
            raise StorageRefused(f"refusing http(s) storage on metadata host {parsed.hostname!r}")
        # One streamed GET (block_size=0) of exactly the checked URL (encoded=True: yarl must not decode it again),
        # through a session that checks every address, follows no redirect and reads no proxy from the environment.
        guarded = {"get_client": SessionFactory(_check(policy)), "encoded": True, "block_size": 0}
        return fsspec.filesystem(protocol, **opts, **guarded, allow_redirects=False), _as_checked(url)
    if protocol == "s3" and policy.prefixes is not None:
        opts = _s3_options(opts, policy)
    try:
        if protocol in ("az", "abfs") and policy.prefixes is not None:
            from barge.storage.azure import GuardedBlobFileSystem  # adlfs and azure-storage-blob: only when used

            fs = GuardedBlobFileSystem(**opts, addresses=_check(policy))
        else:
            fs = fsspec.filesystem(protocol, **opts)
    except ImportError as exc:
        extra = " (pip install 'barge-operator[gcs]')" if protocol == "gcs" else ""
        raise StorageError(f"no filesystem for {scheme}:// is installed{extra}: {exc}") from exc
    except ValueError as exc:  # adlfs with no account or credentials, a malformed option: say so, no traceback
        raise StorageError(f"cannot use {url}: {exc}") from exc
    return fs, f"{parsed.netloc}{parsed.path}"


def _no_credentials(exc: BaseException) -> bool:
    """botocore found no (or half) credentials for s3://: a message for the user, not a traceback."""
    try:
        from botocore.exceptions import (  # type: ignore[import-untyped]
            CredentialRetrievalError,
            NoCredentialsError,
            PartialCredentialsError,
        )
    except ImportError:  # pragma: no cover (botocore comes with s3fs, a dependency)
        return False
    return isinstance(exc, (NoCredentialsError, PartialCredentialsError, CredentialRetrievalError))


def _beneath(fs: Any, path: str, policy: StoragePolicy) -> local.Beneath | None:
    """A local path under a tenant's prefix as (prefix folder, names): opened with no link followed."""
    if policy.prefixes is None or not isinstance(fs, LocalFileSystem):
        return None
    roots = [n[len("file://") :] for n in map(normalise, policy.prefixes) if n.startswith("file://")]
    where = local.beneath(path, roots)
    if where is None:
        raise StorageRefused(f"{path} is outside this tenant's storage prefixes")
    return where


def _blocked(exc: BaseException) -> Blocked | None:
    """The guard's refusal behind an error (fsspec reports a refused HEAD as FileNotFoundError)."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, Blocked):
            return seen
        seen = seen.__cause__ or seen.__context__
    return None


@contextlib.contextmanager
def _errors(url: str, missing: str, doing: str = "open") -> Iterator[None]:
    """The SDKs' errors as storage errors: a refusal of the connect-time check (however an SDK wraps it: botocore
    as EndpointConnectionError, fsspec as FileNotFoundError) is StorageRefused, never retried."""
    try:
        yield
    except StorageError:
        raise
    except Exception as exc:
        refused = _blocked(exc)
        if refused is not None:
            raise StorageRefused(f"cannot {doing} {url}: {refused.strerror}") from exc
        if isinstance(exc, FileNotFoundError):
            raise StorageError(f"{missing}: {url}") from exc
        if isinstance(exc, OSError):
            raise StorageError(f"cannot {doing} {url}: {exc.strerror or exc}") from exc
        if _no_credentials(exc):
            raise StorageError(f"cannot {doing} {url}: no credentials for it ({exc})") from exc
        raise


def _open_read(url: str, policy: StoragePolicy, missing: str) -> Any:
    fs, path = locate(url, policy)
    with _errors(url, missing):
        where = _beneath(fs, path, policy)
        return local.open_read(where) if where is not None else fs.open(path, "rb")


def open_binary(url: str, policy: StoragePolicy) -> Any:
    """A seekable binary handle on one object/file (a Parquet reader's input), under the same checks as read_lines;
    the caller closes it (`with`)."""
    return _open_read(url, policy, "not found")


def read_lines(url: str, policy: StoragePolicy, max_line: int = MAX_LINE_BYTES) -> Iterator[tuple[int, bytes]]:
    """(line number from 1, line without its end) for every line, streamed; a UTF-8 BOM is dropped.

    Blank lines are yielded too (as b""): every line of the input must end in a visible state.
    """
    with _open_read(url, policy, "input not found") as handle:
        for number, line in enumerate(bounded_lines(handle, max_line), start=1):
            if number == 1 and line.startswith(BOM):
                line = line[len(BOM) :]
            yield number, line


class OversizeLine(bytes):
    """Stands for a line longer than the limit (its bytes were skipped, never held): it becomes an invalid item."""

    def __new__(cls, length: int) -> OversizeLine:
        line = super().__new__(cls, b"")
        line.length = length
        return line

    length: int


def bounded_lines(handle: Any, max_line: int = MAX_LINE_BYTES, chunk: int = 1 << 16) -> Iterator[bytes]:
    """Lines of a binary stream without their ends, read in chunks: a line over `max_line` bytes is never held
    in memory, it is yielded as an `OversizeLine` (a file of gigabytes without a newline costs one chunk)."""
    buffer = b""
    skipping = 0  # bytes of an oversize line seen so far; 0 when not inside one
    while True:
        data = handle.read(chunk)
        if not data:
            break
        buffer += data
        while True:
            end = buffer.find(b"\n")
            if end < 0:
                break
            if skipping:
                yield OversizeLine(skipping + end)
                skipping = 0
            elif end > max_line:
                yield OversizeLine(end)
            else:
                yield buffer[:end].rstrip(b"\r")
            buffer = buffer[end + 1 :]
        if len(buffer) > max_line or skipping:
            skipping += len(buffer)
            buffer = b""
    if skipping:
        yield OversizeLine(skipping + len(buffer))
    elif buffer:
        yield buffer.rstrip(b"\r")


def join(url: str, name: str) -> str:
    return url.rstrip("/") + "/" + name


#: Bytes a local write_lines gathers per write(2). With the default 8 KiB buffer each ~2 KB result line was a
#: system call of its own: 0.34 s per 100,000 such lines, against 0.08 s with 1 MiB (bench/README.md, Ingestion).
WRITE_BUFFER = 1 << 20


def write_lines(url: str, lines: Iterable[bytes], policy: StoragePolicy, end: bytes = b"\n") -> int:
    """Write one object/file from lines (streamed), each followed by `end`; returns how many were written. A local
    file appears whole or not at all (written to `<name>.partial`, renamed over it), created fresh, never through a
    planted link. `write_lines(url, [data], policy, end=b"")` writes bytes as they are."""
    fs, path = locate(url, policy)
    count = 0
    if not isinstance(fs, LocalFileSystem):
        with _errors(url, "cannot write", "write"), fs.open(path, "wb") as out:
            for line in lines:
                out.write(line + end)
                count += 1
        return count
    _checked("file://" + path + ".partial", policy)
    where = _beneath(fs, path, policy)
    if where is None:  # a local run: the user's own folder
        folder, _, name = path.rpartition("/")
        where = local.Beneath(folder or "/", (name,))
        fs.makedirs(where.root, exist_ok=True)
    try:
        return local.write_whole(where, lines, WRITE_BUFFER, end)
    except FileNotFoundError as exc:
        raise StorageError(f"cannot write {url}: {exc.strerror}") from exc


def write_stream(url: str, write: Callable[[BinaryIO], int], policy: StoragePolicy) -> int:
    """Write one object/file by handing `write` a binary handle (a Parquet writer, say); returns what `write`
    returns. The same rules as write_lines: a local file appears whole or not at all, created fresh, never through a
    planted link; an object store gets the same credentials and endpoint checks."""
    fs, path = locate(url, policy)
    if not isinstance(fs, LocalFileSystem):
        with _errors(url, "cannot write", "write"), fs.open(path, "wb") as out:
            return write(out)
    _checked("file://" + path + ".partial", policy)
    where = _beneath(fs, path, policy)
    if where is None:  # a local run: the user's own folder
        folder, _, name = path.rpartition("/")
        where = local.Beneath(folder or "/", (name,))
        fs.makedirs(where.root, exist_ok=True)
    try:
        with local.open_whole(where, WRITE_BUFFER) as out:
            return write(out)
    except FileNotFoundError as exc:
        raise StorageError(f"cannot write {url}: {exc.strerror}") from exc


def read_text(url: str, policy: StoragePolicy, limit: int | None = None) -> str:
    """A whole small object as text; more than `limit` bytes (default and at most the 16 MiB answer cap) is an
    error, and no more than that is read."""
    limit = MAX_ANSWER if limit is None else min(limit, MAX_ANSWER)
    data = bytearray()
    with _open_read(url, policy, "not found") as handle:
        while len(data) <= limit:
            chunk = handle.read(min(1 << 20, limit + 1 - len(data)))  # a streamed read may return less: loop
            if not chunk:
                break
            data += chunk
    if len(data) > limit:
        raise StorageRefused(f"{url} is larger than the {limit}-byte limit")
    return data.decode()
