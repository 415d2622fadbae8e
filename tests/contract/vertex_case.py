"""The contract suite's Vertex row: google-genai (vertexai=True) and anthropic's AsyncAnthropicVertex against
`barge emulator`'s /vertex endpoints, the batches' input and output in a real GCS JSON API server of its own
(gcp-storage-emulator, started once per test process on a free loopback port), the service account's tokens from
the emulator's token endpoint (the key's token_uri), signed with a key made here."""

from __future__ import annotations

import atexit
import json
import os
from functools import cache

from barge.emulator import vertex_api
from barge.providers import BatchProvider, make_provider
from tests.conftest import free_port

BUCKET = "barge-vertex"
PROJECT = "barge-test-project"
_GCS: dict[str, str] = {}


def gcs_endpoint() -> str:
    """gcp-storage-emulator in this process, in memory, with the bucket made. Its HTTP server takes one connection
    at a time, and keeps serving a kept-alive one: the adapter's pooled connection would hold off the emulator's own
    reads and writes for ever. It is given a thread per connection here (its storage is in memory, its calls short)."""
    if "url" not in _GCS:
        from functools import partial
        from http.server import ThreadingHTTPServer

        from gcp_storage_emulator import server as gcs

        class Threaded(gcs.APIThread):  # type: ignore[misc]
            def run(self) -> None:
                handler = partial(gcs.RequestHandler, self._storage)
                self._httpd = ThreadingHTTPServer((self._host, self._port), handler)
                self._httpd.daemon_threads = True
                self.is_running.set()
                self._httpd.serve_forever()

        port = free_port()
        server = gcs.create_server("127.0.0.1", port, in_memory=True, default_bucket=BUCKET)
        server._api = Threaded("127.0.0.1", port, server._storage)
        server.start()
        atexit.register(server.stop)
        _GCS["url"] = f"http://127.0.0.1:{port}"
    return _GCS["url"]


@cache
def private_key() -> str:
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa

    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    ).decode()


def secret(token_uri: str, email: str = "barge-batch", prefix: str = "t") -> str:
    """The JSON a vertex job's Secret holds."""
    account = {
        "type": "service_account",
        "project_id": PROJECT,
        "private_key_id": "k1",
        "private_key": private_key(),
        "client_email": f"{email}@{PROJECT}.iam.gserviceaccount.com",
        "client_id": "1",
        "token_uri": token_uri,
    }
    return json.dumps(
        {
            "serviceAccount": account,
            "location": "us-central1",
            "gcsPrefix": f"gs://{BUCKET}/{prefix}/",
            "storageEndpoint": gcs_endpoint(),
        }
    )


def vertex(base_url: str, key: str = "k", sync_retries: int = 0) -> BatchProvider:
    """The contract's Vertex adapter: `base_url` is the emulator's /vertex; key "invalid" makes a service account
    whose tokens the emulator refuses."""
    os.environ[vertex_api.GCS_ENV] = gcs_endpoint()
    email = "invalid" if key == "invalid" else "barge-batch"
    return make_provider(
        "vertex", secret(f"{base_url}/token", email), base_url=base_url + "/", sync_retries=sync_retries
    )
