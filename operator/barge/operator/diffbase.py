"""Kopf's diff-base annotation without the spec of LLMBatchJobs.

Kopf copies the whole object's essence (spec included) into the `barge.dev/last-handled-configuration`
annotation after handling a change. A job's spec may be ~300 KiB (a long system prompt, 1,000 inline items),
and annotations are capped at 256 KiB in total: the copy made the object impossible to update. Jobs have no
create/update handlers (a daemon re-reads the spec and the delete handler needs no diff), and their spec is
immutable apart from four small fields, so nothing needs the diff-base of a job's spec: it is left out.
InferencePools keep theirs (their update handler diffs them).
"""

from __future__ import annotations

from typing import Any

import kopf

JOB_KIND = "LLMBatchJob"


class DiffBaseStorage(kopf.AnnotationsDiffBaseStorage):
    def build(self, *, body: kopf.Body, extra_fields: Any = None) -> kopf.BodyEssence:
        essence = super().build(body=body, extra_fields=extra_fields)
        if body.get("kind") == JOB_KIND:
            essence.pop("spec", None)
        return essence
