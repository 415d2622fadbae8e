"""Tenancy policy: the one place that answers "may this team do this?".

One operator serves many teams, each in its own namespace. The platform admin writes a policy (a YAML file,
BARGE_POLICY_FILE, mounted by the chart); tenants never see or change it. Every check is a pure function of
the policy and plain values, so the whole model is table-tested without a cluster, and a refusal is a
`Refused(policy, message)` that the operator turns into `Admitted=False` (reason = the policy's name) before
any byte is read or sent.

| question                                  | answer                                                          |
| ----------------------------------------- | --------------------------------------------------------------- |
| which tenant is this namespace?           | label barge.dev/tenant, else the namespace name (refused when    |
|                                           | tenancy.requireLabel); spec.tenant may only repeat it            |
|                                           | (TenantPolicy)                                                   |
| may this ConfigMap be read as input?      | only with label barge.dev/input: "true" (InputPolicy)            |
| may this URL be read or written?          | only under a storage prefix of the tenant, {namespace}/{tenant}  |
|                                           | expanded; file, s3, az, gs, http(s) alike; no `..` (StoragePolicy)|
| may object storage use the operator's     | only if ambientCredentials is true; otherwise the job brings     |
| own cloud credentials?                    | credentialsSecretRef (CredentialPolicy)                          |
| may this Secret be used?                  | only with label barge.dev/credential: "true" (SecretPolicy)      |
| may requests go to this base URL?         | the provider's own hosts or an allowlisted host; https unless    |
|                                           | the host is allowlisted; loopback, private, link-local and       |
|                                           | metadata addresses only where the entry says private: true;      |
|                                           | checked again for every connection (EndpointPolicy)              |
| may this pool run this image, these flags?| images matching pools.images; extra flags named in               |
|                                           | pools.extraFlags (ImagePolicy)                                   |
| whose batch quota and priority count      | the admin's `admission` section only (barge/admission_policy.py) |
| between tenants?                          |                                                                  |
| how long may a job keep its texts, how    | keep times up to ledger.maxKeepFor (RetentionPolicy); items per |
| many items may it and its tenant hold?    | job and tenant, and the ledger's free space (barge/limits.py)    |
"""

from __future__ import annotations

import fnmatch
import ipaddress
import posixpath
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote, urlsplit

from barge import (
    admission_policy,
    bedrock_policy,
    budget_policy,
    gateway_policy,
    pool_placement,
    reconcile_policy,
)
from barge import limits as limits_
from barge.limits import LedgerLimits

TENANT_LABEL = "barge.dev/tenant"
CREDENTIAL_LABEL = "barge.dev/credential"
#: A ConfigMap named by input.configMapRef must carry this label set to "true" (REVIEW-3 L4).
INPUT_LABEL = "barge.dev/input"
DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
#: Canonical scheme of every storage URL form Barge accepts (`abfs` is fsspec's name for az, `gcs` for gs).
SCHEMES = {
    "file": "file",
    "s3": "s3",
    "az": "az",
    "abfs": "az",
    "gs": "gs",
    "gcs": "gs",
    "http": "http",
    "https": "https",
}
OBJECT_STORES = frozenset({"s3", "az", "gs"})
PLACEHOLDERS = ("{namespace}", "{tenant}")
#: Hosts each provider's SDK talks to when no base URL is given; always allowed (as https).
PROVIDER_HOSTS: dict[str, tuple[str, ...]] = {
    "anthropic": ("api.anthropic.com",),
    "openai": ("api.openai.com",),
    "azure-openai": ("*.openai.azure.com", "*.cognitiveservices.azure.com"),
    "mistral": ("api.mistral.ai",),
    "gemini": ("generativelanguage.googleapis.com",),  # the Gemini API (files, uploads, batches, models)
    "vertex": (
        "*-aiplatform.googleapis.com",
        "aiplatform.googleapis.com",
        "oauth2.googleapis.com",
        "storage.googleapis.com",
    ),
    "bedrock": ("*.amazonaws.com",),  # bedrock, bedrock-runtime and s3 of every region (baseURL is usually empty)
    # openai-compatible has no host of its own: its baseURL must be one of the admin's endpoints
}
METADATA_HOSTS = frozenset({"metadata.google.internal", "metadata", "instance-data", "metadata.azure.internal"})
METADATA_ADDRESSES = frozenset(
    {"169.254.169.254", "169.254.170.2", "fd00:ec2::254", "100.100.100.200", "192.0.0.192"}  # .192: Oracle legacy
)
DEFAULT_IMAGES = ("vllm/vllm-openai:*", "docker.io/vllm/vllm-openai:*")
MAX_ERROR_CHARS = 300


