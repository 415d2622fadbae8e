"""az:// (adlfs) whose every connection passes the connect-time address check (REVIEW-3 H1).

Why a subclass: adlfs builds its BlobServiceClient itself, on azure-core's aiohttp transport, which resolves
whatever name the account URL holds (a BlobEndpoint allowlisted at admission can resolve elsewhere a minute later),
reads HTTP(S)_PROXY from the environment and follows redirects. Here the client gets a transport whose aiohttp
session is `barge.netguard.guarded_session`: every address checked, no proxy from the environment, a 3xx refused,
a whole-body read capped at 16 MiB (downloads are ranged in 4 MiB pieces, under the cap). Every container and blob
client adlfs makes comes from this service client, so they share its transport. The account URL is built from
options `credentials.py` already checked (an account name, or a connection string of known keys).
"""

from __future__ import annotations

from typing import Any

import aiohttp
from adlfs import AzureBlobFileSystem  # type: ignore[import-untyped]
from azure.core.pipeline.transport import AioHttpTransport
from azure.storage.blob.aio import BlobServiceClient

from barge.netguard import Allowed, guarded_session

#: The largest single GET of a download (azure-storage-blob's default is 32 MiB, over the answer cap).
SINGLE_GET = 4 << 20


class GuardedTransport(AioHttpTransport):  # type: ignore[misc]
    """azure-core's aiohttp transport on a guarded session (opened in the loop that uses it)."""

    def __init__(self, allowed: Allowed, **kwargs: Any) -> None:
        super().__init__(use_env_settings=False, **kwargs)
        self.allowed = allowed

    async def open(self) -> None:
        if self.session is None and self._session_owner:  # type: ignore[has-type]
            self.session = guarded_session(self.allowed, cookie_jar=aiohttp.DummyCookieJar(), auto_decompress=False)
        await super().open()


class GuardedBlobFileSystem(AzureBlobFileSystem):  # type: ignore[misc]
    """adlfs with the service client built on `GuardedTransport`."""

    def __init__(self, *args: Any, addresses: Allowed, **kwargs: Any) -> None:
        self.addresses = addresses  # do_connect (called by adlfs's __init__) needs it
        super().__init__(*args, **kwargs)

    def do_connect(self) -> None:
        options: dict[str, Any] = {
            "transport": GuardedTransport(self.addresses),
            "max_single_get_size": SINGLE_GET,
            "max_chunk_get_size": SINGLE_GET,
        }
        if self.connection_string:
            self.service_client = BlobServiceClient.from_connection_string(self.connection_string, **options)
            return
        if not self.account_name:
            raise ValueError("an az filesystem needs connection_string or account_name")
        url = f"https://{self.account_name}.blob.core.windows.net"
        if self.account_key:
            self.service_client = BlobServiceClient(account_url=url, credential=self.account_key, **options)
        elif self.credential is not None:  # the operator's own identity (policy ambientCredentials)
            self.service_client = BlobServiceClient(account_url=url, credential=self.credential, **options)
        elif self.sas_token:
            self.service_client = BlobServiceClient(account_url=f"{url}?{self.sas_token.lstrip('?')}", **options)
        else:
            raise ValueError("an az filesystem needs account_key or sas_token with account_name")
