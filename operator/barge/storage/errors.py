"""The storage layer's two errors (apart so every module of the package can raise them)."""

from __future__ import annotations


class StorageError(Exception):
    """A location Barge will not or cannot use; the message says which and why."""


class StorageRefused(StorageError):
    """A location the policy forbids or an object over its size limit: the request's fault, never worth retrying."""