class Refused(Exception):
    """Something the admin's policy does not allow; `policy` names the rule (it becomes the condition reason)."""

    def __init__(self, policy: str, message: str) -> None:
        super().__init__(f"{policy}: {message}")
        self.policy = policy
        self.message = message


@dataclass(frozen=True)
class Endpoint:
    """One allowlisted provider host."""

    host: str
    """Exact host name or IP, or `*.suffix` for every host under a domain."""
    private: bool = False
    """May resolve to loopback, private, link-local or metadata addresses (an in-cluster proxy, an emulator)."""


@dataclass(frozen=True)
class Policy:
    """What tenants may do; built once from the admin's file and passed explicitly."""

    storage_prefixes: tuple[str, ...] = ()
    """URL prefixes every tenant may read and write, with {namespace}/{tenant} placeholders; none: no storage URL."""
    tenant_storage: tuple[tuple[str, tuple[str, ...]], ...] = ()
    """(tenant, prefixes): a tenant listed here gets exactly these instead of storage_prefixes."""
    ambient_credentials: bool = False
    """Object storage may be read with the operator's own cloud identity when a job brings no credentials."""
    endpoints: tuple[Endpoint, ...] = ()
    """Provider hosts allowed beside the providers' own (PROVIDER_HOSTS)."""
    images: tuple[str, ...] = DEFAULT_IMAGES
    """Image patterns (fnmatch) an InferencePool engine may run."""
    extra_flags: tuple[str, ...] = ()
    """Engine flags (`--name`) allowed in spec.engine.args.extra; none by default."""
    commands: tuple[tuple[str, ...], ...] = ()
    """Engine commands (spec.engine.command, each compared whole) a pool may run instead of its image's entrypoint;
    none by default (policy pools.commands)."""
    placement: pool_placement.Placement = pool_placement.DEFAULT
    """Node selectors and tolerations a pool may use (pools.nodeSelectors, pools.tolerations; pool_placement.py)."""
    max_payload_bytes: int = 10 * 1024 * 1024
    """Largest claim-check payload a worker reads (payloadUrl)."""
    admission: admission_policy.AdmissionPolicy = admission_policy.DEFAULT
    """Shared deployments' quotas and the priority bounds between tenants (barge/admission_policy.py)."""
    require_tenant_label: bool = False
    """A namespace without the label barge.dev/tenant is refused (TenantPolicy) instead of being the tenant of its
    own name (policy tenancy.requireLabel; BARGE_REQUIRE_TENANT_LABEL, which the chart sets for new installs)."""
    ledger: LedgerLimits = field(default_factory=LedgerLimits)
    """What one job and one tenant may hold in the shared ledger (policy section `ledger`, barge/limits.py)."""
    budgets: budget_policy.BudgetPolicy = budget_policy.DEFAULT
    """Monthly budgets per tenant and namespace (policy section `budgets`, barge/budget_policy.py)."""
    gateway: gateway_policy.GatewayPolicy = gateway_policy.DEFAULT
    """The admin's model aliases and per-tenant file prefixes for `barge gateway` (policy section `gateway`,
    barge/gateway_policy.py)."""
    reconcile: reconcile_policy.ReconcilePolicy = reconcile_policy.DEFAULT
    bedrock: bedrock_policy.BedrockPolicy = bedrock_policy.DEFAULT
    """The service roles each tenant's bedrock jobs may name (policy section `bedrock`, barge/bedrock_policy.py)."""
    """Admin keys for the providers' usage and cost reports (policy section `reconcile`, barge/reconcile_policy.py)."""

    def prefixes_for(self, namespace: str, tenant: str) -> tuple[str, ...]:
        """The storage prefixes of one tenant, placeholders expanded."""
        chosen = dict(self.tenant_storage).get(tenant, self.storage_prefixes)
        return tuple(p.replace("{namespace}", namespace).replace("{tenant}", tenant) for p in chosen)


