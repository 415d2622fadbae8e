"""The ledger's tables (SQLAlchemy Core), the same on SQLite and PostgreSQL.

One row per input line in `items`, which also holds the line's result once it has one (an item has at most
one result, upserted by custom_id); `intents` and `batches` record every provider batch Barge meant to create
and did create; `jobs` holds what a job decided once (planned, cut off, failed for good).
"""

from __future__ import annotations

from sqlalchemy import (
    BigInteger,
    Boolean,
    Column,
    Float,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    String,
    Table,
    Text,
)

metadata = MetaData()

jobs = Table(
    "jobs",
    metadata,
    Column("job", String(400), primary_key=True),
    Column("spec_hash", String(64), nullable=False),
    Column("tenant", String(128), nullable=False, default=""),
    Column("model", String(256), nullable=False, default=""),
    Column("planned", Boolean, nullable=False, default=False),
    Column("total", Integer, nullable=False, default=0),
    Column("phase", String(32), nullable=False, default="Pending"),
    Column("fatal", Text, nullable=False, default=""),
    Column("started_at", Float),
    Column("completed_at", Float),
    Column("cutoff_done", Boolean, nullable=False, default=False),
    # when the job's rendered payloads and model outputs may be dropped (set when it ends; see ledger/lifetime.py)
    Column("payloads_until", Float),
    Column("outputs_until", Float),
    # the provider deployment whose batch quota the job's batches count against (ledger/quota.py); NULL: none yet
    Column("quota_key", String(64)),
    # invalid input lines counted, not stored as rows (past the policy's ledger.listedInvalidLines; batch/capacity.py)
    Column("unlisted", Integer, nullable=False, default=0, server_default="0"),
    # when the LLMBatchJob was deleted (lifetime.forget_job): its audit rows are purged ledger.deletedJobsKeptFor later
    Column("deleted_at", Float),
    # what cost reports tag the job's spend with (ledger/spend.py): its provider type and its LLMBatchSchedule, if any
    Column("provider", String(32), nullable=False, default="", server_default=""),
    Column("schedule", String(253), nullable=False, default="", server_default=""),
)

#: Item states: pending -> submitting (in an open intent) -> submitted (in a batch) -> a terminal state,
#: or back to pending for another attempt.
TERMINAL = ("succeeded", "refused", "invalid", "failed")
#: An item's token counts, as the provider reported them (and a batch's, summed).
USAGE = ("input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens")
#: SQL: what every item holds before its first result (no usage, `via` unset); its counts move by its state alone.
NO_RESULT = "via = ''" + "".join(f" AND {c} = 0" for c in USAGE)

items = Table(
    "items",
    metadata,
    Column("job", String(400), primary_key=True),
    Column("custom_id", String(80), primary_key=True),
    Column("line", Integer, nullable=False),
    Column("item_id", Text),
    Column("state", String(16), nullable=False),
    Column("attempts", Integer, nullable=False, default=0),
    Column("shard", String(80)),
    Column("batch_id", String(120)),
    Column("error_type", String(80), nullable=False, default=""),
    Column("reason", Text, nullable=False, default=""),
    Column("est_tokens", Integer, nullable=False, default=0),
    Column("size", Integer, nullable=False, default=0),
    Column("via", String(8), nullable=False, default=""),
    Column("output", Text),
    Column("input_tokens", Integer, nullable=False, default=0),
    Column("output_tokens", Integer, nullable=False, default=0),
    Column("cache_read_tokens", Integer, nullable=False, default=0),
    Column("cache_write_tokens", Integer, nullable=False, default=0),
    Index("ix_items_line", "job", "line"),
    Index("ix_items_state", "job", "state", "line"),
    Index("ix_items_batch", "job", "batch_id"),
    sqlite_with_rowid=False,  # lookups and updates go by (job, custom_id): cluster the table on it
)

#: The rendered user message of each item, apart from `items` so that the rows updated on every state change
#: stay small (ingestion rewrites item rows in random order; 2 KB payloads in them made it I/O-bound).
payloads = Table(
    "payloads",
    metadata,
    Column("job", String(400), primary_key=True),
    Column("line", Integer, primary_key=True),
    Column("payload", Text, nullable=False),
)

