"""file:// under a tenant's prefix is opened at the moment of use relative to the prefix's directory handle, every
component with O_NOFOLLOW (REVIEW-3 H3): a tenant who swaps a directory of its own path for a symlink to another
tenant's directory (renameat2 RENAME_EXCHANGE, in a loop, as fast as it can) never gets the other tenant's input
read into its job, nor its results written over the other tenant's.

Before the fix the path was resolved and checked, then opened again by name: the swap won within a few dozen tries
(REVIEW-3 measured 7 for a read, 36 for a write)."""

from __future__ import annotations

import ctypes
import multiprocessing as mp
import os
from pathlib import Path

import pytest

from barge.storage import StorageError, StoragePolicy, read_lines, read_text, write_lines

TRIES = 3000  # attempts per direction; the old code lost within ~40 (each try is ~0.1 ms of work)
RENAME_EXCHANGE = 2

libc = ctypes.CDLL(None, use_errno=True)
pytestmark = pytest.mark.skipif(not hasattr(libc, "renameat2"), reason="needs glibc renameat2")


def _exchange(a: str, b: str) -> None:
    if libc.renameat2(-100, a.encode(), -100, b.encode(), RENAME_EXCHANGE) != 0:
        raise OSError(ctypes.get_errno(), "renameat2")


def _flipper(root: str, stop: mp.synchronize.Event, ready: mp.synchronize.Event) -> None:
    ready.set()
    while not stop.is_set():
        _exchange(f"{root}/acme/in", f"{root}/acme/in-swap")
        _exchange(f"{root}/acme/out", f"{root}/acme/out-swap")


@pytest.fixture
def volume(tmp_path: Path) -> Path:
    """The shared volume of the README's `file:///data/{tenant}/` setup, acme holding two spare links."""
    root = tmp_path / "data"
    for d in ("acme/in", "acme/out", "globex/in", "globex/out"):
        (root / d).mkdir(parents=True)
    (root / "acme/in/claims.jsonl").write_text('{"id":1,"text":"acme own line"}\n')
    (root / "globex/in/claims.jsonl").write_text('{"id":1,"text":"GLOBEX SECRET CLAIM"}\n')
    (root / "globex/out/results.jsonl").write_text("globex results\n")
    os.symlink(root / "globex/in", root / "acme/in-swap")
    os.symlink(root / "globex/out", root / "acme/out-swap")
    return root


def test_swapping_a_directory_for_a_symlink_never_crosses_tenants(volume: Path) -> None:
    acme = StoragePolicy(prefixes=(f"file://{volume}/acme/",))
    ctx = mp.get_context("fork")
    stop, ready = ctx.Event(), ctx.Event()
    flipper = ctx.Process(target=_flipper, args=(str(volume), stop, ready), daemon=True)
    flipper.start()
    ready.wait(10)
    stolen = overwritten = own = refused = 0
    try:
        for _ in range(TRIES):
            try:
                lines = list(read_lines(f"file://{volume}/acme/in/claims.jsonl", acme))
                text = read_text(f"file://{volume}/acme/in/claims.jsonl", acme, limit=1000)
            except (StorageError, OSError):  # refused, or the path vanished mid-swap: never the other's bytes
                refused += 1
                continue
            stolen += b"GLOBEX" in lines[0][1] or "GLOBEX" in text
            own += b"acme own" in lines[0][1]
        for _ in range(TRIES):
            try:
                write_lines(f"file://{volume}/acme/out/results.jsonl", [b"written by acme's job"], acme)
            except (StorageError, OSError):
                refused += 1
            if (volume / "globex/out/results.jsonl").read_text() != "globex results\n":
                overwritten += 1
                break
    finally:
        stop.set()
        flipper.join(10)
    assert stolen == 0, f"globex's input was read through acme's job {stolen} times"
    assert overwritten == 0, "globex's results.jsonl was replaced by acme's job"
    assert sorted(os.listdir(volume / "globex/out")) == ["results.jsonl"], "nothing was created in globex's folder"
    assert own + refused > 0


def test_a_symlinked_directory_under_the_prefix_is_refused(volume: Path) -> None:
    """Without the race: a link anywhere under the prefix is not followed (the check is the open)."""
    acme = StoragePolicy(prefixes=(f"file://{volume}/acme/",))
    with pytest.raises(StorageError):
        list(read_lines(f"file://{volume}/acme/in-swap/claims.jsonl", acme))
    with pytest.raises(StorageError):
        write_lines(f"file://{volume}/acme/out-swap/results.jsonl", [b"x"], acme)
    assert (volume / "globex/out/results.jsonl").read_text() == "globex results\n"
    own = next(iter(read_lines(f"file://{volume}/acme/in/claims.jsonl", acme)))
    assert own == (1, b'{"id":1,"text":"acme own line"}')
    assert write_lines(f"file://{volume}/acme/out/sub/results.jsonl", [b"ok"], acme) == 1
    assert (volume / "acme/out/sub/results.jsonl").read_text() == "ok\n"