# --- tenant ----------------------------------------------------------------------------------------------------
def tenant_of(
    namespace: str, labels: Mapping[str, str] | None, spec_tenant: str = "", *, require_label: bool = False
) -> str:
    """The namespace's tenant (admin-set label, else its name unless the admin requires the label); spec.tenant may
    only repeat it. Why the label may be required: whoever may create a namespace named "finance" (HNC, Capsule, a
    self-service portal) would otherwise be tenant finance, with its prefixes and its queue turns (REVIEW-3 M3)."""
    labelled = (labels or {}).get(TENANT_LABEL)
    if require_label and not labelled:
        raise Refused(
            "TenantPolicy",
            f"namespace {namespace!r} has no label {TENANT_LABEL}: the admin requires it (policy "
            "tenancy.requireLabel), so a namespace's name never makes it a tenant",
        )
    tenant = labelled or namespace
    if not DNS_LABEL.match(tenant):
        raise Refused("TenantPolicy", f"namespace label {TENANT_LABEL}={tenant!r} is not a DNS label")
    if spec_tenant and spec_tenant != tenant:
        raise Refused(
            "TenantPolicy",
            f"spec.tenant {spec_tenant!r} differs from this namespace's tenant {tenant!r} "
            f"(set by the admin as label {TENANT_LABEL}); leave spec.tenant empty or repeat it",
        )
    return tenant


# --- storage ---------------------------------------------------------------------------------------------------
def normalise(url: str) -> str:
    """scheme://netloc/path with the canonical scheme; a bare absolute path is file://. Refuses `..` and query."""
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    if scheme == "" and url.startswith("/"):
        scheme, netloc, path = "file", "", url
    elif scheme in SCHEMES:
        scheme, netloc, path = SCHEMES[scheme], parts.netloc, parts.path
    else:
        raise Refused("StoragePolicy", f"unsupported storage URL {url!r}: use file://, s3://, az://, gs://, https://")
    if scheme == "file" and netloc not in ("", "localhost"):
        raise Refused("StoragePolicy", f"file:// URLs must not name a host: {url!r}")
    if scheme == "file":
        netloc = ""
    if parts.query or parts.fragment or "@" in netloc:
        raise Refused("StoragePolicy", f"storage URLs take no query, fragment or user: {url!r}")
    if scheme in ("http", "https"):
        path = _as_served(url, path)
    segments = path.split("/")
    if ".." in segments or "." in segments or "\\" in path or "\x00" in path:
        raise Refused("StoragePolicy", f"'..', '.' and backslashes are not allowed in {url!r}")
    if scheme != "file" and not netloc:
        raise Refused("StoragePolicy", f"{url!r} names no bucket or host")
    return f"{scheme}://{netloc.lower() if scheme in ('http', 'https') else netloc}{posixpath.normpath(path or '/')}"


def _as_served(url: str, path: str) -> str:
    """An http(s) path as a server resolves it: escapes decoded (aiohttp and most servers decode `%2e` before they
    remove dot segments), so `..` is refused whatever its spelling. An encoded `/`, `\\` or NUL, and an escape
    left after decoding (decoded twice by some servers), are refused outright; storage sends the decoded form
    encoded again."""
    if re.search(r"%(2f|5c|00)", path, re.IGNORECASE):
        raise Refused("StoragePolicy", f"an encoded '/', '\\' or NUL is not allowed in {url!r}")
    decoded = unquote(path)
    if re.search(r"%[0-9a-fA-F]{2}", decoded):
        raise Refused("StoragePolicy", f"a doubly encoded escape is not allowed in {url!r}")
    return decoded


