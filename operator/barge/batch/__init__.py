"""The batch engine: plan and shard, custom ids, the ledger state machine, outcome routing, deadline and
fallback, cost. Pure of Kubernetes and of the SDKs: it talks to providers through `barge.providers`."""
