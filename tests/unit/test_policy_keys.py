"""The policy reference (barge.policy_keys, printed into docs/reference/policy.md) held to the parsers it describes."""

from __future__ import annotations

import pytest

from barge import limits, policy, policy_keys


def test_a_document_of_every_documented_key_parses_to_those_values() -> None:
    parsed = policy.parse(policy_keys.example_document())
    assert parsed.require_tenant_label is True
    assert parsed.images == ("registry.example.com/vllm/vllm-openai:*",)
    assert parsed.commands == (("barge", "emulator"),)
    assert parsed.admission.priority_bound("acme") == 1000
    assert parsed.ledger.max_keep_seconds == 30 * 86400
    assert [e.host for e in parsed.endpoints] == ["*.llm.example.com"]
    assert parsed.budgets.time_zone == "Europe/London"
    assert str(parsed.budgets.for_job("acme", "claims").monthly_usd) == "100"  # type: ignore[union-attr]
    assert str(parsed.budgets.for_job("acme", "other").monthly_usd) == "2000"  # type: ignore[union-attr]


def _node(doc: dict[str, object], section: str) -> dict[str, object]:
    node = doc
    for part in filter(None, section.split(".")):
        node = node.setdefault(part, {})  # type: ignore[assignment]
    return node


@pytest.mark.parametrize("section", policy_keys.CLOSED)
def test_each_closed_section_refuses_a_key_the_table_does_not_list(section: str) -> None:
    doc = policy_keys.example_document()
    _node(doc, section)["notAKey"] = 1
    with pytest.raises(ValueError, match="notAKey"):
        policy.parse(doc)


def test_the_ledger_keys_are_exactly_the_ones_the_limits_parser_reads() -> None:
    documented = {k.path.removeprefix("ledger.") for k in policy_keys.KEYS if k.path.startswith("ledger.")}
    assert documented == set(limits.FIELDS) | set(limits.DURATIONS)


def test_the_documented_ledger_defaults_are_the_parsers() -> None:
    defaults = limits.parse(None)
    table = {k.path: k.default for k in policy_keys.KEYS}
    for key, field in limits.FIELDS.items():
        assert table[f"ledger.{key}"].startswith(f"`{getattr(defaults, field)}`"), key
    assert limits.parse({"maxKeepFor": "30d", "deletedJobsKeptFor": "7d"}) == defaults
