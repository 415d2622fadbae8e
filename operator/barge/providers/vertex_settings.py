"""What a vertex job's Secret holds (one JSON object, pure): the service account, the project and region, and the
GCS prefix the batches' input and output live under.

```json
{"serviceAccount": {...the service account's JSON key, as Google's console downloads it...},
 "project": "my-project",                  // default: the key's project_id
 "location": "us-central1",                // default us-central1
 "gcsPrefix": "gs://team-a-vertex/batches/",
 "storageEndpoint": "https://storage.googleapis.com"}   // optional: another GCS JSON API endpoint
```

The key's `token_uri` is where its tokens are asked for (Google's own by default); like every endpoint a tenant
names, it is checked against the endpoint policy (operator/vertex_admission.py, and at every connection).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import orjson

GOOGLE_TOKEN_URI = "https://oauth2.googleapis.com/token"  # noqa: S105 - a URL, not a secret
GOOGLE_STORAGE = "https://storage.googleapis.com"
DEFAULT_LOCATION = "us-central1"
_LOCATION = re.compile(r"^[a-z][a-z0-9-]{1,40}$")
_PROJECT = re.compile(r"^[a-z][a-z0-9-]{4,61}[a-z0-9]$")
SA_KEYS = ("client_email", "private_key", "token_uri")


@dataclass(frozen=True)
class VertexSettings:
    service_account: dict[str, Any] = field(default_factory=dict)
    project: str = ""
    location: str = DEFAULT_LOCATION
    gcs_prefix: str = ""
    """gs://bucket/prefix/ (ends with /)."""
    storage_endpoint: str = GOOGLE_STORAGE
    problem: str = ""
    """Why the Secret cannot be used (every call is then Fatal, naming it); empty when it can."""

    @property
    def token_uri(self) -> str:
        return str(self.service_account.get("token_uri") or GOOGLE_TOKEN_URI)

    @property
    def bucket(self) -> str:
        return self.gcs_prefix[5:].partition("/")[0]

    @classmethod
    def from_secret(cls, text: str) -> VertexSettings:
        try:
            data = orjson.loads(text)
        except orjson.JSONDecodeError:
            return cls(problem="vertex: the Secret's value is not a JSON object (serviceAccount, gcsPrefix, ...)")
        if not isinstance(data, dict):
            return cls(problem="vertex: the Secret's value is not a JSON object (serviceAccount, gcsPrefix, ...)")
        account = data.get("serviceAccount")
        if not isinstance(account, dict) or account.get("type", "service_account") != "service_account":
            return cls(problem="vertex: the Secret's JSON lacks serviceAccount (a service account's JSON key)")
        missing = [k for k in ("client_email", "private_key") if not isinstance(account.get(k), str)]
        if missing:
            return cls(problem=f"vertex: the service account key lacks {', '.join(missing)}")
        project = data.get("project") or account.get("project_id") or ""
        if not isinstance(project, str) or not _PROJECT.match(project):
            return cls(problem=f"vertex: project {project!r} is not a Google Cloud project id")
        location = data.get("location") or DEFAULT_LOCATION
        if not isinstance(location, str) or not _LOCATION.match(location):
            return cls(problem=f"vertex: location {location!r} is not a region")
        prefix = data.get("gcsPrefix")
        if not isinstance(prefix, str) or not prefix.startswith("gs://") or len(prefix) < 7:
            return cls(problem="vertex: the Secret's JSON lacks gcsPrefix (gs://bucket/prefix/)")
        endpoint = data.get("storageEndpoint") or GOOGLE_STORAGE
        if not isinstance(endpoint, str) or not endpoint.startswith(("https://", "http://")):
            return cls(problem=f"vertex: storageEndpoint {endpoint!r} is not an http(s) URL")
        return cls(
            service_account=account,
            project=project,
            location=location,
            gcs_prefix=prefix if prefix.endswith("/") else prefix + "/",
            storage_endpoint=endpoint.rstrip("/"),
        )

    def endpoints(self) -> list[str]:
        """The URLs of this Secret that the endpoint policy must allow (the token URI, the GCS endpoint)."""
        return [self.token_uri, self.storage_endpoint]