def check_storage(url: str, prefixes: Iterable[str]) -> None:
    """`url` must lie under one of the (already expanded) prefixes, on a path-segment boundary."""
    target = normalise(url)
    allowed = tuple(prefixes)
    for prefix in allowed:
        base = normalise(prefix).rstrip("/")
        if target == base or target.startswith(base + "/"):
            return
    shown = ", ".join(allowed) or "(none: the admin has configured no storage for this tenant)"
    raise Refused("StoragePolicy", f"{url} is outside this tenant's storage prefixes: {shown}")


def check_credentials(policy: Policy, url: str, has_secret: bool) -> None:
    """Object storage without credentialsSecretRef would use the operator's own identity."""
    scheme = normalise(url).split(":", 1)[0]
    if scheme in OBJECT_STORES and not has_secret and not policy.ambient_credentials:
        raise Refused(
            "CredentialPolicy",
            f"{url} needs credentialsSecretRef: the operator's own cloud credentials are not lent to jobs",
        )


def check_input_configmap(name: str, labels: Mapping[str, str] | None) -> None:
    """input.configMapRef reads only a ConfigMap marked as job input by someone who may write ConfigMaps: a job's
    author who may not read the namespace's ConfigMaps must not get one rendered into prompts (REVIEW-3 L4)."""
    if (labels or {}).get(INPUT_LABEL) != "true":
        raise Refused("InputPolicy", f'ConfigMap {name!r} lacks the label {INPUT_LABEL}: "true"; it is not read')


def check_secret(name: str, labels: Mapping[str, str] | None) -> None:
    """Only Secrets marked for Barge by someone who may write Secrets are ever read."""
    if (labels or {}).get(CREDENTIAL_LABEL) != "true":
        raise Refused("SecretPolicy", f'Secret {name!r} lacks the label {CREDENTIAL_LABEL}: "true"; it is not read')


def check_retention(policy: Policy, keep_payloads_for: str, keep_outputs_for: str) -> None:
    """spec.retention may keep a job's texts in the shared ledger at most the admin's `ledger.maxKeepFor`."""
    longest = policy.ledger.max_keep_seconds
    for name, value in (("keepPayloadsFor", keep_payloads_for), ("keepOutputsFor", keep_outputs_for)):
        if limits_.seconds(value) > longest:
            raise Refused(
                "RetentionPolicy",
                f"spec.retention.{name} {value} is over the admin's maximum of {longest // 3600} h "
                "(policy ledger.maxKeepFor): texts are not kept in the shared ledger that long",
            )


# --- endpoints -------------------------------------------------------------------------------------------------
def _host_matches(pattern: str, host: str) -> bool:
    if pattern.startswith("*."):
        return host.endswith(pattern[1:]) and len(host) > len(pattern) - 1
    if pattern.startswith("*-"):  # one DNS label's tail: *-aiplatform.googleapis.com is us-central1-aiplatform...
        head = host[: len(host) - len(pattern) + 1]
        return host.endswith(pattern[1:]) and bool(head) and "." not in head
    return host == pattern


def _entry(policy: Policy, provider: str, host: str) -> Endpoint | None:
    for endpoint in policy.endpoints:
        if _host_matches(endpoint.host.lower(), host):
            return endpoint
    if any(_host_matches(p, host) for p in PROVIDER_HOSTS.get(provider, ())):
        return Endpoint(host)
    return None


