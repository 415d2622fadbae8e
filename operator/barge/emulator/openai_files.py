"""`GET /v1/files` (and Azure's `/openai/files`): the file listing the `openai` SDK's `files.list()` pages through.

As the real API: `purpose` filters, `order` is `desc` (newest first, the default) or `asc` by creation time,
`limit` is 1 to 10,000 (default 10,000), and `after` is a cursor, the id of the last file of the previous page;
the answer is a list object with `first_id`, `last_id` and `has_more`. A cursor that names no listed file is a 400
naming it (restarting from the top instead would loop a paging client forever).
"""

from __future__ import annotations

from aiohttp import web

from barge.emulator.openai_shapes import batch_json, error, file_json, store_of

MAX_LIMIT = 10_000
ORDERS = ("asc", "desc")
#: OpenAI's and Azure's file ids; the store also holds other providers' files (Mistral's `mf-`), never listed here.
OPENAI_FILE = "file-"


async def list_files(request: web.Request) -> web.Response:
    store = store_of(request)
    query = request.query
    try:
        limit = int(query.get("limit", str(MAX_LIMIT)))
    except ValueError:
        return error(400, "limit must be an integer", param="limit")
    if not 1 <= limit <= MAX_LIMIT:
        return error(400, f"limit must be between 1 and {MAX_LIMIT}", param="limit")
    order = query.get("order", "desc")
    if order not in ORDERS:
        return error(400, f"order must be one of {', '.join(ORDERS)}, not {order!r}", param="order")
    now = store.clock()
    for batch in list(store.batches.values()):  # an ended batch's output and error files exist from its end on
        if batch.provider in ("openai", "azure") and not batch.archived and batch.ended(now):
            batch_json(store, batch, now)
    purpose = query.get("purpose")
    rows = [
        (meta["created_at"], n, file_id, meta)
        for n, (file_id, meta) in enumerate(store.files.items())
        if file_id.startswith(OPENAI_FILE) and (purpose is None or file_json(file_id, meta)["purpose"] == purpose)
    ]
    rows.sort(key=lambda row: (row[0], row[1]), reverse=order == "desc")
    ids = [row[2] for row in rows]
    start = 0
    after = query.get("after")
    if after is not None:
        if after not in ids:
            return error(400, f"after: no listed file has the id {after!r}", param="after")
        start = ids.index(after) + 1
    page = rows[start : start + limit]
    return web.json_response(
        {
            "object": "list",
            "data": [file_json(file_id, meta) for _, _, file_id, meta in page],
            "first_id": page[0][2] if page else None,
            "last_id": page[-1][2] if page else None,
            "has_more": start + limit < len(rows),
        }
    )
