"""Several active operators, each owning a shard of the namespaces (BARGE_SHARD=i/N).

Why: with one operator process only the Kopf peering leader works, so a platform that outgrows one process has
nowhere to go. Shards split the namespaces by a stable hash of the namespace's name: every shard computes the same
owner for a namespace, whatever the order they start in or the cluster's state, so a job is stepped by exactly
one shard (and by that shard's peering leader, when the shard has several replicas). The shards share one
PostgreSQL ledger, and quota-aware admission on a shared deployment is decided under a PostgreSQL advisory lock
over a waiting list in the ledger (ledger/waiting.py, operator/shared_admission.py), so two shards never
over-admit one deployment and the tenants' rotation is one rotation.

Cluster-wide chores (the ledger purge, the FOCUS export, the second-door scan, reconciliation with the
providers' bills) run on shard 0 only. Pure.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Shard:
    index: int = 0
    count: int = 1

    @property
    def sharded(self) -> bool:
        return self.count > 1

    @property
    def first(self) -> bool:
        """The shard that runs the cluster-wide chores."""
        return self.index == 0

    def owns(self, namespace: str | None) -> bool:
        """Whether this shard steps the objects of `namespace` (a cluster-scoped object: shard 0)."""
        return owner(namespace or "", self.count) == self.index if namespace else self.first

    def __str__(self) -> str:
        return f"{self.index}/{self.count}"


def owner(namespace: str, count: int) -> int:
    """The shard that owns `namespace`: the first 8 bytes of its name's SHA-256, modulo the shard count."""
    return int.from_bytes(hashlib.sha256(namespace.encode()).digest()[:8], "big") % count


def parse(text: str) -> Shard:
    """`i/N` with 0 <= i < N (empty: one shard, this one)."""
    if not text.strip():
        return Shard()
    index, sep, count = text.strip().partition("/")
    if not sep or not index.isdigit() or not count.isdigit() or not 0 <= int(index) < int(count):
        raise ValueError(f"BARGE_SHARD must be i/N with 0 <= i < N, not {text!r}")
    return Shard(int(index), int(count))
