"""The RBAC table and the generated install files: least privilege, in step with the code, rendered faithfully."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from barge.api import InferencePool
from barge.api.crd import all_crds
from barge.api.peering import peering_crds
from barge.cli import generate
from barge.cli.main import app
from barge.k8s import chart, workers
from barge.k8s import pool as pool_builders
from barge.k8s.rbac import GROUPS, RULES, Rule, build_rules, markdown_table, render_rules
from barge.operator import kube, pools

REPO = Path(__file__).resolve().parents[2]
VERBS = {"get", "list", "watch", "create", "update", "patch", "delete", "deletecollection"}


def _verbs(group: str, resource: str) -> set[str]:
    return {v for r in RULES if r.api_group == group and resource in r.resources for v, _ in r.verbs}


def test_no_wildcards_and_a_reason_for_every_verb() -> None:
    for rule in RULES:
        assert "*" not in rule.api_group
        assert "*" not in "".join(rule.resources)
        for verb, why in rule.verbs:
            assert verb in VERBS, rule
            assert len(why) > 10, f"{rule.resources} {verb}: say why"
        assert len({v for v, _ in rule.verbs}) == len(rule.verbs), f"duplicate verb in {rule.resources}"


def test_secrets_are_only_read_by_name() -> None:
    # create: an engine pool's API key Secret (review 3, M9), POST only: never list, update, patch or delete
    assert _verbs("", "secrets") == {"get", "create"}


def _generated_children() -> list[dict[str, Any]]:
    """Every child the builders make for the sample pools (engine and provider pools, every queue type)."""
    children: list[dict[str, Any]] = []
    for path in sorted((REPO / "manifests" / "samples").glob("inferencepool-*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            pool = InferencePool.model_validate(
                {**doc, "metadata": {"namespace": "team", **doc["metadata"], "uid": "u"}}
            )
            if pool.spec.engine is not None:
                children += pool_builders.build_children(pool, "http://prometheus:9090")
            caps = workers.quota_caps(pool)
            for w in pool.spec.workers:
                children += [
                    workers.build_worker_configmap(pool, w, caps[w.name], "http://{name}.{namespace}.svc:8000/v1"),
                    workers.build_worker_deployment(pool, w, "barge:test"),
                    workers.build_trigger_auth(pool, w),
                    workers.build_worker_scaled_object(pool, w, caps[w.name]),
                ]
    return [c for c in children if c is not None]


def test_every_kind_the_builders_make_can_be_applied() -> None:
    kinds = {(c["apiVersion"], c["kind"]) for c in _generated_children()}
    assert {("apps/v1", "Deployment"), ("keda.sh/v1alpha1", "ScaledObject"), ("v1", "ConfigMap")} <= kinds
    for api_version, kind in kinds:
        plural = kube.PLURALS[(api_version, kind)]
        assert "patch" in _verbs(api_version.rpartition("/")[0], plural), f"{plural}: server-side apply is a PATCH"


def test_children_the_spec_drops_can_be_checked_and_deleted() -> None:
    for api_version, kind, _role in pools.CHILD_KINDS:
        plural = kube.PLURALS[(api_version, kind)]
        assert {"get", "delete"} <= _verbs(api_version.rpartition("/")[0], plural), plural


def test_kopf_gets_what_it_needs() -> None:
    for plural in ("llmbatchjobs", "inferencepools"):
        assert {"list", "watch", "patch"} <= _verbs("barge.dev", plural)
        assert _verbs("barge.dev", f"{plural}/status") == {"patch"}
    assert _verbs("", "events") == {"create"}
    assert _verbs("apiextensions.k8s.io", "customresourcedefinitions") == {"list", "watch"}
    assert build_rules("cluster-namespaced") == [  # a namespace list: Kopf lists and watches namespaces
        {"apiGroups": [""], "resources": ["namespaces"], "verbs": ["list", "watch"]}
    ]
    for plural in ("kopfpeerings", "clusterkopfpeerings"):
        assert _verbs("kopf.dev", plural) == {"get", "list", "watch", "patch"}


def test_rendered_rules_with_comments_are_the_built_rules() -> None:
    for group in GROUPS:
        assert yaml.safe_load(render_rules(group)) == build_rules(group)
    assert build_rules("cluster") == [
        {
            "apiGroups": ["apiextensions.k8s.io"],
            "resources": ["customresourcedefinitions"],
            "verbs": ["list", "watch"],
        }
    ]


def test_markdown_table_has_one_row_per_verb() -> None:
    table = markdown_table()
    assert len(table.splitlines()) == 2 + sum(len(r.verbs) for r in RULES)
    extra = (Rule("", ("pods",), (("get", "an example reason"),)),)
    assert "| watched | `core` | `pods` | `get` | an example reason |" in markdown_table(extra)


def test_crd_templates_escape_helm_braces_and_keep_the_spec() -> None:
    for name, text in chart.crd_templates().items():
        assert text.startswith("{{- if ")
        assert text.rstrip().endswith("{{- end }}")
        body = text.replace('{{ "{{" }}', "{{")
        lines = [ln for ln in body.splitlines() if not ln.lstrip().startswith("{{-")]
        doc = yaml.safe_load("\n".join(lines))
        source = {**all_crds(), **peering_crds()}[name]
        assert doc["spec"] == source["spec"]
        assert doc["metadata"]["name"] == source["metadata"]["name"]
    assert '{{ "{{" }} text }}' in chart.crd_templates()["llmbatchjobs.barge.dev.yaml"]


def test_values_table_lists_every_leaf_with_its_default() -> None:
    schema = {
        "type": "object",
        "properties": {
            "a": {"type": "object", "properties": {"b": {"type": "integer", "description": "B | bar"}}},
            "c": {"type": "array", "items": {"type": "string"}, "description": "C."},
            "d": {"type": "string", "enum": ["", "x"], "description": "D."},
        },
    }
    table = chart.values_table(schema, {"a": {"b": 3}, "c": []})
    assert "| `a.b` | integer | `3` | B \\| bar |" in table
    assert "| `c` | list of string | `[]` | C. |" in table
    assert '| `d` | string (`""`, `x`) |  | D. |' in table
    ruled = chart.values_table({**schema, "allOf": [{"description": "A needs B.", "if": {}, "then": {}}]}, {})
    assert ruled.endswith("Rules across keys, also enforced by the schema:\n\n- A needs B.")


#: Kubernetes' own types, validated by the API server: the schema names their fields but not their insides.
FREEFORM = {
    "affinity.nodeAffinity",
    "affinity.podAffinity",
    "affinity.podAntiAffinity",
    *(f"extraEnv[].valueFrom.{k}" for k in ("secretKeyRef", "configMapKeyRef", "fieldRef", "resourceFieldRef")),
    "networkPolicy.egress.extra[]",  # NetworkPolicyEgressRule objects
}


def test_the_chart_schema_describes_every_property_and_closes_every_object() -> None:
    schema = json.loads((REPO / "charts" / "barge" / "values.schema.json").read_text())
    assert "draft-07" in schema["$schema"]
    assert "$ref" not in json.dumps(schema)
    seen = []

    def walk(node: dict[str, Any], path: str) -> None:
        seen.append(path)
        if node.get("type") == "object" and path not in FREEFORM:
            closed = node.get("additionalProperties") is False and "properties" in node
            is_map = isinstance(node.get("additionalProperties"), dict)
            assert closed or is_map, f"{path or 'top'}: additionalProperties: false (or a typed map)"
        for key, sub in node.get("properties", {}).items():
            assert sub.get("description"), f"{path}.{key}: no description"
            walk(sub, f"{path}.{key}" if path else key)
        if isinstance(node.get("items"), dict):
            walk(node["items"], f"{path}[]")

    walk(schema, "")
    assert set(seen) >= FREEFORM
    assert all(clause["description"] for clause in schema["allOf"])


def test_replace_section_needs_both_markers() -> None:
    text = f"a\n<!-- BEGIN x ({chart.GENERATED}) -->\nold\n<!-- END x -->\nb"
    assert chart.replace_section(text, "x", "new") == f"a\n<!-- BEGIN x ({chart.GENERATED}) -->\nnew\n<!-- END x -->\nb"
    with pytest.raises(ValueError, match="markers"):
        chart.replace_section("no markers", "x", "new")


def test_generated_files_are_current() -> None:
    files = generate.generated_files(REPO / "crds", REPO / "charts" / "barge", REPO / "docs" / "reference", app)
    assert generate.stale(files) == [], "run `make crds`"


def test_runtime_requirements_follow_the_lock_without_dev_tools() -> None:
    sys.path.insert(0, str(REPO / "tools"))
    import runtime_requirements

    text = (REPO / "requirements.lock").read_text()
    lines = runtime_requirements.runtime(text)
    names = {m.group(1).lower() for ln in lines if (m := re.match(r"^([A-Za-z0-9._-]+)==", ln))}
    assert {"kopf", "anthropic", "openai", "psycopg", "pydantic-core", "aiohttp", "typer"} <= names
    assert not names & {"pytest", "mypy", "ruff", "moto", "import-linter", "cfn-lint", "flask"}
    pins = [ln for ln in lines if "==" in ln]
    assert all(ln.rstrip().endswith("\\") for ln in pins), "every pin keeps its hashes"
