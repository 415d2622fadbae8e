"""The admin's Bedrock settings: the `bedrock` section of the policy file (pure, parsed once).

```yaml
bedrock:
  roles:                     # the service roles each tenant's bedrock jobs may have Bedrock assume
    "*": [arn:aws:iam::111122223333:role/barge-batch]            # any tenant
    team-a: [arn:aws:iam::111122223333:role/team-a-batch]        # team-a: these, and the "*" ones
```

Why: a bedrock job's Secret names the IAM service role Bedrock assumes to read its records and write its results
(providers/bedrock_settings.py). AWS already limits which roles the team's keys may pass (iam:PassRole); this lets
the platform admin say it once more where every team's jobs are admitted, so a team cannot have Bedrock act as a
role meant for another team's buckets, even with keys that could. With `roles` set, a job whose Secret names a role
not listed for its tenant (or under "*") stays Admitted=False with reason ProviderPolicy, naming the role and the
allowed ones. Without the section every role the Secret names is accepted (AWS's PassRole decides), as before.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

ROLE = re.compile(r"^arn:aws(-[a-z]+)*:iam::[0-9]{12}:role/[\w+=,.@/-]{1,512}$")
TENANT = re.compile(r"^(\*|[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?)$")


@dataclass(frozen=True)
class BedrockPolicy:
    roles: tuple[tuple[str, tuple[str, ...]], ...] | None = None
    """(tenant or "*", role ARNs); None: the section is not set, every role is accepted."""

    def allowed(self, tenant: str) -> tuple[str, ...] | None:
        """The roles `tenant`'s jobs may name (its own and "*"'s); None: any."""
        if self.roles is None:
            return None
        listed = dict(self.roles)
        return (*listed.get(tenant, ()), *listed.get("*", ()))


DEFAULT = BedrockPolicy()


def parse(raw: Any) -> BedrockPolicy:
    if raw is None:
        return DEFAULT
    if not isinstance(raw, Mapping):
        raise ValueError("policy bedrock must be a mapping")
    unknown = set(raw) - {"roles"}
    if unknown:
        raise ValueError(f"unknown policy bedrock key(s): {sorted(unknown)}")
    roles = raw.get("roles")
    if roles is None:
        return DEFAULT
    if not isinstance(roles, Mapping):
        raise ValueError('policy bedrock.roles must map a tenant (or "*") to a list of role ARNs')
    parsed = []
    for tenant, listed in roles.items():
        if not isinstance(tenant, str) or not TENANT.match(tenant):
            raise ValueError(f'policy bedrock.roles: {tenant!r} is not a tenant (a DNS label) or "*"')
        if not isinstance(listed, list) or not all(isinstance(r, str) for r in listed):
            raise ValueError(f"policy bedrock.roles.{tenant} must be a list of role ARNs")
        for role in listed:
            if not ROLE.match(role):
                raise ValueError(f"policy bedrock.roles.{tenant}: {role!r} is not an IAM role ARN")
        parsed.append((tenant, tuple(listed)))
    return BedrockPolicy(tuple(parsed))
