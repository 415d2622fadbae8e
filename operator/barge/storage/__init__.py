"""Input and output through fsspec (file, s3, az, gs, http), streamed, with path safety.

Why here and nowhere else: every byte Barge reads from or writes to a user's storage passes through these
functions, so the safety rules (allowed roots for file://, no `..` escapes, no link-local or metadata
addresses over http) are enforced in one place.
"""

from __future__ import annotations

import ipaddress
import os
import socket
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import fsspec
from fsspec.implementations.local import LocalFileSystem

BOM = b"\xef\xbb\xbf"
REMOTE_SCHEMES = {"s3": "s3", "az": "az", "abfs": "abfs", "gs": "gcs", "gcs": "gcs", "http": "http", "https": "https"}
METADATA_HOSTS = {"metadata.google.internal", "metadata", "instance-data"}


class StorageError(Exception):
    """A location Barge will not or cannot use; the message says which and why."""


@dataclass(frozen=True)
class StoragePolicy:
    """Where file:// may point, and how relative paths resolve."""

    allowed_roots: tuple[Path, ...] | None = None
    """None: any local path (local runs). Otherwise file:// must resolve inside one of these (operator mode)."""
    base_dir: Path | None = None
    """Relative paths resolve against this (the manifest's folder in local runs)."""
    options: dict[str, dict[str, Any]] = field(default_factory=dict)
    """fsspec storage options per protocol (credentials from a Secret in operator mode)."""


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
    resolved = Path(os.path.realpath(path))  # follows symlinks: a link cannot smuggle a path out of a root
    if policy.allowed_roots is not None and not any(
        resolved == root.resolve() or resolved.is_relative_to(root.resolve()) for root in policy.allowed_roots
    ):
        roots = ", ".join(str(r) for r in policy.allowed_roots) or "(none configured)"
        raise StorageError(f"{path_text!r} resolves outside the allowed file roots: {roots}")
    return resolved


def locate(url: str, policy: StoragePolicy) -> tuple[Any, str]:
    """(fsspec filesystem, path) for a URL, after the safety checks."""
    parsed = urlparse(url)
    scheme = parsed.scheme.lower()
    if scheme in ("", "file") or (len(scheme) == 1 and url[1:3] == ":\\"):
        text = parsed.path if scheme == "file" else url
        if scheme == "file" and parsed.netloc not in ("", "localhost"):
            raise StorageError(f"file:// URLs must not name a host: {url!r}")
        return fsspec.filesystem("file"), str(_local(text, policy))
    if scheme not in REMOTE_SCHEMES:
        raise StorageError(f"unsupported URL scheme {scheme!r} in {url!r}: use file://, s3://, az://, gs://, https://")
    protocol = REMOTE_SCHEMES[scheme]
    if ".." in parsed.path.split("/"):
        raise StorageError(f"'..' is not allowed in {url!r}")
    if protocol in ("http", "https"):
        _check_http_host(parsed.hostname or "")
        return fsspec.filesystem(protocol, **policy.options.get(protocol, {})), url
    try:
        fs = fsspec.filesystem(protocol, **policy.options.get(protocol, {}))
    except ImportError as exc:
        extra = " (pip install 'barge-operator[gcs]')" if protocol == "gcs" else ""
        raise StorageError(f"no filesystem for {scheme}:// is installed{extra}: {exc}") from exc
    return fs, f"{parsed.netloc}{parsed.path}"


def read_lines(url: str, policy: StoragePolicy) -> Iterator[tuple[int, bytes]]:
    """(line number from 1, line without its end) for every line, streamed; a UTF-8 BOM is dropped.

    Blank lines are yielded too (as b""): every line of the input must end in a visible state.
    """
    fs, path = locate(url, policy)
    try:
        handle = fs.open(path, "rb")
    except FileNotFoundError as exc:
        raise StorageError(f"input not found: {url}") from exc
    except OSError as exc:
        raise StorageError(f"cannot open {url}: {exc}") from exc
    with handle:
        for number, raw in enumerate(handle, start=1):
            line = raw.rstrip(b"\n").rstrip(b"\r")
            if number == 1 and line.startswith(BOM):
                line = line[len(BOM) :]
            yield number, line


def join(url: str, name: str) -> str:
    return url.rstrip("/") + "/" + name


def write_lines(url: str, lines: Iterable[bytes], policy: StoragePolicy) -> int:
    """Write one object/file from lines (streamed); returns how many were written."""
    fs, path = locate(url, policy)
    local = isinstance(fs, LocalFileSystem)
    if local:
        fs.makedirs(path.rsplit("/", 1)[0], exist_ok=True)
    count = 0
    tmp = path + ".partial" if local else path
    with fs.open(tmp, "wb") as out:
        for line in lines:
            out.write(line + b"\n")
            count += 1
    if tmp != path:
        fs.mv(tmp, path)  # local writes appear whole or not at all
    return count


def read_text(url: str, policy: StoragePolicy) -> str:
    fs, path = locate(url, policy)
    with fs.open(path, "rb") as handle:
        return bytes(handle.read()).decode()
