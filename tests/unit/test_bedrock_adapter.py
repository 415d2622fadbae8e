"""The Bedrock adapter's pure parts: the Secret's JSON, the endpoint policy on the endpoints it names, the records'
encoding and the output lines' routing (the SDK and emulator parts are in tests/contract/test_bedrock.py)."""

from __future__ import annotations

import asyncio
import json

import pytest

from barge import policy as p
from barge.netguard import AddressCheck
from barge.providers import Fatal, Outcome, Request, make_provider
from barge.providers.bedrock_encoding import encode_bedrock, model_input
from barge.providers.bedrock_provider import metadata_of, parse_line
from barge.providers.bedrock_settings import BedrockSettings
from barge.providers.chat_convert import Unconvertible

GOOD = {
    "accessKeyId": "AKIA1",
    "secretAccessKey": "s",
    "region": "eu-west-1",
    "roleArn": "arn:aws:iam::123456789012:role/r",
    "inputS3Uri": "s3://b/in",
    "outputS3Uri": "s3://b/out/",
}


def test_the_secret_is_a_json_object_with_keys_role_and_prefixes() -> None:
    s = BedrockSettings.from_secret(json.dumps(GOOD))
    assert (s.problem, s.region, s.input_s3_uri, s.min_records, s.max_records) == (
        "",
        "eu-west-1",
        "s3://b/in/",
        100,
        50_000,
    )
    assert "JSON object" in BedrockSettings.from_secret("sk-plain-key").problem
    assert "lacks roleArn" in BedrockSettings.from_secret(json.dumps({**GOOD, "roleArn": ""})).problem
    assert "not an s3:// prefix" in BedrockSettings.from_secret(json.dumps({**GOOD, "outputS3Uri": "/tmp/x"})).problem


def test_a_bad_secret_makes_every_call_fatal_naming_why() -> None:
    provider = make_provider("bedrock", "sk-plain-key")
    with pytest.raises(Fatal, match="must be a JSON object"):
        asyncio.run(provider.list_recent())


def test_the_endpoint_policy_refuses_a_metadata_s3_endpoint() -> None:
    secret = json.dumps({**GOOD, "s3EndpointURL": "http://169.254.169.254"})
    provider = make_provider("bedrock", secret, guard=AddressCheck(p.Policy()))
    with pytest.raises(Fatal, match=r"endpoint policy refuses 169\.254\.169\.254"):
        asyncio.run(provider.list_recent())


def test_records_carry_the_anthropic_body_for_bedrock_and_other_models_are_refused() -> None:
    line = json.loads(encode_bedrock(Request("c1", "anthropic.claude-haiku-4-5-20251001-v1:0", "hi", 9, system="S")))
    assert line["recordId"] == "c1"
    assert line["modelInput"] == {
        "anthropic_version": "bedrock-2023-05-31",
        "max_tokens": 9,
        "messages": [{"role": "user", "content": "hi"}],
        "system": "S",
    }
    llama = Request("c1", "meta.llama3-3-70b-instruct-v1:0", "hi", 9, system="S", params={"temperature": 0.2})
    assert json.loads(encode_bedrock(llama))["modelInput"] == {  # every other model: the Converse format
        "messages": [{"role": "user", "content": [{"text": "hi"}]}],
        "system": [{"text": "S"}],
        "inferenceConfig": {"maxTokens": 9, "temperature": 0.2},
    }
    with pytest.raises(Unconvertible, match="Converse format"):
        encode_bedrock(Request("c1", "amazon.nova-lite-v1:0", '{"messages": []}', 9, passthrough=True))


def test_job_names_carry_the_job_tag_and_shard() -> None:
    assert metadata_of("barge-0123abcd-s00003-deadbeef") == {"barge_job": "0123abcd", "barge_shard": "s00003"}
    assert metadata_of("barge-x0123456789abcdef01234567-deadbeef") == {}
    assert metadata_of("someone-elses-job") == {}


@pytest.mark.parametrize(
    ("line", "outcome", "error_type"),
    [
        (
            {
                "recordId": "a",
                "modelOutput": {
                    "content": [{"type": "text", "text": "ok"}],
                    "stop_reason": "end_turn",
                    "usage": {"input_tokens": 3, "output_tokens": 2},
                },
            },
            Outcome.SUCCEEDED,
            "",
        ),
        (
            {"recordId": "a", "modelOutput": {"content": [], "stop_reason": "refusal", "usage": {}}},
            Outcome.REFUSED,
            "refusal",
        ),
        ({"recordId": "a", "error": {"errorCode": 400, "errorMessage": "bad"}}, Outcome.INVALID, "bedrock_400"),
        ({"recordId": "a", "error": {"errorCode": 429, "errorMessage": "slow"}}, Outcome.TRANSIENT, "bedrock_429"),
        ({"recordId": "a", "error": {"errorCode": 500, "errorMessage": "x"}}, Outcome.TRANSIENT, "bedrock_500"),
        ({"recordId": "a"}, Outcome.TRANSIENT, "bedrock_500"),
        (
            {
                "recordId": "a",
                "modelOutput": {
                    "output": {"message": {"content": [{"text": "ok"}]}},
                    "stopReason": "end_turn",
                    "usage": {"inputTokens": 3, "outputTokens": 2},
                },
            },
            Outcome.SUCCEEDED,
            "",
        ),
        (
            {
                "recordId": "a",
                "modelOutput": {"output": {"message": {"content": []}}, "stopReason": "content_filtered", "usage": {}},
            },
            Outcome.REFUSED,
            "refusal",
        ),
    ],
)
def test_output_lines_are_routed(line: dict[str, object], outcome: Outcome, error_type: str) -> None:
    parsed = parse_line(line)
    assert (parsed[0], parsed[1], parsed[7]) == ("a", outcome, error_type)


def test_usage_out_of_range_is_unreadable_not_billed() -> None:
    parsed = parse_line({"recordId": "a", "modelOutput": {"content": [], "usage": {"input_tokens": -5}}})
    assert parsed[1] is Outcome.TRANSIENT
    assert parsed[3] == 0


def test_batch_records_carry_no_cache_marker_and_sync_calls_no_ttl() -> None:
    request = Request("c1", "anthropic.claude-haiku-4-5-20251001-v1:0", "hi", 9, system="S", cache_system=True)
    record = json.loads(encode_bedrock(request))["modelInput"]
    assert record["system"] == [{"type": "text", "text": "S"}]
    assert model_input(request, batch=False)["system"] == [
        {"type": "text", "text": "S", "cache_control": {"type": "ephemeral"}}
    ]
