"""Named crash points for crash-safety tests (the failpoint pattern of etcd's gofail).

With BARGE_FAILPOINT=<name> in the environment the process SIGKILLs itself when it reaches that point: no
cleanup, no flush, exactly what a node failure or an OOM kill does. Unset (always, in production) it is one
dictionary lookup.
"""

from __future__ import annotations

import os
import signal

#: after the intent is in the ledger, before the provider is asked to create the batch
AFTER_INTENT = "after-intent"
#: after the provider created the batch, before its id is in the ledger
AFTER_CREATE = "after-create"
#: half-way through streaming a batch's results, before anything of them is committed
MID_INGEST = "mid-ingest"
#: the job's outputs are written and its batches ingested, before its provider copies are deleted
BEFORE_CLEANUP = "before-cleanup"


def hit(name: str) -> None:
    if os.environ.get("BARGE_FAILPOINT") == name:
        os.kill(os.getpid(), signal.SIGKILL)
