"""file:// under a tenant's storage prefix, opened at the moment of use without following any link (REVIEW-3 H3).

Why not a path check: the tenant writes its own prefix (the shared volume it drops input on), so between a check of
a resolved path and an open by name it can swap a directory of that path for a symlink to another tenant's
directory (`renameat2(RENAME_EXCHANGE)` in a loop wins within a few dozen tries). Here the prefix's directory is
opened once and checked (its handle names the prefix itself), then every component below it is opened relative to
the previous one with O_NOFOLLOW, creations and the final rename included (`dir_fd=`): a link met on the way is
refused, never followed, whatever is swapped meanwhile. A path is the realpath taken at check time (so a link
inside the prefix that stays inside keeps working, resolved once), and the file read must be a regular file (a FIFO
or a device would block or never end).
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import BinaryIO

from barge.storage.errors import StorageError, StorageRefused

DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
CREATE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
LINK_ERRORS = (errno.ELOOP, errno.ENOTDIR, errno.EMLINK)


@dataclass(frozen=True)
class Beneath:
    """A path as a prefix directory and the names below it."""

    root: str
    """The prefix's directory (absolute, as the admin's prefix names it)."""
    names: tuple[str, ...]
    """Components below it, the last one the file; none empty, "." or ".."."""

    @property
    def shown(self) -> str:
        return "/".join((self.root.rstrip("/"), *self.names))


def beneath(path: str, roots: Iterable[str]) -> Beneath | None:
    """`path` (absolute, normalised) below the deepest of `roots` that holds it; None if none does."""
    best: str | None = None
    for root in roots:
        root = root.rstrip("/") or "/"
        inside = path == root or path.startswith(root.rstrip("/") + "/")
        if inside and (best is None or len(root) > len(best)):
            best = root
    if best is None:
        return None
    if path == best:  # the prefix names the file itself: its folder is the root
        best, _, name = best.rpartition("/")
        return Beneath(best or "/", (name,))
    names = tuple(path[len(best.rstrip("/")) + 1 :].split("/"))
    if any(n in ("", ".", "..") for n in names):
        raise StorageRefused(f"{path!r} is not a plain path below {best!r}")
    return Beneath(best, names)


def _open_root(root: str) -> int:
    try:
        fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except FileNotFoundError:
        raise
    except OSError as exc:
        raise StorageError(f"cannot open the storage prefix {root}: {exc.strerror}") from exc
    with contextlib.suppress(OSError):  # no /proc (not Linux): the folders above a prefix are the admin's anyway
        actual = os.readlink(f"/proc/self/fd/{fd}")
        if actual != root.rstrip("/") and root != "/":
            os.close(fd)
            raise StorageRefused(f"the storage prefix {root} is reached through a link ({actual}): not used")
    return fd


def _step(fd: int, name: str, shown: str, create: bool) -> int:
    if create:
        with contextlib.suppress(FileExistsError):
            os.mkdir(name, 0o755, dir_fd=fd)
    try:
        return os.open(name, DIR_FLAGS, dir_fd=fd)
    except FileNotFoundError:
        raise
    except OSError as exc:
        if exc.errno in LINK_ERRORS:
            raise StorageRefused(
                f"{shown}: {name!r} is a symbolic link or not a folder; links under a storage prefix are not followed"
            ) from None
        raise StorageError(f"{shown}: cannot open {name!r}: {exc.strerror}") from exc


@contextlib.contextmanager
def folder(where: Beneath, create: bool = False) -> Iterator[int]:
    """A handle on the folder of `where`'s file, reached from the root without following a link. With `create`,
    a missing prefix folder is made first (as writes always did); `_open_root` then refuses it if the path it was
    made at runs through a link."""
    if create and not os.path.isdir(where.root):
        with contextlib.suppress(FileExistsError):
            os.makedirs(where.root, 0o755)
    fd = _open_root(where.root)
    try:
        for name in where.names[:-1]:
            nxt = _step(fd, name, where.shown, create)
            os.close(fd)
            fd = nxt
        yield fd
    finally:
        os.close(fd)


def open_read(where: Beneath) -> BinaryIO:
    """The file for reading (FileNotFoundError if it is not there); a link, a FIFO or a device is refused."""
    with folder(where) as parent:
        try:
            fd = os.open(where.names[-1], READ_FLAGS, dir_fd=parent)
        except OSError as exc:
            if exc.errno in LINK_ERRORS:
                raise StorageRefused(f"{where.shown} is a symbolic link: not followed under a storage prefix") from None
            raise
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise StorageRefused(f"{where.shown} is not a regular file")
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


@contextlib.contextmanager
def open_whole(where: Beneath, buffering: int) -> Iterator[BinaryIO]:
    """A binary handle on `<name>.partial`, renamed over `<name>` when the block ends without an error (a local
    write appears whole or not at all); folders are created on the way. On an error the partial file is removed."""
    name = where.names[-1]
    tmp = name + ".partial"
    with folder(where, create=True) as parent:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp, dir_fd=parent)  # a planted link is removed itself, never what it points to
        fd = os.open(tmp, CREATE_FLAGS, 0o644, dir_fd=parent)
        try:
            with os.fdopen(fd, "wb", buffering=buffering) as out:
                yield out
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp, dir_fd=parent)
            raise
        os.replace(tmp, name, src_dir_fd=parent, dst_dir_fd=parent)  # replaces a link at `name`, not its target


def write_whole(where: Beneath, lines: Iterable[bytes], buffering: int, end: bytes = b"\n") -> int:
    """Write the file from lines (each followed by `end`) through open_whole; returns how many lines were written."""
    count = 0
    with open_whole(where, buffering) as out:
        for line in lines:
            out.write(line + end)
            count += 1
    return count
