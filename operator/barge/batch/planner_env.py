"""What a planner process may see of the operator: a scrubbed environment, no new privileges, and no file outside
Python's own where the kernel has Landlock.

Why apart: planners render tenants' templates (sandbox.py), and the sandbox is the only wall between a template
and the operator's process. Behind it there was nothing: the planner server (zygote.py) inherited the operator's
whole environment (the ledger DSN with its password, provider keys, KUBERNETES_SERVICE_HOST) and ran as the same
UID, able to read the ServiceAccount token, with which one sandbox escape would create a Deployment in any
namespace (REVIEW-3 M8). Now, set once in the server and inherited by every fork:

| what                      | how                                                        | where it may not hold   |
| ------------------------- | ---------------------------------------------------------- | ----------------------- |
| environment               | `server_env`: only KEEP and `LC_*` pass; no BARGE_*,       | never                   |
|                           | KUBERNETES_*, *_KEY, cloud or proxy variables              |                         |
| no new privileges         | prctl(PR_SET_NO_NEW_PRIVS): no setuid, no file caps        | never (Linux)           |
| files                     | Landlock: read and execute beneath Python's own paths (the | kernels before 5.13, or |
|                           | interpreter, the stdlib, site-packages, Barge) and shared  | Landlock not enabled:   |
|                           | libraries (EXTRA_READ), nothing                            |                         |
|                           | else; no write, no truncate anywhere. The SA token under   | logged once, and the    |
|                           | /var/run/secrets, the ledger's SQLite file and every other | other two still hold    |
|                           | path are unreadable. Files already open (the pipes) work.  |                         |
| network                   | Landlock ABI 4+: no TCP connect or bind; ABI 6+: no        | older kernels           |
|                           | abstract Unix socket outside the planners                  |                         |

Running the planners in a separate container (no token, its own UID) would be stronger; this needs no chart change.
"""

from __future__ import annotations

import ctypes
import logging
import os
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

log = logging.getLogger("barge.batch")

#: The only environment variables a planner server gets (plus LC_*): what the interpreter needs to start and import.
KEEP = frozenset(
    {
        "PATH",
        "LANG",
        "LANGUAGE",
        "TZ",
        "PYTHONPATH",
        "PYTHONHOME",
        "PYTHONDONTWRITEBYTECODE",
        "PYTHONUNBUFFERED",
        "PYTHONHASHSEED",
        "PYTHONIOENCODING",
        "PYTHONUTF8",
        "VIRTUAL_ENV",
    }
)
#: Never readable by a planner, even if below one of Python's paths (an image that installs Barge at /).
SECRET_DIRS = ("/var/run/secrets", "/run/secrets")
#: Read-only extras: the shared libraries an extension module imported late links to (libz for binascii ...), and
#: time zone data (libc reads it at the first local-time call).
EXTRA_READ = (
    "/lib",
    "/lib64",
    "/usr/lib",
    "/usr/lib64",
    "/usr/local/lib",
    "/etc/ld.so.cache",
    "/usr/share/zoneinfo",
    "/etc/localtime",
)

_PR_SET_NO_NEW_PRIVS = 38
_SYS_CREATE_RULESET, _SYS_ADD_RULE, _SYS_RESTRICT_SELF = 444, 445, 446  # the same on x86_64 and arm64
_CREATE_RULESET_VERSION = 1
_RULE_PATH_BENEATH = 1
_EXECUTE, _READ_FILE, _READ_DIR = 1 << 0, 1 << 2, 1 << 3
_FILE_RIGHTS = (1 << 0) | (1 << 1) | (1 << 2) | (1 << 14)  # execute, write, read, truncate: those a file takes
_NET_TCP = (1 << 0) | (1 << 1)  # bind_tcp, connect_tcp
_SCOPE_ABSTRACT_UNIX = 1 << 0


def server_env(environ: Mapping[str, str]) -> dict[str, str]:
    """The environment a planner server starts with: KEEP and LC_* of `environ`, nothing else."""
    return {k: v for k, v in environ.items() if k in KEEP or k.startswith("LC_")}


@dataclass(frozen=True)
class Confinement:
    no_new_privs: bool
    landlock_abi: int
    """0: not confined to Python's paths (no Landlock here)."""


class _PathBeneath(ctypes.Structure):
    _pack_ = 1
    _fields_ = (("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32))


def _handled(abi: int) -> int:
    """Every filesystem right the kernel's Landlock ABI knows: all denied unless a rule allows them."""
    rights = (1 << 13) - 1  # ABI 1: execute ... make_sym
    if abi >= 2:
        rights |= 1 << 13  # refer
    if abi >= 3:
        rights |= 1 << 14  # truncate
    if abi >= 5:
        rights |= 1 << 15  # ioctl_dev
    return rights


def python_paths() -> list[str]:
    """Where this interpreter imports from, without any directory that holds a secret directory."""
    seen: list[str] = []
    for raw in (sys.prefix, sys.exec_prefix, sys.base_prefix, sys.base_exec_prefix, *sys.path):
        if not raw:
            continue  # '' is the working directory: not Python's
        path = os.path.realpath(raw)
        if path == "/" or any(d == path or d.startswith(path.rstrip("/") + "/") for d in SECRET_DIRS):
            continue
        if os.path.exists(path) and path not in seen:
            seen.append(path)
    return seen


def confine(read: Iterable[str] | None = None) -> Confinement:
    """Confine this process and all it forks from now on: no new privileges, and where the kernel allows, reading
    only beneath `read` (default: Python's paths and EXTRA_READ). Irreversible."""
    libc = ctypes.CDLL(None, use_errno=True)
    nnp = libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) == 0
    abi = libc.syscall(_SYS_CREATE_RULESET, None, ctypes.c_size_t(0), _CREATE_RULESET_VERSION)
    if not nnp or abi <= 0:
        log.warning("planner processes are not confined to Python's files (no Landlock on this kernel)")
        return Confinement(nnp, 0)
    # struct landlock_ruleset_attr: filesystem rights; TCP bind and connect from ABI 4 (no rule: all denied);
    # abstract Unix sockets outside the domain from ABI 6. Passed at the size this kernel knows.
    attr = (ctypes.c_uint64 * 3)(_handled(abi), _NET_TCP if abi >= 4 else 0, _SCOPE_ABSTRACT_UNIX if abi >= 6 else 0)
    size = 24 if abi >= 6 else 16 if abi >= 4 else 8
    ruleset = libc.syscall(_SYS_CREATE_RULESET, ctypes.byref(attr), ctypes.c_size_t(size), 0)
    if ruleset < 0:
        log.warning("Landlock ruleset refused (errno %d): planners not confined to Python's files", ctypes.get_errno())
        return Confinement(nnp, 0)
    try:
        for path in [*(read if read is not None else python_paths()), *EXTRA_READ]:
            try:
                fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
            except OSError:
                continue
            try:
                rights = _EXECUTE | _READ_FILE | (0 if not os.path.isdir(path) else _READ_DIR)
                rule = _PathBeneath(rights & (_FILE_RIGHTS if not os.path.isdir(path) else ~0), fd)
                libc.syscall(_SYS_ADD_RULE, ruleset, _RULE_PATH_BENEATH, ctypes.byref(rule), 0)
            finally:
                os.close(fd)
        if libc.syscall(_SYS_RESTRICT_SELF, ruleset, 0) != 0:
            log.warning("Landlock restrict_self failed (errno %d): planners not confined", ctypes.get_errno())
            return Confinement(nnp, 0)
    finally:
        os.close(ruleset)
    return Confinement(nnp, int(abi))
