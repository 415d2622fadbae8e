"""Finished jobs' credentials back in the second-door scan after a restart (operator/second_door.py).

The scan keeps the credential of every job that stepped since the operator started, also once the job ended: an
idle key is where a second door goes unnoticed. A restarted operator runs no step for a finished job, so without
this its key would leave the scan until another job used it. Kopf lists every job when the operator starts; for
each terminal one that ended within the scan's window (BARGE_SECOND_DOOR_WINDOW, the span the listing looks at),
its provider credential and tenant are resolved once, as its last step did, and handed to the scan with the job
as the one told (a Warning event). A job whose spec no longer validates, whose Secret is gone or whose provider
is an engine pool is left out, quietly: nothing was scanned for it before either.

Bounded: MAX_REMEMBERED job keys are kept as done (oldest forgotten first), and the scan itself keeps at most
second_door.MAX_CREDENTIALS credentials.
"""

from __future__ import annotations

import logging
from datetime import datetime
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from barge.api.batchjob import LLMBatchJobSpec
from barge.operator import admission, targets
from barge.operator.kube import NotFound
from barge.policy import Refused

if TYPE_CHECKING:
    from barge.operator.jobs import Context, Poster

log = logging.getLogger(__name__)

MAX_REMEMBERED = 10_000


def ended_at(status: dict[str, Any] | None) -> float | None:
    """The job's completedAt (RFC 3339) as epoch seconds; None when absent or unreadable."""
    text = (status or {}).get("completedAt")
    if not isinstance(text, str):
        return None
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


async def remember(ctx: Context, body: Any, key: str, post: Poster, now: float) -> bool:
    """Hand a finished job's credential to the scan (once per job key); whether it was."""
    done = ctx.doors.finished
    if key in done:
        return False
    done[key] = None
    while len(done) > MAX_REMEMBERED:
        del done[next(iter(done))]
    ended = ended_at(body.get("status"))
    if ended is None or now - ended > ctx.config.second_door_window:
        return False
    namespace = body["metadata"]["namespace"]
    try:
        spec = LLMBatchJobSpec.model_validate(dict(body["spec"]))
        tenant = await admission.tenant(ctx.kube, namespace, spec.tenant, ctx.config.policy)
        target = await targets.target_for(ctx, namespace, spec)
    except (ValidationError, NotFound, Refused) as exc:
        log.debug("a finished job's credential stays out of the second-door scan (%s): %s", key, exc)
        return False
    ctx.doors.saw(target.provider, tenant, key, post)
    return True