def _carried(address: str) -> list[ipaddress.IPv4Address | ipaddress.IPv6Address]:
    """The address and every IPv4 address its IPv6 form carries (mapped, 6to4, Teredo server and client): a
    network that routes these forms delivers to the IPv4 address inside."""
    ip = ipaddress.ip_address(address.split("%", 1)[0])
    found: list[ipaddress.IPv4Address | ipaddress.IPv6Address] = [ip]
    if isinstance(ip, ipaddress.IPv6Address):
        found += [v4 for v4 in (ip.ipv4_mapped, ip.sixtofour) if v4 is not None]
        found += list(ip.teredo or ())
    return found


def always_refused(address: str) -> bool:
    """Addresses no client of the operator connects to unless the admin names the host (`private: true`):
    metadata, link-local, site-local, unspecified, multicast and reserved, also inside an IPv6 form."""
    return any(
        str(ip) in METADATA_ADDRESSES
        or ip.is_link_local
        or ip.is_unspecified
        or ip.is_multicast
        or ip.is_reserved
        or (isinstance(ip, ipaddress.IPv6Address) and ip.is_site_local)
        for ip in _carried(address)
    )


def address_allowed(policy: Policy, host: str, address: str) -> bool:
    """May a connection to `host` go to `address`? (Asked for every connection, after DNS.) Anything but a
    global address (loopback, private, shared 100.64/10, and what `always_refused` names) needs `private: true`."""
    special = always_refused(address) or any(
        ip.is_loopback or ip.is_private or not ip.is_global for ip in _carried(address)
    )
    if not special:
        return True
    return any(e.private and _host_matches(e.host.lower(), host.lower()) for e in policy.endpoints)


Resolver = Callable[[str], list[str]]


def endpoint_host(base_url: str) -> str:
    """The host a base URL names, as the endpoint checks compare it (lower case, no trailing dot; "" for none)."""
    return (urlsplit(base_url).hostname or "").lower().rstrip(".")


def check_endpoint(policy: Policy, provider: str, base_url: str, resolve: Resolver | None = None) -> None:
    """A provider base URL: an allowed host, https unless allowlisted, and (with `resolve`) allowed addresses."""
    if not base_url:
        return  # the SDK's own default host
    parts = urlsplit(base_url)
    host = endpoint_host(base_url)
    if parts.scheme not in ("http", "https") or not host:
        raise Refused("EndpointPolicy", f"baseURL {base_url!r} is not an http(s) URL with a host")
    if parts.username or parts.password:
        raise Refused("EndpointPolicy", "baseURL must not carry a user or password")
    if host in METADATA_HOSTS:
        raise Refused("EndpointPolicy", f"baseURL host {host!r} is a cloud metadata service")
    entry = _entry(policy, provider, host)
    if entry is None:
        raise Refused(
            "EndpointPolicy",
            f"baseURL host {host!r} is neither {provider}'s own nor in the admin's endpoint allowlist",
        )
    explicitly = any(_host_matches(e.host.lower(), host) for e in policy.endpoints)
    if parts.scheme == "http" and not explicitly:
        raise Refused("EndpointPolicy", f"baseURL {base_url!r} must use https")
    if resolve is None:
        return
    try:
        addresses = resolve(host)
    except OSError:
        return  # not resolvable now: nothing to connect to; the connect-time check decides if it resolves later
    for address in addresses:
        if not address_allowed(policy, host, address):
            raise Refused(
                "EndpointPolicy",
                f"baseURL host {host!r} resolves to {address}, a loopback, private, link-local or metadata "
                "address the admin has not allowed for this host",
            )


def bounded_error(text: str, limit: int = MAX_ERROR_CHARS) -> str:
    """A provider's error text as Barge repeats it: printable, one line, at most `limit` characters."""
    clean = "".join(ch if ch.isprintable() else " " for ch in text)
    if len(clean) <= limit:
        return clean
    marker = f" ...[truncated {len(clean)} chars]"  # the marker barge.batch.bounded uses too
    return clean[: max(0, limit - len(marker))] + marker


