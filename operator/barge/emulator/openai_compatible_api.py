"""OpenAI-compatible batch APIs of other services, as the `openai` SDK pointed at them sees them (type
openai-compatible): OpenAI's files and batches handlers (openai_api.py) under each service's own base path, with
what the service does differently.

* Groq, base URL `/groq/openai/v1`: OpenAI's answers; `completion_window` from 24h to 7d (openai_api.groq_window).
* Together, base URL `/together/v1`: statuses spelled upper-case (`VALIDATING`, `IN_PROGRESS`, `COMPLETED`, ...),
  no `metadata` and no `request_counts` on its batches (it has `progress` instead), completion window 24h only.

Neither knows OpenAI's `output_expires_after`: a create that sends it is refused, as an unknown parameter.
The batches live in the emulator's one store beside OpenAI's (provider `openai`), so `/_emulator/state` counts them.
"""

from __future__ import annotations

import json
from typing import Any

from aiohttp import web

from barge.emulator import openai_api
from barge.emulator.openai_shapes import error

Handler = Any

GROQ, TOGETHER = "/groq/openai/v1", "/together/v1"


def _together_batch(batch: dict[str, Any]) -> dict[str, Any]:
    counts = batch.pop("request_counts", None) or {}
    batch.pop("metadata", None)
    batch["status"] = str(batch["status"]).upper()
    total = counts.get("total") or 0
    done = (counts.get("completed") or 0) + (counts.get("failed") or 0)
    batch["progress"] = round(100.0 * done / total, 1) if total else 0.0
    return batch


def _reshaped(handler: Handler, together: bool) -> Handler:
    async def serve(request: web.Request) -> web.StreamResponse:
        if request.method == "POST" and request.path.endswith("/batches"):
            try:
                body = json.loads(await request.read())
            except (json.JSONDecodeError, UnicodeDecodeError):
                body = None
            if isinstance(body, dict) and "output_expires_after" in body:
                return error(400, "Unknown parameter: 'output_expires_after'.", param="output_expires_after")
        response: web.StreamResponse = await handler(request)
        if not together or not isinstance(response, web.Response) or response.status != 200:
            return response
        if response.content_type != "application/json" or response.body is None:
            return response
        data = json.loads(response.body)  # type: ignore[arg-type]
        if data.get("object") == "batch":
            data = _together_batch(data)
        elif data.get("object") == "list" and all(b.get("object") == "batch" for b in data.get("data") or []):
            data["data"] = [_together_batch(b) for b in data["data"]]
        return web.json_response(data)

    return serve


def routes() -> list[web.RouteDef]:
    out = []
    for prefix, together in ((GROQ, False), (TOGETHER, True)):

        def wrap(handler: Handler, together: bool = together) -> Handler:
            return _reshaped(handler, together)

        out += [
            web.post(f"{prefix}/files", wrap(openai_api.upload_file)),
            web.get(f"{prefix}/files/{{file_id}}", wrap(openai_api.get_file)),
            web.delete(f"{prefix}/files/{{file_id}}", wrap(openai_api.delete_file)),
            web.get(f"{prefix}/files/{{file_id}}/content", wrap(openai_api.file_content)),
            web.post(f"{prefix}/batches", wrap(openai_api.create_batch)),
            web.get(f"{prefix}/batches", wrap(openai_api.list_batches)),
            web.get(f"{prefix}/batches/{{batch_id}}", wrap(openai_api.retrieve_batch)),
            web.post(f"{prefix}/batches/{{batch_id}}/cancel", wrap(openai_api.cancel_batch)),
            web.post(f"{prefix}/chat/completions", wrap(openai_api.chat_completion)),
        ]
    return out
