"""How a request travels to Amazon Bedrock, without importing boto3 (the planner measures sizes with it).

A batch record is `{"recordId", "modelInput"}` (Bedrock's batch-inference JSONL, modelInvocationType InvokeModel);
for an Anthropic Claude model `modelInput` is the Anthropic Messages body Barge sends Anthropic, without `model`
(the job names it) and with `anthropic_version: bedrock-2023-05-31`. The synchronous fallback sends the same body to
bedrock-runtime InvokeModel. Other model families on Bedrock have bodies of their own: a request for one is
refused (Unconvertible: the line is invalid with this reason), never sent in a shape the model would refuse.
"""

from __future__ import annotations

from typing import Any

import orjson

from barge.providers.base import Request
from barge.providers.chat_convert import Unconvertible
from barge.providers.encoding import anthropic_params

ANTHROPIC_VERSION = "bedrock-2023-05-31"
#: Model ids (or cross-region inference profiles) of Anthropic's models on Bedrock.
CLAUDE_PREFIXES = ("anthropic.", "us.anthropic.", "eu.anthropic.", "apac.anthropic.", "global.anthropic.")


def is_claude(model: str) -> bool:
    return model.startswith(CLAUDE_PREFIXES) or (":inference-profile/" in model and ".anthropic." in model)


def model_input(request: Request) -> dict[str, Any]:
    if not is_claude(request.model):
        raise Unconvertible(
            f"bedrock: Barge sends Anthropic Claude models on Bedrock (model ids anthropic.* or an inference profile "
            f"of one), not {request.model!r}"
        )
    body = anthropic_params(request)
    body.pop("model", None)
    return {"anthropic_version": ANTHROPIC_VERSION, **body}


#: Appended to each encoded record: the model is the job's (modelId), not the record's, and BedrockProvider reads
#: it from the first line and strips it from every line before the upload (Bedrock's records hold two keys).
MODEL_KEY = b',"modelId":'


def encode_bedrock(request: Request) -> bytes:
    """One record of a Bedrock batch input file, with the model appended (see MODEL_KEY)."""
    record = orjson.dumps({"recordId": request.custom_id, "modelInput": model_input(request)})
    return record[:-1] + MODEL_KEY + orjson.dumps(request.model) + b"}"