# --- pools -----------------------------------------------------------------------------------------------------
def check_image(policy: Policy, image: str) -> None:
    if not any(fnmatch.fnmatchcase(image, pattern) for pattern in policy.images):
        raise Refused("ImagePolicy", f"image {image!r} matches none of the allowed images: {', '.join(policy.images)}")


def check_extra_flags(policy: Policy, flags: Iterable[str]) -> None:
    for flag in flags:
        name = flag.split("=", 1)[0]
        if not name.startswith("--") or name not in policy.extra_flags:
            allowed = ", ".join(policy.extra_flags) or "none"
            raise Refused("ImagePolicy", f"engine flag {name!r} is not allowed (allowed: {allowed})")


def check_command(policy: Policy, command: Iterable[str]) -> None:
    """spec.engine.command: empty (the image's entrypoint), or exactly one of pools.commands."""
    wanted = tuple(command)
    if wanted and wanted not in policy.commands:
        allowed = "; ".join(" ".join(c) for c in policy.commands) or "none"
        raise Refused("ImagePolicy", f"engine command {' '.join(wanted)!r} is not allowed (allowed: {allowed})")


def check_placement(policy: Policy, node_selector: Mapping[str, str], tolerations: Iterable[Mapping[str, Any]]) -> None:
    """A pool's nodeSelector and extra tolerations against pools.nodeSelectors / pools.tolerations."""
    why = pool_placement.refusal(policy.placement, node_selector, tolerations)
    if why:
        raise Refused("PlacementPolicy", why)


# --- the admin's file ------------------------------------------------------------------------------------------
def _strings(value: Any, where: str) -> tuple[str, ...]:
    if value is None:
        return ()
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ValueError(f"policy {where} must be a list of strings")
    return tuple(value)


def _closed(value: Any, where: str, known: Iterable[str]) -> dict[str, Any]:
    """A mapping of the admin's file (`where`: its section, e.g. "policy tenancy") with only the `known` keys; None is
    empty. Every section goes through here: a typo (tenancy.requireLabels) stops the operator at start-up instead of
    silently dropping a rule (#27)."""
    names = sorted(known)
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise ValueError(f"{where} must be a mapping of {', '.join(names)}")
    unknown = sorted(map(str, set(value) - set(names)))
    if unknown:
        raise ValueError(f"unknown key(s) {unknown} in {where} (known: {', '.join(names)})")
    return dict(value)


def _list(value: Any, where: str) -> list[Any]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise ValueError(f"policy {where} must be a list")
    return value


def _prefix(text: str, where: str) -> str:
    rest = text
    for placeholder in PLACEHOLDERS:
        rest = rest.replace(placeholder, "x")
    if "{" in rest or "}" in rest:
        raise ValueError(f"policy {where}: {text!r} uses a placeholder other than {{namespace}} and {{tenant}}")
    try:
        normalise(rest)
    except Refused as exc:
        raise ValueError(f"policy {where}: {exc.message}") from None
    return text


def _file_root(root: str, shared: bool) -> str:
    """A BARGE_ALLOWED_FILE_ROOTS entry as a storage prefix of every tenant. Without {tenant} or {namespace} it hands
    every tenant the whole root, whatever the chart's "roots inputs must stay under" suggested (REVIEW-3 M4): refused
    unless the admin says so (storage.sharedFileRoots: true, for a single-team install)."""
    if not shared and not any(p in root for p in PLACEHOLDERS):
        raise ValueError(
            f"BARGE_ALLOWED_FILE_ROOTS {root!r} would let every tenant read and write all of it: write {{tenant}} or "
            f"{{namespace}} in it (e.g. {root.rstrip('/')}/{{tenant}}), or set storage.sharedFileRoots: true in the "
            "policy if one team uses this operator"
        )
    return _prefix("file://" + root.rstrip("/") + "/", "BARGE_ALLOWED_FILE_ROOTS")


