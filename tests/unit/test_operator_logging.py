"""The operator's log lines are written by a thread of their own (operator/main.py): each line still carries its
time, logger, level and message once, tracebacks included, and nothing queued is lost when the operator stops."""

from __future__ import annotations

import re
import subprocess
import sys

SCRIPT = """
import logging
from barge.operator.main import log_off_the_loop
listener = log_off_the_loop()
logging.getLogger("kopf.objects").info("Handler %r succeeded.", "seen")
try:
    1 / 0
except ZeroDivisionError:
    logging.getLogger("barge.operator").exception("step failed")
logging.getLogger("httpx").debug("not shown")
for n in range(500):
    logging.getLogger("barge.operator").warning("line %d", n)
listener.stop()
"""


def test_lines_are_formatted_once_and_flushed_at_stop() -> None:
    done = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=60, check=True)
    lines = done.stderr.splitlines()
    stamp = r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}"
    assert re.fullmatch(rf"{stamp} kopf\.objects INFO Handler 'seen' succeeded\.", lines[0])
    assert re.fullmatch(rf"{stamp} barge\.operator ERROR step failed", lines[1])
    assert lines[2] == "Traceback (most recent call last):"
    assert "ZeroDivisionError: division by zero" in done.stderr
    assert "not shown" not in done.stderr
    assert lines[-1].endswith("barge.operator WARNING line 499")
    assert sum(" WARNING line " in line for line in lines) == 500