#: The same, a page per planner frame (ledger/pages.py): what Barge writes now; `payloads` is read for ledgers
#: written before pages. Columns in this order: the blobs last, so that reading a page's bounds skips them.
payload_pages = Table(
    "payload_pages",
    metadata,
    Column("job", String(400), primary_key=True),
    Column("first_line", Integer, primary_key=True),
    Column("last_line", Integer, nullable=False),
    Column("n", Integer, nullable=False),  # payloads in the page
    Column("lines", LargeBinary, nullable=False),  # per payload: its line and where its text ends (int64 LE)
    Column("text", LargeBinary, nullable=False),  # the payloads' UTF-8, one after another
)

intents = Table(
    "intents",
    metadata,
    Column("job", String(400), primary_key=True),
    Column("shard", String(80), primary_key=True),
    Column("attempt", Integer, nullable=False),
    Column("requests", Integer, nullable=False),
    Column("state", String(16), nullable=False),  # open | created | abandoned
    Column("batch_id", String(120)),
    Column("created_at", Float, nullable=False),
)

batches = Table(
    "batches",
    metadata,
    Column("job", String(400), primary_key=True),
    Column("batch_id", String(120), primary_key=True),
    Column("shard", String(80), nullable=False),
    Column("provider", String(32), nullable=False),
    Column("attempt", Integer, nullable=False),
    Column("requests", Integer, nullable=False),
    Column("status", String(32), nullable=False, default=""),
    Column("submitted_at", Float, nullable=False),
    Column("ended_at", Float),
    Column("ingested", Boolean, nullable=False, default=False),
    Column("canceled", Boolean, nullable=False, default=False),
    # usage, added chunk by chunk in the same transactions that move the chunk's items out of `submitted`; 64-bit:
    # a batch of 100,000 requests of 30,000 tokens holds 3e9 (PostgreSQL's integer stops at 2^31: `WIDENED`)
    Column("input_tokens", BigInteger, nullable=False, default=0),
    Column("output_tokens", BigInteger, nullable=False, default=0),
    Column("cache_read_tokens", BigInteger, nullable=False, default=0),
    Column("cache_write_tokens", BigInteger, nullable=False, default=0),
    # requests the provider let expire (its 24 h window), counted in the same transactions; read by the metrics
    Column("expired", Integer, nullable=False, default=0),
    # what Barge deleted at the provider after ingestion: "" (nothing yet: a pending cleanup once `ingested`),
    # "done", "kept" (retention turned off), "failed" (the provider refused), "legacy". See batch/retention.py.
    Column("cleanup", String(8), nullable=False, default=""),
)

#: Items counted per (job, state, via), with their usage summed: what /metrics reads instead of a GROUP BY over
#: every item. Kept exact by triggers on `items` (ledger/summary.py), in the transactions that change the items.
item_counts = Table(
    "item_counts",
    metadata,
    Column("job", String(400), primary_key=True),
    Column("state", String(16), primary_key=True),
    Column("via", String(8), primary_key=True),
    Column("n", BigInteger, nullable=False, default=0),
    Column("input_tokens", BigInteger, nullable=False, default=0),
    Column("output_tokens", BigInteger, nullable=False, default=0),
    Column("cache_read_tokens", BigInteger, nullable=False, default=0),
    Column("cache_write_tokens", BigInteger, nullable=False, default=0),
    sqlite_with_rowid=False,
)

#: What purged jobs (deleted, then kept `ledger.deletedJobsKeptFor`) had counted, per tenant and model: their item
#: counts by (state, via) as in `item_counts`, and their batches' usage as state 'batch'. The metrics add these, so
#: that a counter never goes down when a job's rows go (ledger/lifetime.py `purge_deleted`).
folded_counts = Table(
    "folded_counts",
    metadata,
    Column("tenant", String(128), primary_key=True),
    Column("model", String(256), primary_key=True),
    Column("state", String(16), primary_key=True),
    Column("via", String(8), primary_key=True),
    Column("n", BigInteger, nullable=False, default=0),
    Column("input_tokens", BigInteger, nullable=False, default=0),
    Column("output_tokens", BigInteger, nullable=False, default=0),
    Column("cache_read_tokens", BigInteger, nullable=False, default=0),
    Column("cache_write_tokens", BigInteger, nullable=False, default=0),
)

