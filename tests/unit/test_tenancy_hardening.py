"""REVIEW-3 M3, M4, L4 (probe A.27 and the findings' text), each as a test that failed on ba0610c:
- M3: an unlabelled namespace named after another team's tenant was that tenant; the admin may now require the
  label (policy tenancy.requireLabel, BARGE_REQUIRE_TENANT_LABEL; the chart turns it on for new installs);
- M4: BARGE_ALLOWED_FILE_ROOTS=/data gave every tenant all of /data; a root must now name {tenant} or {namespace}
  unless the admin declares the roots shared;
- L4: input.configMapRef read any ConfigMap of the namespace; only one labelled barge.dev/input: "true" is read."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any, ClassVar, cast

import pytest

from barge.api.batchjob import LLMBatchJobSpec
from barge.config import OperatorConfig, load_policy
from barge.operator import admission, kube
from barge.policy import Refused, check_storage, parse, tenant_of

SPEC: dict[str, Any] = {
    "provider": {"type": "openai", "model": "gpt-4o-mini", "secretRef": {"name": "k", "key": "k"}},
    "input": {"inline": [{"id": 1}]},
    "output": {"url": "file:///data/finance/out/"},
    "request": {"template": "{{ text }}"},
}


# --- M3 --------------------------------------------------------------------------------------------------------
def test_an_unlabelled_namespace_is_not_the_tenant_of_its_name_when_the_label_is_required() -> None:
    assert tenant_of("finance", {}) == "finance"  # the fallback, for installs that keep it
    with pytest.raises(Refused) as refused:
        tenant_of("finance", {}, require_label=True)
    assert refused.value.policy == "TenantPolicy"
    assert "no label barge.dev/tenant" in refused.value.message
    assert tenant_of("ns-7", {"barge.dev/tenant": "finance"}, require_label=True) == "finance"
    assert parse({"tenancy": {"requireLabel": True}}).require_tenant_label
    assert not parse(None).require_tenant_label


class Namespaces:
    def __init__(self, labels: dict[str, str]) -> None:
        self.labels = labels

    async def namespace_labels(self, namespace: str) -> dict[str, str]:
        return self.labels


def test_admission_refuses_jobs_of_an_unlabelled_namespace_named_after_a_tenant() -> None:
    policy = parse({"tenancy": {"requireLabel": True}, "storage": {"prefixes": ["file:///data/{tenant}/"]}})
    spec = LLMBatchJobSpec.model_validate(SPEC)
    squatter = cast(kube.Kube, Namespaces({}))
    with pytest.raises(Refused, match="TenantPolicy"):
        asyncio.run(admission.admit(squatter, policy, "finance", spec))
    owner = cast(kube.Kube, Namespaces({"barge.dev/tenant": "finance"}))
    assert asyncio.run(admission.admit(owner, policy, "finance-prod", spec)).tenant == "finance"


def test_the_environment_turns_the_requirement_on(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("BARGE_POLICY_FILE", raising=False)
    monkeypatch.delenv("BARGE_ALLOWED_FILE_ROOTS", raising=False)
    monkeypatch.setenv("BARGE_REQUIRE_TENANT_LABEL", "true")
    assert OperatorConfig.from_env().policy.require_tenant_label
    monkeypatch.setenv("BARGE_REQUIRE_TENANT_LABEL", "false")
    assert not OperatorConfig.from_env().policy.require_tenant_label


# --- M4 --------------------------------------------------------------------------------------------------------
def test_a_file_root_without_a_placeholder_is_refused_unless_declared_shared() -> None:
    """A.27: parse(..., file_roots=['/data']) gave acme ('file:///data/acme/', 'file:///data/') and acme could
    read file:///data/globex/in/claims.jsonl."""
    admin = {"storage": {"prefixes": ["file:///data/{tenant}/"]}}
    with pytest.raises(ValueError, match="every tenant"):
        parse(admin, file_roots=["/data"])
    per_tenant = parse(admin, file_roots=["/srv/{tenant}"])
    prefixes = per_tenant.prefixes_for("acme", "acme")
    assert prefixes == ("file:///data/acme/", "file:///srv/acme/")
    with pytest.raises(Refused, match="StoragePolicy"):
        check_storage("file:///data/globex/in/claims.jsonl", prefixes)
    with pytest.raises(Refused, match="StoragePolicy"):
        check_storage("file:///srv/globex/in/claims.jsonl", prefixes)
    shared = parse({"storage": {**admin["storage"], "sharedFileRoots": True}}, file_roots=["/data"])
    assert "file:///data/" in shared.prefixes_for("acme", "acme")  # what the admin asked for, knowingly
    assert "file:///data/" in load_policy(None, "/data", shared_file_roots=True).prefixes_for("a", "a")


def test_the_environment_declares_roots_shared(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("BARGE_POLICY_FILE", raising=False)
    monkeypatch.setenv("BARGE_ALLOWED_FILE_ROOTS", "/data")
    monkeypatch.delenv("BARGE_SHARED_FILE_ROOTS", raising=False)
    with pytest.raises(ValueError, match="BARGE_ALLOWED_FILE_ROOTS"):
        OperatorConfig.from_env()
    monkeypatch.setenv("BARGE_SHARED_FILE_ROOTS", "true")
    assert OperatorConfig.from_env().policy.storage_prefixes == ("file:///data/",)


# --- L4 --------------------------------------------------------------------------------------------------------
class ConfigMaps:
    """kubernetes_asyncio's CoreV1Api as Kube.configmap_value uses it."""

    maps: ClassVar[dict[str, tuple[dict[str, str], dict[str, str]]]] = {}

    def __init__(self, _api: Any) -> None:
        pass

    async def read_namespaced_config_map(self, name: str, namespace: str) -> Any:
        labels, data = self.maps[name]
        return SimpleNamespace(metadata=SimpleNamespace(labels=labels), data=data)


def test_only_configmaps_marked_as_input_are_read(monkeypatch: pytest.MonkeyPatch) -> None:
    ConfigMaps.maps = {
        "app-settings": ({}, {"in": '{"id": 1, "text": "db password: hunter2"}\n'}),
        "claims-input": ({"barge.dev/input": "true"}, {"in": '{"id": 1, "text": "claim"}\n'}),
    }
    monkeypatch.setattr(kube.client, "CoreV1Api", ConfigMaps)
    k = kube.Kube()
    k._api = cast(Any, object())  # never used: the fake API answers
    with pytest.raises(Refused) as refused:
        asyncio.run(k.configmap_value("team-a", "app-settings", "in"))
    assert refused.value.policy == "InputPolicy"
    assert "hunter2" not in str(refused.value)
    assert "claim" in asyncio.run(k.configmap_value("team-a", "claims-input", "in"))
