"""Planner processes forked from the warm planner server (batch/zygote.py): each job still plans in a process of
its own, with its limits, at low priority, and a planner that dies, hangs or is killed ends as a PlanError with
the reason, as before. The server itself is real (a Python process forking real children); nothing is mocked."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from barge.batch import planner, zygote
from barge.batch.render import PlanError
from barge.ledger import Ledger

JOB = "ns/planner/1"
SPEC = {
    "provider": {"type": "anthropic", "model": "claude-haiku-4-5", "secretRef": {"name": "k"}},
    "input": {"url": "unused"},
    "output": {"url": "unused"},
    "request": {"system": "Classify.", "template": "{{ text }}", "maxTokens": 50},
}


def job(template: str = "{{ text }}") -> planner.PlanInput:
    spec = json.loads(json.dumps(SPEC))
    spec["request"]["template"] = template
    return planner.PlanInput(spec, "2026-11-30", "t", "claude-haiku-4-5", "anthropic")


def lines(n: int) -> Iterator[tuple[int, bytes]]:
    return iter([(i + 1, json.dumps({"id": f"c{i:04d}", "text": f"claim {i}"}).encode()) for i in range(n)])


@pytest.fixture
def ledger(tmp_path: Path) -> Ledger:
    led = Ledger(f"sqlite:///{tmp_path / 'ledger.db'}")
    led.ensure_job(JOB, "h", tenant="t", model="claude-haiku-4-5")
    return led


def stat(pid: int) -> list[str]:
    """Fields of /proc/<pid>/stat after the command name (field 3, the state, is index 0)."""
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()


def alive(pid: int) -> bool:
    try:
        return stat(pid)[0] != "Z"
    except FileNotFoundError:
        return False


def test_jobs_plan_in_forked_processes_that_each_get_their_own_rows(ledger: Ledger) -> None:
    async def main() -> list[int]:
        keys = [f"{JOB}-{i}" for i in range(6)]
        for key in keys:
            ledger.ensure_job(key, "h", tenant="t")
        plans = [planner.plan(key, job(), lambda n=50 + i: lines(n), ledger) for i, key in enumerate(keys)]
        return await asyncio.gather(*plans)

    assert asyncio.run(main()) == [50, 51, 52, 53, 54, 55]
    assert ledger.counts(f"{JOB}-5")["pending"] == 55


def test_a_planner_is_a_niced_child_of_the_server_not_of_the_operator() -> None:
    async def main() -> tuple[int, list[str], int]:
        proc = await zygote.SERVER.start()
        try:
            return proc.pid, stat(proc.pid), os.getpid()
        finally:
            proc.stdin.close()  # no header: the child ends (with an error), and says so in its exit code
            code = await proc.wait()
            proc.close()
            assert code != 0

    pid, fields, me = asyncio.run(main())
    server = zygote.SERVER._proc
    assert server is not None
    assert int(fields[1]) == server.pid != me  # ppid
    assert int(fields[16]) >= min(19, os.getpriority(os.PRIO_PROCESS, 0) + 10)  # nice
    assert not alive(pid)


def test_a_planner_over_its_cpu_limit_is_stopped_and_the_job_not_admitted(ledger: Ledger) -> None:
    burn = "{% for i in range(600) %}{% for j in range(600) %}{% endfor %}{% endfor %}{{ text }}"
    limits = planner.PlanLimits(job_cpu_seconds=1, line_seconds=30.0)
    with pytest.raises(PlanError) as caught:
        asyncio.run(planner.plan(JOB, job(burn), lambda: lines(400), ledger, limits))
    assert "more than 1 CPU seconds" in str(caught.value)
    assert caught.value.permanent


def test_a_planner_over_its_wall_time_is_killed(ledger: Ledger) -> None:
    def slow() -> Iterator[tuple[int, bytes]]:
        yield from lines(3)
        time.sleep(3)  # input that stalls (a storage read that hangs)
        yield from []

    seen: list[int] = []
    real_start = zygote.SERVER.start

    async def start(*limits: int) -> zygote.Planner:
        proc = await real_start(*limits)
        seen.append(proc.pid)
        return proc

    zygote.SERVER.start = start  # type: ignore[method-assign]
    try:
        with pytest.raises(PlanError) as caught:
            asyncio.run(planner.plan(JOB, job(), slow, ledger, planner.PlanLimits(wall_seconds=1.0)))
    finally:
        del zygote.SERVER.start
    assert "longer than 1 s" in str(caught.value)
    assert not caught.value.permanent
    assert seen
    assert not alive(seen[0])


def test_a_planner_killed_from_outside_says_so(ledger: Ledger) -> None:
    """The kernel's OOM killer (here: a SIGKILL from the test) ends a planner: the job's step fails, retryable."""

    def slow() -> Iterator[tuple[int, bytes]]:
        yield from lines(3)
        time.sleep(1.5)
        yield from lines(2)

    real_start = zygote.SERVER.start

    async def start(*limits: int) -> zygote.Planner:
        proc = await real_start(*limits)
        asyncio.get_running_loop().call_later(0.5, os.kill, proc.pid, signal.SIGKILL)
        return proc

    zygote.SERVER.start = start  # type: ignore[method-assign]
    try:
        with pytest.raises(PlanError) as caught:
            asyncio.run(planner.plan(JOB, job(), slow, ledger))
    finally:
        del zygote.SERVER.start
    assert "planning stopped (killed)" in str(caught.value)
    assert not caught.value.permanent


def test_a_dead_server_is_started_again(ledger: Ledger) -> None:
    zygote.SERVER.warm()
    first = zygote.SERVER._proc
    assert first is not None
    first.kill()
    first.wait()
    assert asyncio.run(planner.plan(JOB, job(), lambda: lines(7), ledger)) == 7
    second = zygote.SERVER._proc
    assert second is not None
    assert second.pid != first.pid
    assert second.poll() is None


def test_a_server_started_past_fd_1023_still_plans(ledger: Ledger) -> None:
    """The server's socket keeps the parent's fd number: a busy parent (here, 1,100 open files) hands it a number past
    select()'s 1023, which once ended the server before its first fork (the whole suite's CI run, 6 failures)."""
    zygote.SERVER._stop()
    held = [os.open(os.devnull, os.O_RDONLY) for _ in range(1100)]
    try:
        zygote.SERVER.warm()
        assert zygote.SERVER._sock is not None
        assert zygote.SERVER._sock.fileno() > 1023
    finally:
        for fd in held:
            os.close(fd)
    assert asyncio.run(planner.plan(JOB, job(), lambda: lines(5), ledger)) == 5