#: Usage per job, hour and path (batch or sync), with the job's tenant, namespace, model and provider copied in:
#: what tenant budgets (month-to-date spend, by the (tenant, hour) index) and cost reports (FOCUS) read, never a scan
#: of the items. Added to by the same statements that record usage (ledger/spend.py, called by ledger/bulk.py), in
#: their transactions; never decreased (a purged job's spend stays spent).
spend_hours = Table(
    "spend_hours",
    metadata,
    Column("job", String(400), primary_key=True),
    Column("hour", BigInteger, primary_key=True),  # Unix seconds of the hour's start (UTC)
    Column("via", String(8), primary_key=True),  # batch | sync
    Column("tenant", String(128), nullable=False, default=""),
    Column("model", String(256), nullable=False, default=""),
    Column("provider", String(32), nullable=False, default=""),
    Column("requests", BigInteger, nullable=False, default=0),
    Column("input_tokens", BigInteger, nullable=False, default=0),
    Column("output_tokens", BigInteger, nullable=False, default=0),
    Column("cache_read_tokens", BigInteger, nullable=False, default=0),
    Column("cache_write_tokens", BigInteger, nullable=False, default=0),
    Index("ix_spend_tenant_hour", "tenant", "hour"),
    Index("ix_spend_hour", "hour"),
)

#: The admission queues' waiting jobs, when several operators share the ledger (barge/sharding.py): each shard
#: writes its own waiting jobs here, and every decision on a deployment, taken under that deployment's advisory lock,
#: reads all of them (ledger/waiting.py). One row per (deployment key, job); rows not refreshed for a while are
#: ignored (their shard stopped asking) and removed.
admission_waiting = Table(
    "admission_waiting",
    metadata,
    Column("quota_key", String(64), primary_key=True),
    Column("job", String(400), primary_key=True),
    Column("tenant", String(128), nullable=False),
    Column("priority", BigInteger, nullable=False),
    Column("own_priority", BigInteger, nullable=False),
    Column("created", Float, nullable=False),
    Column("since", Float, nullable=False),
    Column("seen", Float, nullable=False),
    Column("shards", Text, nullable=False),  # JSON list of each waiting shard's estimated tokens
    Column("enqueued_tokens", BigInteger, nullable=False),  # the quota this job's pool declared
    Column("max_live_batches", Integer, nullable=False),
)

#: A deployment's backoff after a `token_limit_exceeded` answer, shared by the shards (ledger/backoff.py): no shard
#: creates a batch on it before `until`. One row per deployment that was answered so; gone once a batch ends well.
admission_backoff = Table(
    "admission_backoff",
    metadata,
    Column("quota_key", String(64), primary_key=True),
    Column("strikes", Integer, nullable=False),
    Column("until", Float, nullable=False),
)

#: Columns made 64-bit after a table's first release, (table, column): PostgreSQL ledgers made before get them
#: widened when opened (SQLite's INTEGER is 64-bit whatever the declared type).
WIDENED = tuple(("batches", c) for c in ("input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens"))

#: Columns added after a table's first release: (table, column, SQL type and default), added when missing.
ADDED_COLUMNS = (
    ("batches", "expired", "INTEGER NOT NULL DEFAULT 0"),
    # batches recorded before an upgrade: "legacy" (still cleaned when their job is stepped, not counted as pending)
    ("batches", "cleanup", "VARCHAR(8) NOT NULL DEFAULT 'legacy'"),
    ("jobs", "payloads_until", "FLOAT"),
    ("jobs", "outputs_until", "FLOAT"),
    ("jobs", "quota_key", "VARCHAR(64)"),
    ("jobs", "unlisted", "INTEGER NOT NULL DEFAULT 0"),
    ("jobs", "deleted_at", "FLOAT"),
    ("jobs", "provider", "VARCHAR(32) NOT NULL DEFAULT ''"),
    ("jobs", "schedule", "VARCHAR(253) NOT NULL DEFAULT ''"),
)
