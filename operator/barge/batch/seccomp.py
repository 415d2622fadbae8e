"""A seccomp-bpf filter for planner processes: after its setup, a planner may make no socket, connect, exec,
trace or read another process, mount, or enter or make namespaces. Each refused call fails with EPERM
(SECCOMP_RET_ERRNO), so an escaped template sees an error and the planner keeps answering; it is never killed.

Why: planners render tenants' templates (sandbox.py); planner_env.py already takes away the operator's environment,
new privileges and (under Landlock) every file outside Python's own. A planner still could make sockets (UDP, Unix
sockets by path, TCP where Landlock is older than ABI 4) and exec programs (REVIEW-3 M8). A planner needs no new
socket or process image: it talks to the operator over the pipes it was forked with.

Why not libseccomp's bindings: the image purges libseccomp2 with apt (tools/image.py, APT_ONLY), and the PyPI
bindings (pyseccomp) need libseccomp.so.2 at run time. The program is small enough to write here: classic BPF over
`struct seccomp_data` (linux/seccomp.h), installed with prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER) under
no_new_privs (set by planner_env.confine, and again here).

The program, for the machine's architecture only (x86_64, aarch64; elsewhere no filter, logged once):

- a call from another architecture (x86_64's 32-bit int 0x80 entry, the x32 ABI's syscall numbers): EPERM;
- `clone` with a namespace flag (CLONE_NEW*): EPERM; a plain fork or thread is allowed;
- `clone3`: ENOSYS (its flags are in memory a filter cannot read; glibc then falls back to `clone`);
- every syscall in BLOCKED: EPERM;
- anything else: allowed.

Numbers: x86_64 from arch/x86/entry/syscalls/syscall_64.tbl (asm/unistd_64.h), aarch64 from the generic table
include/uapi/asm-generic/unistd.h (the io_uring and mount-API numbers, 425 and up, are the same on both).
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import logging
import os
import platform
import sys
from dataclasses import dataclass

log = logging.getLogger("barge.batch")

#: Syscalls a planner may not make, by name (kernel's __NR_<name>): x86_64 and aarch64 numbers.
BLOCKED: dict[str, tuple[int, int]] = {
    # sockets: a planner has its pipes and needs no other channel (every family: AF_INET, AF_UNIX, netlink ...)
    "socket": (41, 198),
    "socketpair": (53, 199),
    "connect": (42, 203),
    "bind": (49, 200),
    "listen": (50, 201),
    "accept": (43, 202),
    "accept4": (288, 242),
    # other processes
    "ptrace": (101, 117),
    "process_vm_readv": (310, 270),
    "process_vm_writev": (311, 271),
    # new programs
    "execve": (59, 221),
    "execveat": (322, 281),
    # mounts and namespaces
    "mount": (165, 40),
    "umount2": (166, 39),
    "pivot_root": (155, 41),
    "open_tree": (428, 428),
    "move_mount": (429, 429),
    "fsopen": (430, 430),
    "fsconfig": (431, 431),
    "fsmount": (432, 432),
    "fspick": (433, 433),
    "mount_setattr": (442, 442),
    "unshare": (272, 97),
    "setns": (308, 268),
    # the kernel's key store
    "keyctl": (250, 219),
    "add_key": (248, 217),
    "request_key": (249, 218),
    # io_uring: its SOCKET, CONNECT and ACCEPT operations would bypass the filter
    "io_uring_setup": (425, 425),
    "io_uring_enter": (426, 426),
    "io_uring_register": (427, 427),
}
CLONE = (56, 220)
CLONE3 = (435, 435)
#: CLONE_NEWNS | CLONE_NEWCGROUP | CLONE_NEWUTS | CLONE_NEWIPC | CLONE_NEWUSER | CLONE_NEWPID | CLONE_NEWNET
CLONE_NEW_FLAGS = 0x00020000 | 0x02000000 | 0x04000000 | 0x08000000 | 0x10000000 | 0x20000000 | 0x40000000
#: AUDIT_ARCH_* (linux/audit.h) and the column of BLOCKED, by platform.machine(); little-endian only.
ARCHES = {"x86_64": (0xC000003E, 0), "amd64": (0xC000003E, 0), "aarch64": (0xC00000B7, 1), "arm64": (0xC00000B7, 1)}
X32_SYSCALL_BIT = 0x40000000  # x86_64: numbers of the x32 ABI, same AUDIT_ARCH

# classic BPF (linux/filter.h, linux/bpf_common.h) and seccomp (linux/seccomp.h)
_LD_W_ABS = 0x00 | 0x00 | 0x20  # BPF_LD | BPF_W | BPF_ABS
_JEQ, _JGE, _JSET = 0x05 | 0x10, 0x05 | 0x30, 0x05 | 0x40  # BPF_JMP | BPF_JEQ/BPF_JGE/BPF_JSET | BPF_K
_RET = 0x06  # BPF_RET | BPF_K
RET_ALLOW = 0x7FFF0000
RET_ERRNO = 0x00050000
_NR, _ARCH, _ARG0 = 0, 4, 16  # offsets in struct seccomp_data (args[0]'s low 32 bits on little-endian)
_PR_SET_NO_NEW_PRIVS, _PR_SET_SECCOMP, _SECCOMP_MODE_FILTER = 38, 22, 2


class _Filter(ctypes.Structure):
    _fields_ = (("code", ctypes.c_uint16), ("jt", ctypes.c_uint8), ("jf", ctypes.c_uint8), ("k", ctypes.c_uint32))


class _Prog(ctypes.Structure):
    _fields_ = (("len", ctypes.c_ushort), ("filter", ctypes.POINTER(_Filter)))


@dataclass(frozen=True)
class Result:
    applied: bool
    reason: str = ""
    """Why not: the architecture, or the errno the kernel (or the container runtime's profile) answered."""


def program(machine: str | None = None) -> list[tuple[int, int, int, int]] | None:
    """The filter as (code, jt, jf, k) instructions for `machine` (default: this one); None where there is no table."""
    arch = ARCHES.get(machine or platform.machine()) if sys.byteorder == "little" else None
    if arch is None:
        return None
    audit, column = arch
    blocked = sorted({numbers[column] for numbers in BLOCKED.values()})
    # Labels are resolved below: ("jeq", k, target) jumps to `target` when A == k and falls through otherwise.
    code: list[tuple[str, int, str]] = [("ld", _ARCH, ""), ("jne", audit, "deny"), ("ld", _NR, "")]
    if column == 0:
        code.append(("jge", X32_SYSCALL_BIT, "deny"))
    code += [("jeq", CLONE[column], "clone"), ("jeq", CLONE3[column], "nosys")]
    code += [("jeq", nr, "deny") for nr in blocked]
    code += [("ret", RET_ALLOW, ""), ("label:clone", 0, ""), ("ld", _ARG0, ""), ("jset", CLONE_NEW_FLAGS, "deny")]
    code += [("ret", RET_ALLOW, ""), ("label:deny", 0, ""), ("ret", RET_ERRNO | errno.EPERM, "")]
    code += [("label:nosys", 0, ""), ("ret", RET_ERRNO | errno.ENOSYS, "")]
    at: dict[str, int] = {}
    real = [c for c in code if not c[0].startswith("label:")]
    n = 0
    for op, _, _ in code:
        if op.startswith("label:"):
            at[op[6:]] = n
        else:
            n += 1
    out: list[tuple[int, int, int, int]] = []
    for i, (op, k, target) in enumerate(real):
        if op == "ld":
            out.append((_LD_W_ABS, 0, 0, k))
        elif op == "ret":
            out.append((_RET, 0, 0, k))
        else:
            off = at[target] - i - 1
            assert 0 <= off < 256, "a jump past classic BPF's 8-bit offset"
            jump = {"jeq": _JEQ, "jne": _JEQ, "jge": _JGE, "jset": _JSET}[op]
            out.append((jump, 0, off, k) if op == "jne" else (jump, off, 0, k))
    return out


def install(machine: str | None = None) -> Result:
    """Install the filter on this thread and all it forks from now on (irreversible). Never raises: where the
    kernel or a container runtime refuses filters, the Result says why and nothing changed."""
    code = program(machine)
    if code is None:
        return Result(False, f"no syscall table for {machine or platform.machine()} ({sys.byteorder}-endian)")
    filters = (_Filter * len(code))(*(_Filter(*c) for c in code))
    prog = _Prog(len(code), filters)
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)  # required without CAP_SYS_ADMIN; already set by confine()
    if libc.prctl(_PR_SET_SECCOMP, _SECCOMP_MODE_FILTER, ctypes.byref(prog), 0, 0) != 0:
        err = ctypes.get_errno()
        return Result(False, f"prctl(PR_SET_SECCOMP) refused: {errno.errorcode.get(err, err)}")
    return Result(True)


def probe() -> Result:
    """Whether planners will get the filter, tried in a throwaway fork (this process stays unfiltered); logs a
    warning when they will not. The planner server calls it once at its start."""
    if program() is None:
        outcome = install()  # says why without installing anything
    else:
        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:  # pragma: no cover (the fork)
            code = 1
            with contextlib.suppress(BaseException):
                said = install()
                os.write(write, said.reason.encode()[:512])
                code = 0 if said.applied else 1
            os._exit(code)
        os.close(write)
        with os.fdopen(read, "rb") as pipe:
            reason = pipe.read().decode(errors="replace")
        status = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
        outcome = Result(status == 0, reason if status else "")
    if not outcome.applied:
        log.warning("planner processes run without a seccomp filter (%s): sockets and exec stay open", outcome.reason)
    return outcome
