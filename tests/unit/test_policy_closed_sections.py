"""Every section of the admin's policy file refuses a key it does not know (issue #27: a typo such as
`tenancy.requireLabels` must stop the operator, not leave the tenant label unrequired)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from barge.config import load_policy
from barge.policy import parse

#: One real key of each section that used to ignore unknown ones, and its typo.
REAL: dict[str, dict[str, Any]] = {
    "storage": {
        "prefixes": ["file:///data/{tenant}/"],
        "tenants": {"acme": ["s3://acme/"]},
        "ambientCredentials": True,
        "sharedFileRoots": False,
    },
    "endpoints": {"allow": ["llm.example.com"]},
    "pools": {
        "images": ["vllm/vllm-openai:*"],
        "extraFlags": ["--enable-lora"],
        "commands": [["barge", "emulator"]],
        "nodeSelectors": ["gpu=*"],
        "tolerations": ["nvidia.com/gpu"],
    },
    "workers": {"maxPayloadBytes": 1024},
    "tenancy": {"requireLabel": True},
}
TYPOS = {
    "storage": "prefix",
    "endpoints": "allowed",
    "pools": "image",
    "workers": "maxPayloadByte",
    "tenancy": "requireLabels",
}


def test_each_section_accepts_its_real_keys() -> None:
    policy = parse(REAL)
    assert policy.storage_prefixes == ("file:///data/{tenant}/",)
    assert policy.tenant_storage == (("acme", ("s3://acme/",)),)
    assert policy.ambient_credentials is True
    assert [e.host for e in policy.endpoints] == ["llm.example.com"]
    assert policy.images == ("vllm/vllm-openai:*",)
    assert policy.extra_flags == ("--enable-lora",)
    assert policy.commands == (("barge", "emulator"),)
    assert policy.max_payload_bytes == 1024
    assert policy.require_tenant_label is True


@pytest.mark.parametrize("section", sorted(TYPOS))
def test_a_typo_in_a_section_is_refused_naming_the_key_its_section_and_the_known_keys(section: str) -> None:
    typo = TYPOS[section]
    doc = {**REAL, section: {**REAL[section], typo: True}}
    with pytest.raises(ValueError, match=rf"unknown key\(s\) \['{typo}'\] in policy {section} \(known: ") as refused:
        parse(doc)
    message = str(refused.value)
    for known in REAL[section]:
        assert known in message, message


def test_a_section_that_is_not_a_mapping_is_refused() -> None:
    with pytest.raises(ValueError, match="policy tenancy"):
        parse({"tenancy": ["requireLabel"]})


def test_the_operator_does_not_start_on_a_policy_file_with_a_typo(tmp_path: Path) -> None:
    """load_policy is what OperatorConfig.from_env and `barge gateway` call at start-up: it raises, they exit."""
    file = tmp_path / "policy.yaml"
    file.write_text("tenancy:\n  requireLabels: true\n")
    with pytest.raises(ValueError, match=r"unknown key\(s\) \['requireLabels'\] in policy tenancy"):
        load_policy(str(file))
    file.write_text("tenancy:\n  requireLabel: true\n")
    assert load_policy(str(file)).require_tenant_label is True
