"""The tenancy policy, table-tested: every row is one question a team can ask and the admin's answer."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest

from barge import policy as p
from barge.config import load_policy
from barge.storage import (
    StorageError,
    StoragePolicy,
    credential_endpoints,
    credential_options,
    locate,
    read_text,
    write_lines,
)

ADMIN = p.parse(
    {
        "storage": {
            "prefixes": ["file:///data/{namespace}/", "s3://barge-{tenant}/", "az://jobs/{tenant}/", "gs://g/{tenant}"],
            "tenants": {"finance": ["s3://finance-reports/"]},
        },
        "endpoints": {"allow": [{"host": "proxy.internal", "private": True}, "*.llm.example.com"]},
        "pools": {"images": ["registry.example.com/vllm:*"], "extraFlags": ["--enable-prefix-caching"]},
    }
)


def verdict(check: Callable[[], object]) -> str:
    try:
        check()
    except p.Refused as exc:
        return exc.policy
    return "ok"


@pytest.mark.parametrize(
    ("namespace", "labels", "spec_tenant", "expected"),
    [
        ("team-a", {}, "", "team-a"),
        ("team-a", {}, "team-a", "team-a"),
        ("ns-1", {"barge.dev/tenant": "finance"}, "", "finance"),
        ("ns-1", {"barge.dev/tenant": "finance"}, "finance", "finance"),
        ("team-a", {}, "team-b", "TenantPolicy"),  # metering one's spend to another team
        ("ns-1", {"barge.dev/tenant": "finance"}, "ns-1", "TenantPolicy"),
        ("ns-1", {"barge.dev/tenant": "../x"}, "", "TenantPolicy"),
    ],
)
def test_tenant_comes_from_the_namespace(
    namespace: str, labels: dict[str, str], spec_tenant: str, expected: str
) -> None:
    answers: list[str] = []
    outcome = verdict(lambda: answers.append(p.tenant_of(namespace, labels, spec_tenant)))
    assert (answers[0] if answers else outcome) == expected


@pytest.mark.parametrize(
    ("url", "namespace", "tenant", "expected"),
    [
        ("file:///data/team-a/in.jsonl", "team-a", "team-a", "ok"),
        ("/data/team-a/in.jsonl", "team-a", "team-a", "ok"),
        ("file:///data/team-a", "team-a", "team-a", "ok"),
        ("file:///data/team-b/in.jsonl", "team-a", "team-a", "StoragePolicy"),
        ("file:///data/team-ab/in.jsonl", "team-a", "team-a", "StoragePolicy"),  # a prefix is a whole segment
        ("file:///data/team-a/../team-b/in.jsonl", "team-a", "team-a", "StoragePolicy"),
        ("file:///data/team-a/./x", "team-a", "team-a", "StoragePolicy"),
        ("file://otherhost/data/team-a/x", "team-a", "team-a", "StoragePolicy"),
        ("s3://barge-team-a/in/x.jsonl", "team-a", "team-a", "ok"),
        ("s3://barge-team-b/in/x.jsonl", "team-a", "team-a", "StoragePolicy"),
        ("s3://barge-team-a-evil/x", "team-a", "team-a", "StoragePolicy"),
        ("az://jobs/team-a/out/", "team-a", "team-a", "ok"),
        ("abfs://jobs/team-a/out/", "team-a", "team-a", "ok"),
        ("az://jobs/team-b/out/", "team-a", "team-a", "StoragePolicy"),
        ("gs://g/team-a/x", "team-a", "team-a", "ok"),
        ("gcs://g/team-a/x", "team-a", "team-a", "ok"),
        ("gs://g/team-b/x", "team-a", "team-a", "StoragePolicy"),
        ("https://example.com/team-a/x", "team-a", "team-a", "StoragePolicy"),
        ("ftp://h/x", "team-a", "team-a", "StoragePolicy"),
        ("s3://barge-team-a/x?versionId=1", "team-a", "team-a", "StoragePolicy"),
        # a tenant listed by name gets exactly its own prefixes, not the defaults
        ("s3://finance-reports/q3/", "ns-1", "finance", "ok"),
        ("s3://barge-finance/q3/", "ns-1", "finance", "StoragePolicy"),
        ("s3://finance-reports/q3/", "team-a", "team-a", "StoragePolicy"),
    ],
)
def test_storage_prefixes(url: str, namespace: str, tenant: str, expected: str) -> None:
    assert verdict(lambda: p.check_storage(url, ADMIN.prefixes_for(namespace, tenant))) == expected


def test_no_policy_file_means_no_storage_and_roots_keep_their_placeholders() -> None:
    assert verdict(lambda: p.check_storage("file:///tmp/x", p.Policy().prefixes_for("a", "a"))) == "StoragePolicy"
    legacy = load_policy(None, "/srv/barge/{namespace}:/data/{tenant}")
    assert legacy.prefixes_for("team-a", "t") == ("file:///srv/barge/team-a/", "file:///data/t/")
    # a root without a placeholder is every tenant's whole root: only when the admin says it is shared (M4)
    shared = load_policy(None, "/srv/barge/{namespace}:/shared", shared_file_roots=True)
    assert shared.prefixes_for("team-a", "team-a") == ("file:///srv/barge/team-a/", "file:///shared/")


@pytest.mark.parametrize(
    ("url", "has_secret", "ambient", "expected"),
    [
        ("s3://barge-team-a/x", False, False, "CredentialPolicy"),
        ("az://jobs/team-a/x", False, False, "CredentialPolicy"),
        ("gs://g/team-a/x", False, False, "CredentialPolicy"),
        ("s3://barge-team-a/x", True, False, "ok"),
        ("s3://barge-team-a/x", False, True, "ok"),
        ("file:///data/team-a/x", False, False, "ok"),
    ],
)
def test_ambient_credentials_are_off_by_default(url: str, has_secret: bool, ambient: bool, expected: str) -> None:
    policy = p.Policy(ambient_credentials=ambient)
    assert verdict(lambda: p.check_credentials(policy, url, has_secret)) == expected


@pytest.mark.parametrize(
    ("labels", "expected"),
    [
        ({"barge.dev/credential": "true"}, "ok"),
        ({"barge.dev/credential": "True"}, "SecretPolicy"),
        ({}, "SecretPolicy"),
        (None, "SecretPolicy"),
    ],
)
def test_only_marked_secrets(labels: dict[str, str] | None, expected: str) -> None:
    assert verdict(lambda: p.check_secret("db-credentials", labels)) == expected


RESOLVES = {
    "api.anthropic.com": ["160.79.104.10"],
    "api.openai.com": ["162.159.140.245"],
    "proxy.internal": ["10.0.0.7"],
    "a.llm.example.com": ["93.184.216.34"],
    "b.llm.example.com": ["127.0.0.1"],  # a public name that resolves to loopback (DNS rebinding)
    "evil.example.com": ["93.184.216.35"],
    "res.openai.azure.com": ["20.1.2.3"],
}


@pytest.mark.parametrize(
    ("provider", "url", "expected"),
    [
        ("anthropic", "", "ok"),
        ("anthropic", "https://api.anthropic.com", "ok"),
        ("anthropic", "http://api.anthropic.com", "EndpointPolicy"),  # plain http only for allowlisted hosts
        ("openai", "https://api.anthropic.com", "EndpointPolicy"),  # another provider's host is not a default
        ("azure-openai", "https://res.openai.azure.com/", "ok"),
        ("openai", "http://proxy.internal:8080/v1", "ok"),  # allowlisted, private allowed for it
        ("openai", "https://a.llm.example.com/v1", "ok"),  # wildcard entry
        ("openai", "https://b.llm.example.com/v1", "EndpointPolicy"),  # allowed name, loopback address
        ("openai", "https://llm.example.com/v1", "EndpointPolicy"),  # `*.` does not match the apex
        ("openai", "https://evil.example.com/v1", "EndpointPolicy"),
        ("openai", "http://169.254.169.254/latest/meta-data", "EndpointPolicy"),
        ("openai", "http://metadata.google.internal/", "EndpointPolicy"),
        ("openai", "http://127.0.0.1:9/v1", "EndpointPolicy"),
        ("openai", "https://user:pw@api.openai.com", "EndpointPolicy"),
        ("openai", "file:///etc/passwd", "EndpointPolicy"),
    ],
)
def test_provider_endpoints(provider: str, url: str, expected: str) -> None:
    assert verdict(lambda: p.check_endpoint(ADMIN, provider, url, lambda h: RESOLVES.get(h, ["127.0.0.1"]))) == expected


def test_an_unresolvable_allowed_host_is_left_to_the_connect_time_check() -> None:
    def fail(host: str) -> list[str]:
        raise OSError("no DNS here")

    assert verdict(lambda: p.check_endpoint(ADMIN, "azure-openai", "https://res.openai.azure.com", fail)) == "ok"
    assert verdict(lambda: p.check_endpoint(ADMIN, "openai", "https://evil.example.com", fail)) == "EndpointPolicy"


@pytest.mark.parametrize(
    ("host", "address", "allowed"),
    [
        ("api.openai.com", "162.159.140.245", True),
        ("api.openai.com", "127.0.0.1", False),
        ("api.openai.com", "10.1.2.3", False),
        ("api.openai.com", "169.254.169.254", False),
        ("api.openai.com", "::ffff:169.254.169.254", False),
        ("api.openai.com", "fd00:ec2::254", False),
        ("api.openai.com", "100.64.1.1", False),
        ("api.openai.com", "0.0.0.0", False),
        ("proxy.internal", "10.0.0.7", True),
        ("proxy.internal", "127.0.0.1", True),
    ],
)
def test_addresses_at_connect_time(host: str, address: str, allowed: bool) -> None:
    assert p.address_allowed(ADMIN, host, address) is allowed


@pytest.mark.parametrize(
    ("image", "flags", "expected"),
    [
        ("registry.example.com/vllm:v0.11.0", [], "ok"),
        ("registry.example.com/vllm:v0.11.0", ["--enable-prefix-caching"], "ok"),
        ("vllm/vllm-openai:v0.11.0", [], "ImagePolicy"),  # the admin replaced the default list
        ("attacker/miner:latest", [], "ImagePolicy"),
        ("registry.example.com/vllm:v0.11.0", ["--trust-remote-code"], "ImagePolicy"),
        ("registry.example.com/vllm:v0.11.0", ["--enable-prefix-caching=1", "-x"], "ImagePolicy"),
    ],
)
def test_pool_images_and_flags(image: str, flags: list[str], expected: str) -> None:
    assert verdict(lambda: (p.check_image(ADMIN, image), p.check_extra_flags(ADMIN, flags))) == expected
    assert verdict(lambda: p.check_image(p.Policy(), "vllm/vllm-openai:v0.11.0")) == "ok"


@pytest.mark.parametrize(
    "document",
    [
        {"storage": {"prefixes": ["file:///data/{user}/"]}},
        {"storage": {"prefixes": ["ftp://x/"]}},
        {"storage": {"prefixes": "file:///data/"}},
        {"storage": {"tenants": {"Not_A_Label": []}}},
        {"endpoints": {"allow": [{"host": "x", "trusted": True}]}},
        {"typo": {}},
    ],
)
def test_a_broken_policy_file_is_refused_at_start(document: dict[str, object]) -> None:
    with pytest.raises(ValueError, match="policy"):
        p.parse(document)


def test_error_bodies_are_bounded_and_printable() -> None:
    text = p.bounded_error("<html>\x1b[31m" + "secret " * 200)
    assert len(text) <= p.MAX_ERROR_CHARS
    assert "\x1b" not in text


# --- the same rules where bytes move (barge.storage) ------------------------------------------------------------
def test_storage_enforces_prefixes_after_symlinks(tmp_path: Path) -> None:
    mine, theirs = tmp_path / "team-a", tmp_path / "team-b"
    mine.mkdir()
    theirs.mkdir()
    (theirs / "in.jsonl").write_text('{"id": "b-secret"}\n')
    policy = StoragePolicy(prefixes=(f"file://{mine}/",))
    with pytest.raises(StorageError, match="StoragePolicy"):
        locate(f"file://{theirs}/in.jsonl", policy)
    (mine / "link.jsonl").symlink_to(theirs / "in.jsonl")
    with pytest.raises(StorageError, match="StoragePolicy"):
        locate(f"file://{mine}/link.jsonl", policy)
    with pytest.raises(StorageError, match="StoragePolicy"):
        locate("s3://anything/x", policy)


def test_partial_file_never_writes_through_a_planted_link(tmp_path: Path) -> None:
    mine, theirs = tmp_path / "team-a", tmp_path / "team-b"
    (mine / "out").mkdir(parents=True)
    theirs.mkdir()
    victim = theirs / "results.jsonl"
    victim.write_text("team b's results\n")
    (mine / "out" / "results.jsonl.partial").symlink_to(victim)
    policy = StoragePolicy(prefixes=(f"file://{mine}/",))
    assert write_lines(f"file://{mine}/out/results.jsonl", [b"a"], policy) == 1
    assert victim.read_text() == "team b's results\n"
    assert (mine / "out" / "results.jsonl").read_text() == "a\n"
    assert not os.path.islink(mine / "out" / "results.jsonl")
    # and an output that is itself a link into team B's folder is refused, not followed
    (mine / "out2").mkdir()
    (mine / "out2" / "results.jsonl").symlink_to(victim)
    with pytest.raises(StorageError, match="StoragePolicy"):
        write_lines(f"file://{mine}/out2/results.jsonl", [b"a"], policy)
    assert victim.read_text() == "team b's results\n"


def test_read_text_is_bounded(tmp_path: Path) -> None:
    (tmp_path / "big.json").write_bytes(b"x" * 101)
    policy = StoragePolicy(prefixes=(f"file://{tmp_path}/",))
    with pytest.raises(StorageError, match="limit"):
        read_text(f"file://{tmp_path}/big.json", policy, limit=100)
    with pytest.raises(StorageError, match="regular file"):
        read_text("file:///dev/zero", StoragePolicy(prefixes=("file:///dev/",)), limit=100)


def test_credential_secrets_map_to_storage_options() -> None:
    s3 = credential_options("s3", {"aws_access_key_id": "A", "aws_secret_access_key": "S", "endpoint_url": "http://x"})
    assert s3 == {"s3": {"key": "A", "secret": "S", "client_kwargs": {"endpoint_url": "http://x"}}}
    az = credential_options("az", {"account_name": "n", "account_key": "k"})
    assert az["az"] == {"account_name": "n", "account_key": "k"}
    for scheme, data in (("s3", {"aws_access_key_id": "A"}), ("az", {"account_name": "n"}), ("gs", {})):
        with pytest.raises(StorageError):
            credential_options(scheme, data)


# --- names in references (barge.api patterns -> CRD schema; barge.operator.kube for every API path) ---------------
@pytest.mark.parametrize("name", ["../../ns-b/inferencepools/gpu", "gpu/status", "GPU", "a b", "%2e%2e", "-x"])
def test_reference_names_are_dns_names(name: str) -> None:
    from pydantic import ValidationError

    from barge.api.batchjob import ProviderSpec
    from barge.operator.kube import InvalidName, object_path

    with pytest.raises(ValidationError):
        ProviderSpec.model_validate({"type": "pool", "poolRef": {"name": name}})
    with pytest.raises(ValidationError):
        ProviderSpec.model_validate({"type": "openai", "model": "m", "secretRef": {"name": name}})
    with pytest.raises(InvalidName):
        object_path("barge.dev/v1alpha1", "InferencePool", "team-a", name)
    with pytest.raises(InvalidName):
        object_path("barge.dev/v1alpha1", "InferencePool", name or "x/y", "gpu")


def test_api_paths_are_built_from_checked_parts() -> None:
    from barge.operator.kube import object_path

    assert object_path("barge.dev/v1alpha1", "InferencePool", "team-a", "gpu.v1") == (
        "/apis/barge.dev/v1alpha1/namespaces/team-a/inferencepools/gpu.v1"
    )
    assert object_path("v1", "Service", "team-a") == "/api/v1/namespaces/team-a/services"


# --- generated workloads ---------------------------------------------------------------------------------------
def test_pool_and_worker_pods_carry_no_token_run_as_non_root_and_are_bounded() -> None:
    from barge.api.pool import InferencePool
    from barge.k8s import pool as builders
    from barge.k8s import workers

    doc = {
        "metadata": {"name": "p", "namespace": "team-a", "uid": "u"},
        "spec": {
            "model": "m",
            "engine": {"gpus": 1},
            "workers": [
                {
                    "name": "w",
                    "queue": {"type": "redis-streams", "address": "r:6379", "stream": "s"},
                    "output": {"url": "file:///data/team-a/out/"},
                }
            ],
        },
    }
    pool = InferencePool.model_validate(doc)
    engine = builders.build_deployment(pool)["spec"]["template"]["spec"]
    worker = workers.build_worker_deployment(pool, pool.spec.workers[0], "barge:1")["spec"]["template"]["spec"]
    for pod in (engine, worker):
        assert pod["automountServiceAccountToken"] is False
        container = pod["containers"][0]
        assert (pod.get("securityContext", {}) | container["securityContext"]).get("runAsNonRoot") is True
        assert container["resources"]["requests"]
        assert container["resources"]["limits"]
    shm = next(v for v in engine["volumes"] if v["name"] == "dshm")
    assert shm["emptyDir"] == {"medium": "Memory", "sizeLimit": builders.SHM_SIZE}


@pytest.mark.parametrize(
    ("value", "literal"),
    [
        ("meta-llama/Llama-3.1-8B", '"meta-llama/Llama-3.1-8B"'),
        ('m"}) or vector(1000) #', '"m\\"}) or vector(1000) #"'),
        ("a\\b\nc", '"a\\\\b\\nc"'),
    ],
)
def test_promql_label_values_are_string_literals(value: str, literal: str) -> None:
    from barge.k8s.pool import promql_string

    assert promql_string(value) == literal


def test_endpoints_inside_credential_secrets_are_found_for_the_endpoint_check() -> None:
    az = credential_options(
        "az",
        {
            "connection_string": "DefaultEndpointsProtocol=http;AccountName=a;AccountKey=k;"
            "BlobEndpoint=http://169.254.169.254/a;"
        },
    )
    assert credential_endpoints(az) == ["http://169.254.169.254/a"]
    s3 = credential_options("s3", {"aws_access_key_id": "A", "aws_secret_access_key": "S", "endpoint_url": "http://x"})
    assert credential_endpoints(s3) == ["http://x"]
    assert credential_endpoints(credential_options("az", {"account_name": "a", "account_key": "k"})) == []
    assert verdict(lambda: p.check_endpoint(ADMIN, "storage", "http://169.254.169.254/a", lambda h: [h])) == (
        "EndpointPolicy"
    )