#: The keys of the sections read here; admission_policy, limits, budget_policy, gateway_policy, reconcile_policy and
#: bedrock_policy check their own sections' keys. policy_keys.py documents every one.
KEYS: dict[str, tuple[str, ...]] = {
    "storage": ("prefixes", "tenants", "ambientCredentials", "sharedFileRoots"),
    "endpoints": ("allow",),
    "pools": ("images", "extraFlags", "commands", "nodeSelectors", "tolerations"),
    "workers": ("maxPayloadBytes",),
    "tenancy": ("requireLabel",),
}
SECTIONS = (*KEYS, "admission", "ledger", "budgets", "gateway", "reconcile", "bedrock")
ENTRY = ("host", "private")  # of endpoints.allow


def parse(data: Mapping[str, Any] | None, file_roots: Iterable[str] = (), shared_file_roots: bool = False) -> Policy:
    """The admin's policy document (see the README); `file_roots` are BARGE_ALLOWED_FILE_ROOTS, kept as prefixes,
    each with {tenant} or {namespace} unless `shared_file_roots` (BARGE_SHARED_FILE_ROOTS) or sharedFileRoots."""
    data = _closed(data, "the policy file's top level", SECTIONS)
    storage = _closed(data.get("storage"), "policy storage", KEYS["storage"])
    endpoints = _closed(data.get("endpoints"), "policy endpoints", KEYS["endpoints"])
    pools = _closed(data.get("pools"), "policy pools", KEYS["pools"])
    workers = _closed(data.get("workers"), "policy workers", KEYS["workers"])
    tenancy = _closed(data.get("tenancy"), "policy tenancy", KEYS["tenancy"])
    prefixes = [_prefix(p, "storage.prefixes") for p in _strings(storage.get("prefixes"), "storage.prefixes")]
    shared = shared_file_roots or bool(storage.get("sharedFileRoots", False))
    prefixes += [_file_root(r, shared) for r in file_roots]
    tenants = []
    for tenant, listed in dict(storage.get("tenants") or {}).items():
        if not DNS_LABEL.match(str(tenant)):
            raise ValueError(f"policy storage.tenants: {tenant!r} is not a DNS label")
        where = f"storage.tenants.{tenant}"
        tenants.append((str(tenant), tuple(_prefix(p, where) for p in _strings(listed, where))))
    allow = []
    for item in endpoints.get("allow") or []:
        entry = _closed({"host": item} if isinstance(item, str) else item, "policy endpoints.allow entry", ENTRY)
        if not isinstance(entry.get("host"), str):
            raise ValueError(f"policy endpoints.allow entry {item!r}: expected host and optional private")
        allow.append(Endpoint(entry["host"].lower(), bool(entry.get("private", False))))
    policy = Policy(
        storage_prefixes=tuple(prefixes),
        tenant_storage=tuple(tenants),
        ambient_credentials=bool(storage.get("ambientCredentials", False)),
        endpoints=tuple(allow),
        images=_strings(pools.get("images"), "pools.images") or DEFAULT_IMAGES,
        extra_flags=_strings(pools.get("extraFlags"), "pools.extraFlags"),
        commands=tuple(_strings(c, "pools.commands[]") for c in _list(pools.get("commands"), "pools.commands")),
        placement=pool_placement.parse(pools),
        max_payload_bytes=int(workers.get("maxPayloadBytes", Policy.max_payload_bytes)),
        admission=admission_policy.parse(data.get("admission")),
        ledger=limits_.parse(data.get("ledger")),
        budgets=budget_policy.parse(data.get("budgets")),
        gateway=gateway_policy.parse(data.get("gateway")),
        reconcile=reconcile_policy.parse(data.get("reconcile")),
        bedrock=bedrock_policy.parse(data.get("bedrock")),
        require_tenant_label=bool(tenancy.get("requireLabel", False)),
    )
    # a tenant's gateway prefix must lie under its own storage prefixes ({namespace} kept as written)
    gateway_policy.check_prefixes(policy.gateway, lambda tenant: policy.prefixes_for("{namespace}", tenant))
    return policy
