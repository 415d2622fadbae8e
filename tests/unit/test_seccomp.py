"""The planners' seccomp program (batch/seccomp.py), run by a small classic-BPF interpreter on `struct
seccomp_data` for both tables: x86_64 here is also tried for real (tests/integration/test_planner_confinement.py);
aarch64 only here."""

from __future__ import annotations

import errno

import pytest

from barge.batch import seccomp

AUDIT = {"x86_64": 0xC000003E, "aarch64": 0xC00000B7}


def run(code: list[tuple[int, int, int, int]], arch: int, nr: int, arg0: int = 0) -> int:
    data = {0: nr, 4: arch, 16: arg0 & 0xFFFFFFFF}
    a = pc = 0
    while True:
        op, jt, jf, k = code[pc]
        pc += 1
        if op == 0x20:
            a = data[k]
        elif op == 0x06:
            return k
        else:
            hit = {0x15: a == k, 0x35: a >= k, 0x45: bool(a & k)}[op]
            pc += jt if hit else jf


@pytest.mark.parametrize("machine", ["x86_64", "aarch64"])
def test_the_program_refuses_each_blocked_call_and_allows_the_rest(machine: str) -> None:
    code = seccomp.program(machine)
    assert code is not None
    column = 0 if machine == "x86_64" else 1
    deny, allow = seccomp.RET_ERRNO | errno.EPERM, seccomp.RET_ALLOW
    for name, numbers in seccomp.BLOCKED.items():
        assert run(code, AUDIT[machine], numbers[column]) == deny, name
    read, openat, mmap = {"x86_64": (0, 257, 9), "aarch64": (63, 56, 222)}[machine]
    for nr in (read, openat, mmap):
        assert run(code, AUDIT[machine], nr) == allow
    clone = seccomp.CLONE[column]
    assert run(code, AUDIT[machine], clone, 0x01200011) == allow  # glibc's fork: CHILD_SETTID|CHILD_CLEARTID|SIGCHLD
    assert run(code, AUDIT[machine], clone, 0x003D0F00) == allow  # a thread
    assert run(code, AUDIT[machine], clone, 0x10000000 | 17) == deny  # CLONE_NEWUSER
    assert run(code, AUDIT[machine], seccomp.CLONE3[column]) == seccomp.RET_ERRNO | errno.ENOSYS
    other = AUDIT["aarch64" if machine == "x86_64" else "x86_64"]
    assert run(code, other, read) == deny  # a call of another architecture (x86_64's int 0x80: i386 numbers)
    assert run(code, 0x40000003, 0) == deny  # AUDIT_ARCH_I386


def test_x32_numbers_are_refused_on_x86_64() -> None:
    code = seccomp.program("x86_64")
    assert code is not None
    assert run(code, AUDIT["x86_64"], seccomp.X32_SYSCALL_BIT | 41) == seccomp.RET_ERRNO | errno.EPERM


def test_another_architecture_gets_no_filter_and_says_so() -> None:
    assert seccomp.program("riscv64") is None
    result = seccomp.install("riscv64")
    assert not result.applied
    assert "riscv64" in result.reason
