"""OAuth2 access tokens of a service account (a vertex job's Secret), refreshed through connections of Barge's own.

Why not google-auth's defaults: both SDKs that call Vertex (google-genai, anthropic's AsyncAnthropicVertex) refresh
credentials with `google.auth.transport.requests.Request()`, a `requests` session that no endpoint policy sees,
and the key's `token_uri` is the tenant's to write. `Tokens` is a google-auth Credentials whose `refresh` ignores the
transport it is handed and asks the token endpoint through a urllib3 PoolManager whose every connection checks the
endpoint policy (providers/urllib3_guard.py); both SDKs take it as their `credentials`.
"""

from __future__ import annotations

import threading
from typing import Any

import urllib3
from google.auth import credentials as google_credentials
from google.auth import exceptions as google_exceptions
from google.auth.transport.urllib3 import Request as Urllib3Request
from google.oauth2 import service_account

from barge.netguard import Allowed
from barge.providers.errors import Fatal, Transient
from barge.providers.urllib3_guard import guarded_pool_manager
from barge.providers.vertex_settings import GOOGLE_TOKEN_URI

SCOPES = ("https://www.googleapis.com/auth/cloud-platform",)


class Tokens(google_credentials.Credentials):
    """A service account's tokens, refreshed (under a lock: two SDKs share one) through Barge's connections."""

    def __init__(self, info: dict[str, Any], allowed: Allowed | None = None, timeout: float = 30.0) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        info = {"token_uri": GOOGLE_TOKEN_URI, **info}
        self._inner = service_account.Credentials.from_service_account_info(  # type: ignore[no-untyped-call]
            info, scopes=list(SCOPES)
        )
        http = guarded_pool_manager(allowed, timeout=timeout) if allowed else urllib3.PoolManager(timeout=timeout)
        self._request = Urllib3Request(http)  # type: ignore[no-untyped-call]
        self._lock = threading.Lock()

    def refresh(self, request: Any) -> None:  # `request`: the SDK's transport, not used (see the module)
        """Raises the domain's errors, which both SDKs let through: a refused key is Fatal (every call would fail
        alike), a token endpoint that does not answer, or answers a retryable error, is Transient."""
        with self._lock:
            try:
                self._inner.refresh(self._request)
            except google_exceptions.RefreshError as exc:
                if getattr(exc, "retryable", False):
                    raise Transient(f"vertex: token refresh: {exc}", error_type="token_refresh") from exc
                raise Fatal(
                    f"vertex: the token endpoint refused the service account key: {exc}", error_type="invalid_api_key"
                ) from exc
            except google_exceptions.TransportError as exc:
                raise Transient(f"vertex: token refresh: {exc}", error_type="connection_error") from exc
            self.token = self._inner.token
            self.expiry = self._inner.expiry

    def current(self) -> str:
        """A token that is valid now (refreshed first when it is missing or about to expire)."""
        if not self.valid:
            self.refresh(None)
        return str(self.token)
