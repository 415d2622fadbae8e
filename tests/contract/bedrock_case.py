"""The contract suite's Bedrock row: boto3 against `barge emulator`'s /bedrock endpoints, records in a real S3
(moto's server, started once per test process on a free loopback port).

The emulator reads the records from that S3 and writes the output there (BARGE_EMULATOR_S3_ENDPOINT); its
minimum number of records per job is lowered to 1 here (BARGE_EMULATOR_BEDROCK_MIN_RECORDS), as the Secret's
minRecordsPerJob is, so the suite's small batches run as batches (tests/contract/test_bedrock.py holds the default
minimum of 100).
"""

from __future__ import annotations

import atexit
import json
import os

from barge.emulator import bedrock_api
from barge.providers import BatchProvider, make_provider
from tests.conftest import free_port

BUCKET = "barge-bedrock"
ROLE = "arn:aws:iam::123456789012:role/barge-bedrock-batch"
_S3: dict[str, str] = {}


def s3_endpoint() -> str:
    """moto's S3 server (moto[server], a dev dependency) in this process, with the bucket made."""
    if "url" not in _S3:
        import boto3
        from moto.server import ThreadedMotoServer

        port = free_port()
        server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
        server.start()
        atexit.register(server.stop)
        _S3["url"] = f"http://127.0.0.1:{port}"
        s3 = boto3.client(
            "s3", endpoint_url=_S3["url"], region_name="us-east-1", aws_access_key_id="t", aws_secret_access_key="t"
        )
        s3.create_bucket(Bucket=BUCKET)
    return _S3["url"]


def secret(access_key: str = "AKIABARGETEST", min_records: int = 1, prefix: str = "t") -> str:
    """The JSON a bedrock job's Secret holds."""
    return json.dumps(
        {
            "accessKeyId": access_key,
            "secretAccessKey": "testing",
            "region": "us-east-1",
            "roleArn": ROLE,
            "inputS3Uri": f"s3://{BUCKET}/{prefix}/in/",
            "outputS3Uri": f"s3://{BUCKET}/{prefix}/out/",
            "s3EndpointURL": s3_endpoint(),
            "minRecordsPerJob": min_records,
        }
    )


def bedrock(base_url: str, key: str = "k", sync_retries: int = 0) -> BatchProvider:
    """The contract's Bedrock adapter: the emulator reads and writes moto's S3, with a minimum of 1 record."""
    os.environ[bedrock_api.S3_ENV] = s3_endpoint()
    os.environ[bedrock_api.MIN_RECORDS_ENV] = "1"
    access = "invalid" if key == "invalid" else "AKIABARGETEST"
    return make_provider("bedrock", secret(access), base_url=base_url, sync_retries=sync_retries)
