"""Barge's alert rules as the chart ships them, tested with `promtool test rules` (Debian's prometheus package).

The rules come from `helm template ... --set metrics.prometheusRule.enabled=true` (helm built from its Go
module), so what is tested is exactly what the chart installs. Each alert gets input series shaped like the
real scrapes: the operator's series with the target labels a ServiceMonitor with honorLabels adds (job,
instance, pod; the exported `namespace` of the job or pool kept), the workers' with a PodMonitor's (the pod's
namespace, pod, job). Every case has a firing and a quiet variant, and the expected annotations are the rule's
own templates filled with the expected labels and value, so a template that renders wrongly fails too.
That these metric names and labels really exist on a live /metrics is checked by test_dashboard.py.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from tools import localcluster

from tests.conftest import REPO

PROMTOOL = shutil.which("promtool")
pytestmark = pytest.mark.skipif(PROMTOOL is None, reason="promtool (Debian package prometheus) is not installed")

RELEASE, NAMESPACE = "barge", "barge-system"
OPERATOR_JOB = f"{RELEASE}-metrics"
OPERATOR = {"job": OPERATOR_JOB, "instance": "10.1.2.3:8080", "pod": "barge-5d8f7c9b6-x2x9q", "service": OPERATOR_JOB}
SERVICE = {"job": OPERATOR_JOB, "service": OPERATOR_JOB}  # what `max without (instance, pod)` keeps
WORKER_JOB = f"{NAMESPACE}/{RELEASE}-workers"
GATEWAY_JOB = f"{NAMESPACE}/{RELEASE}-gateway"  # the gateway's PodMonitor, as Prometheus names its job
RUNBOOKS = "https://runbooks.example.com/barge#"
SEVERITIES = {"critical", "warning", "info"}
REQUIRED = {
    "BargeJobFailed",
    "BargeJobDeadlineExceeded",
    "BargeJobSuccessRatioBelowSpec",
    "BargeJobDeadlineAtRisk",
    "BargeBatchExpired",
    "BargeJobBudgetExceeded",
    "BargeJobStepsFailing",
    "BargeLedgerErrors",
    "BargeLedgerSpaceLow",
    "BargeLedgerFull",
    "BargeOperatorAbsent",
    "BargePoolDegraded",
    "BargePoolScalingConflict",
    "BargeWorkerDeadLettersRising",
    "BargeWorkerQuotaCappedBacklogGrowing",
    "BargeTenantBudgetWarning",
    "BargeTenantBudgetExhausted",
    "BargeAdmissionQueueStalled",
    "BargeAdmissionTokenLimitAnswers",
    "BargeAdmissionWaitHigh",
    "BargeSecondDoorOpen",
    "BargeBillingMismatch",
    "BargeGatewayAbsent",
    "BargeGatewayErrors",
}


def render_chart(*sets: str) -> list[dict[str, Any]]:
    helm = localcluster.build(argocd=False)["helm"]
    args = [str(helm), "template", RELEASE, str(REPO / "charts" / "barge"), "--namespace", NAMESPACE]
    for value in sets:
        args += ["--set", value]
    out = subprocess.run(args, capture_output=True, text=True, check=True).stdout
    return [d for d in yaml.safe_load_all(out) if d]


def shipped_rules(gateway: bool = False) -> dict[str, Any]:
    """The PrometheusRule's groups, exactly as the chart renders them (the gateway's group with `gateway`)."""
    docs = render_chart(
        f"gateway.enabled={str(gateway).lower()}",
        "metrics.prometheusRule.enabled=true",
        f"metrics.prometheusRule.runbookBaseURL={RUNBOOKS}",
        "metrics.prometheusRule.additionalLabels.release=kube-prometheus-stack",
    )
    (rule,) = [d for d in docs if d["kind"] == "PrometheusRule"]
    assert rule["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    return {"groups": rule["spec"]["groups"]}


@pytest.fixture(scope="module")
def rules_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("rules") / "barge-rules.yaml"
    path.write_text(yaml.safe_dump(shipped_rules(gateway=True), sort_keys=False))
    return path


def alerts(rules_file: Path) -> dict[str, dict[str, Any]]:
    groups = yaml.safe_load(rules_file.read_text())["groups"]
    return {r["alert"]: r for g in groups for r in g["rules"]}


def series(name: str, labels: dict[str, str], values: str) -> dict[str, str]:
    inner = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
    return {"series": f"{name}{{{inner}}}", "values": values}


def op(name: str, values: str, **labels: str) -> dict[str, str]:
    """An operator series as Prometheus stores it (target labels added, exported namespace honoured)."""
    return series(name, {**OPERATOR, **labels}, values)


def worker(name: str, values: str, pod: str, **labels: str) -> dict[str, str]:
    """A worker replica's series as a PodMonitor stores it (the pod's namespace comes from the target)."""
    target = {"job": WORKER_JOB, "instance": f"{pod}:9100", "pod": pod, "container": "worker", "endpoint": "metrics"}
    return series(name, {**target, **labels}, values)


def expected(rule: dict[str, Any], labels: dict[str, str], value: str) -> dict[str, Any]:
    """The alert promtool must report: the rule's labels plus `labels`, its annotations filled in."""

    def fill(text: str) -> str:
        text = re.sub(r"\{\{ \$value(?: \| \w+)? \}\}", value, text)
        return re.sub(r"\{\{ \$labels\.(\w+) \}\}", lambda m: labels[m.group(1)], text)

    return {
        "exp_labels": {**labels, **rule["labels"]},
        "exp_annotations": {k: fill(v) for k, v in rule["annotations"].items()},
    }


TENANT = {"namespace": "claims", "tenant": "claims-team"}
POOL = {"namespace": "claims", "pool": "claims-small"}
WORKER = {"namespace": "claims", "pool": "claims-small", "worker": "doc-ingest"}


def cases(rules: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """One promtool test group per alert: (input series, [(eval time, expected alerts)])."""

    def case(
        alert: str, input_series: list[dict[str, str]], *checks: tuple[str, list[dict[str, Any]]]
    ) -> dict[str, Any]:
        return {
            "interval": "1m",
            "input_series": input_series,
            "alert_rule_test": [{"eval_time": t, "alertname": alert, "exp_alerts": exp} for t, exp in checks],
        }

    def fires(alert: str, labels: dict[str, str], value: str) -> list[dict[str, Any]]:
        return [expected(rules[alert], labels, value)]

    other = {"namespace": "search", "tenant": "search-team"}
    return [
        case(
            "BargeJobFailed",
            [
                op("barge_jobs", "0 0 1 1 1", phase="Failed", **TENANT),
                # a second operator replica (HA) serves the same ledger-backed state: still one job, not two
                series(
                    "barge_jobs",
                    {
                        **OPERATOR,
                        "pod": "barge-5d8f7c9b6-k7k2p",
                        "instance": "10.1.2.4:8080",
                        "phase": "Failed",
                        **TENANT,
                    },
                    "0 0 1 1 1",
                ),
                op("barge_jobs", "1 1 1 1 1", phase="Succeeded", **TENANT),
                op("barge_jobs", "0 0 0 0 0", phase="Failed", **other),
                op("barge_jobs", "3 3 3 3 3", phase="Succeeded", **other),
            ],
            ("1m", []),
            ("4m", fires("BargeJobFailed", TENANT, "1")),
        ),
        case(
            "BargeJobDeadlineExceeded",
            [
                op("barge_job_conditions", "0 2 2", condition="DeadlineExceeded", **TENANT),
                op("barge_job_conditions", "4 4 4", condition="Admitted", **TENANT),
                op("barge_job_conditions", "0 0 0", condition="DeadlineExceeded", **other),
            ],
            ("0m", []),
            ("2m", fires("BargeJobDeadlineExceeded", TENANT, "2")),
        ),
        case(
            "BargeJobSuccessRatioBelowSpec",
            [
                op("barge_job_success_ratio", "0.97+0x20", **TENANT),
                op("barge_job_success_ratio_target", "0.995+0x20", **TENANT),
                op("barge_job_success_ratio", "0.999+0x20", **other),
                op("barge_job_success_ratio_target", "0.99+0x20", **other),
            ],
            ("5m", []),  # pending: below for less than 10 minutes
            ("12m", fires("BargeJobSuccessRatioBelowSpec", {**SERVICE, **TENANT}, "97%")),
        ),
        case(
            "BargeJobDeadlineAtRisk",
            [
                op("barge_deadline_slack_seconds", "1800-60x20", **TENANT),
                op("barge_remaining_work_seconds", "3600+0x20", **TENANT),
                op("barge_deadline_slack_seconds", "7200-60x20", **other),
                op("barge_remaining_work_seconds", "600+0x20", **other),
            ],
            ("10m", []),
            ("16m", fires("BargeJobDeadlineAtRisk", {**SERVICE, **TENANT}, "14m 0s")),
        ),
        case(
            "BargeBatchExpired",
            [
                op("barge_batches_expired_total", "0 0 0 1 1 1", provider="openai", **TENANT),
                op("barge_batches_expired_total", "2 2 2 2 2 2", provider="anthropic", **TENANT),
            ],
            ("2m", []),
            ("5m", fires("BargeBatchExpired", {**TENANT, "provider": "openai"}, "1")),
        ),
        case(
            "BargeJobBudgetExceeded",
            [
                op("barge_job_conditions", "0 0 1", condition="BudgetExceeded", **TENANT),
                op("barge_job_conditions", "0 0 0", condition="BudgetExceeded", **other),
            ],
            ("1m", []),
            ("2m", fires("BargeJobBudgetExceeded", TENANT, "1")),
        ),
        case(
            "BargeJobStepsFailing",
            [
                op("barge_job_conditions", "0 1 1 1 1 1 1 1 1 1 1 1 1 1", condition="StepFailed", **TENANT),
                op("barge_job_conditions", "1 0 1 0 1 0 1 0 1 0 1 0 1 0", condition="StepFailed", **other),
            ],
            ("5m", []),  # pending; the other namespace's job recovers between failures
            ("12m", fires("BargeJobStepsFailing", TENANT, "1")),
        ),
        case(
            "BargeLedgerErrors",
            [
                op("barge_job_step_errors_total", "0 0 2 2 2 2 2 2 2 2 2 2 2 2 2 2", reason="LedgerError"),
                op("barge_job_step_errors_total", "0 5 9 9 9 9 9 9 9 9 9 9 9 9 9 9", reason="TemplateError"),
            ],
            ("1m", []),
            ("3m", fires("BargeLedgerErrors", {**OPERATOR, "reason": "LedgerError"}, "2")),
            ("15m", []),  # no new errors in the last 10 minutes
        ),
        case(
            "BargeLedgerSpaceLow",
            [  # 1 GiB volume filling by 32 MiB a minute; the floor is 128 MiB, so warned under 256 MiB
                op("barge_ledger_free_bytes", "1073741824-33554432x30"),
                op("barge_ledger_min_free_bytes", "134217728+0x30"),
            ],
            ("20m", []),  # 384 MiB free
            ("26m", []),  # 192 MiB: pending (under twice the floor for less than 5 minutes)
            ("29m", []),
            ("30m", fires("BargeLedgerSpaceLow", OPERATOR, "64Mi")),
        ),
        case(
            "BargeLedgerFull",
            [
                op("barge_ledger_free_bytes", "201326592 167772160 134217728 100663296 67108864 67108864 67108864"),
                op("barge_ledger_min_free_bytes", "134217728+0x6"),
            ],
            ("2m", []),  # exactly at the floor is not under it
            ("3m", []),  # pending
            ("5m", fires("BargeLedgerFull", OPERATOR, "64Mi")),
        ),
        case(
            "BargeOperatorAbsent",
            [
                series("up", {**OPERATOR, "namespace": NAMESPACE}, "1 1 0 0 0 0 0 0 0 0"),
                series("up", {**OPERATOR, "namespace": "other-barge"}, "1+0x9"),  # another install is no alibi
            ],
            ("1m", []),
            ("4m", []),  # pending
            ("9m", fires("BargeOperatorAbsent", {"job": OPERATOR_JOB, "namespace": NAMESPACE}, "0")),
        ),
        case(
            "BargeOperatorAbsent",
            [series("up", {**OPERATOR, "namespace": NAMESPACE}, "1 1 _x15")],  # the target is gone altogether
            ("5m", []),
            ("14m", fires("BargeOperatorAbsent", {"job": OPERATOR_JOB, "namespace": NAMESPACE}, "1")),
        ),
        case(
            "BargeOperatorAbsent",
            [series("up", {**OPERATOR, "namespace": NAMESPACE}, "1+0x9")],
            ("9m", []),
        ),
        case(
            "BargePoolDegraded",
            [
                op("barge_pool_condition", "1+0x15", condition="Degraded", **POOL),
                op("barge_pool_condition", "1+0x15", condition="Ready", **POOL),
                op("barge_pool_condition", "0+0x15", condition="Degraded", namespace="claims", pool="claims-big"),
            ],
            ("5m", []),
            ("11m", fires("BargePoolDegraded", {**SERVICE, **POOL, "condition": "Degraded"}, "1")),
        ),
        case(
            "BargePoolScalingConflict",
            [
                op("barge_pool_condition", "0 0 1 1 1 1 1 1 1 1", condition="ScalingConflict", **POOL),
                op("barge_pool_condition", "1+0x9", condition="Degraded", namespace="claims", pool="claims-big"),
            ],
            ("4m", []),
            ("8m", fires("BargePoolScalingConflict", {**SERVICE, **POOL, "condition": "ScalingConflict"}, "1")),
        ),
        case(
            "BargeWorkerDeadLettersRising",
            [
                worker("barge_worker_dead_lettered_total", "0 0 3 3", "w-1", reason="invalid", **WORKER),
                worker("barge_worker_dead_lettered_total", "5 5 5 5", "w-1", reason="infrastructure", **WORKER),
            ],
            ("1m", []),
            ("3m", fires("BargeWorkerDeadLettersRising", {**WORKER, "reason": "invalid"}, "3")),
        ),
        case(
            "BargeWorkerQuotaCappedBacklogGrowing",
            [
                # two replicas of doc-ingest, the quota allows two, the backlog grows: fires
                worker("barge_worker_in_flight", "4+0x40", "w-1", **WORKER),
                worker("barge_worker_in_flight", "3+0x40", "w-2", **WORKER),
                worker("barge_worker_backlog", "100+10x40", "w-1", **WORKER),
                worker("barge_worker_backlog", "100+10x40", "w-2", **WORKER),
                op("barge_pool_worker_quota_cap", "2+0x40", **WORKER),
                # summarise: at its cap (1) but the backlog shrinks: quiet
                worker("barge_worker_in_flight", "1+0x40", "s-1", **{**WORKER, "worker": "summarise"}),
                worker("barge_worker_backlog", "500-10x40", "s-1", **{**WORKER, "worker": "summarise"}),
                op("barge_pool_worker_quota_cap", "1+0x40", **{**WORKER, "worker": "summarise"}),
                # triage: backlog grows but one replica of a cap of three: quiet
                worker("barge_worker_in_flight", "1+0x40", "t-1", **{**WORKER, "worker": "triage"}),
                worker("barge_worker_backlog", "100+10x40", "t-1", **{**WORKER, "worker": "triage"}),
                op("barge_pool_worker_quota_cap", "3+0x40", **{**WORKER, "worker": "triage"}),
                # nolimit: no quota (cap 0): quiet
                worker("barge_worker_in_flight", "1+0x40", "n-1", **{**WORKER, "worker": "nolimit"}),
                worker("barge_worker_backlog", "100+10x40", "n-1", **{**WORKER, "worker": "nolimit"}),
                op("barge_pool_worker_quota_cap", "0+0x40", **{**WORKER, "worker": "nolimit"}),
            ],
            ("10m", []),  # pending
            ("35m", fires("BargeWorkerQuotaCappedBacklogGrowing", WORKER, "2")),
        ),
        *spend_and_admission_cases(case, fires),
        *gateway_cases(case, fires),
    ]


def gateway(name: str, values: str, **labels: str) -> dict[str, str]:
    """A gateway pod's series as its PodMonitor stores it (the pod's namespace and name, the job)."""
    pod = "barge-gateway-6c9d8f7b5-q4w2e"
    target = {"job": GATEWAY_JOB, "namespace": NAMESPACE, "instance": "10.1.2.9:8099", "pod": pod}
    return series(name, {**target, "container": "gateway", "endpoint": "metrics", **labels}, values)


def gateway_cases(case: Any, fires: Any) -> list[dict[str, Any]]:
    """#30.7: barge gateway down (scraped and 0, or not scraped at all), and a route's 5xx ratio over 5%."""
    where = {"job": GATEWAY_JOB, "namespace": NAMESPACE}
    batches, files = "/v1/batches", "/v1/files"
    return [
        case(
            "BargeGatewayAbsent",
            [gateway("up", "1 1 0 0 0 0 0 0 0 0"), op("up", "1+0x9")],
            ("4m", []),  # pending: down for 2 minutes
            ("8m", fires("BargeGatewayAbsent", where, "0")),
        ),
        case(
            "BargeGatewayAbsent",
            [op("up", "1+0x9")],  # the operator is scraped, no gateway ever was
            ("3m", []),
            ("6m", fires("BargeGatewayAbsent", where, "1")),
        ),
        case(
            "BargeGatewayErrors",
            [
                # /v1/batches: 6 of 66 requests a minute are 500 (9.091%), spread over two tenants
                gateway("barge_gateway_requests_total", "0+30x20", tenant="acme", route=batches, code="200"),
                gateway("barge_gateway_requests_total", "0+30x20", tenant="globex", route=batches, code="200"),
                gateway("barge_gateway_requests_total", "0+6x20", tenant="acme", route=batches, code="500"),
                # /v1/files: 1 of 61 a minute (1.6%) is 503, and many 4xx: quiet
                gateway("barge_gateway_requests_total", "0+60x20", tenant="acme", route=files, code="200"),
                gateway("barge_gateway_requests_total", "0+1x20", tenant="acme", route=files, code="503"),
                gateway("barge_gateway_requests_total", "0+40x20", tenant="", route=files, code="401"),
            ],
            ("5m", []),  # pending
            ("15m", fires("BargeGatewayErrors", {"namespace": NAMESPACE, "route": batches}, "9.091%")),
        ),
    ]


def spend_and_admission_cases(case: Any, fires: Any) -> list[dict[str, Any]]:
    """#31: tenant budgets (warnAt 0.8 of $100 for claims-team; search-team far below its $500) and the
    quota-aware admission queue's series."""
    team, other = {"tenant": "claims-team"}, {"tenant": "search-team"}
    spend = [
        op("barge_tenant_spend_usd", "50 85 95 105 105", **team),
        op("barge_tenant_budget_usd", "100+0x4", **team),
        op("barge_tenant_budget_warn_usd", "80+0x4", **team),
        op("barge_tenant_spend_usd", "10 20 30 40 50", **other),
        op("barge_tenant_budget_usd", "500+0x4", **other),
        op("barge_tenant_budget_warn_usd", "400+0x4", **other),
        # a tenant with spend but no budget in the policy: never alerted
        op("barge_tenant_spend_usd", "900+0x4", tenant="free-team"),
    ]
    claims_pool = {"namespace": "claims", "pool": "claims-azure"}
    waits = []
    for le, fast, slow in [
        ("60", "0+1x20", "0+0x20"),
        ("1800", "0+1x20", "0+0x20"),
        ("3600", "0+1x20", "0+0x20"),
        ("7200", "0+1x20", "0+1x20"),
        ("+Inf", "0+1x20", "0+1x20"),
    ]:
        waits.append(op("barge_admission_wait_seconds_bucket", slow, le=le, tenant="claims-team", **claims_pool))
        waits.append(op("barge_admission_wait_seconds_bucket", fast, le=le, tenant="search-team", **POOL))
    return [
        case(
            "BargeTenantBudgetWarning",
            spend,
            ("0m", []),
            ("1m", fires("BargeTenantBudgetWarning", team, "85")),
            ("2m", fires("BargeTenantBudgetWarning", team, "95")),
            ("3m", []),  # at the budget: the critical alert instead
        ),
        case(
            "BargeTenantBudgetExhausted",
            spend,
            ("2m", []),
            ("3m", fires("BargeTenantBudgetExhausted", team, "105")),
        ),
        case(
            "BargeAdmissionQueueStalled",
            [
                op("barge_admission_queued_jobs", "2+0x150", tenant="claims-team", **claims_pool),
                op("barge_admission_queued_jobs", "1 0 1 0 1 0 1 0 1 0 0+0x140", tenant="search-team", **POOL),
            ],
            ("60m", []),  # pending
            ("125m", fires("BargeAdmissionQueueStalled", {**claims_pool, "tenant": "claims-team"}, "2")),
        ),
        case(
            "BargeAdmissionTokenLimitAnswers",
            [
                op("barge_admission_token_limit_answers_total", "0 0 2 2 2", **claims_pool),
                op("barge_admission_token_limit_answers_total", "3+0x4", **POOL),
            ],
            ("1m", []),
            ("4m", fires("BargeAdmissionTokenLimitAnswers", claims_pool, "2")),
        ),
        case(
            "BargeAdmissionWaitHigh",
            waits,
            ("10m", fires("BargeAdmissionWaitHigh", claims_pool, WAIT_P90)),
        ),
        case(
            "BargeSecondDoorOpen",
            [
                op("barge_provider_foreign_batches", "0 0 2 2", provider="openai", endpoint_hash="3f2a9c", **team),
                op("barge_provider_foreign_batches", "0 0 0 0", provider="anthropic", endpoint_hash="9d1e", **other),
            ],
            ("1m", []),
            ("2m", fires("BargeSecondDoorOpen", {"provider": "openai", "endpoint_hash": "3f2a9c", **team}, "2")),
        ),
        case(
            "BargeBillingMismatch",
            [
                op("barge_reconcile_difference_usd", "0 0 1.5 1.5", provider="anthropic", day="2026-12-01"),
                op("barge_reconcile_difference_usd", "-0.5 -0.5 -3 -3", provider="anthropic", day="2026-11-30"),
                op("barge_reconcile_difference_usd", "0.4 0.4 0.4 0.4", provider="openai", day="2026-12-01"),
                op("barge_reconcile_threshold_usd", "1+0x3", provider="anthropic", day="2026-12-01"),
                op("barge_reconcile_threshold_usd", "1+0x3", provider="anthropic", day="2026-11-30"),
                op("barge_reconcile_threshold_usd", "1+0x3", provider="openai", day="2026-12-01"),
            ],
            ("1m", []),  # -0.5 and 0.4 are within $1
            (
                "2m",
                fires("BargeBillingMismatch", {"provider": "anthropic", "day": "2026-11-30"}, "3")
                + fires("BargeBillingMismatch", {"provider": "anthropic", "day": "2026-12-01"}, "1.5"),
            ),
        ),
    ]


#: histogram_quantile(0.9) of waits that all fell in (3600, 7200]: 3600 + 0.9 * 3600 s.
WAIT_P90 = "1h 54m 0s"


def test_rules_pass_promtool_check(rules_file: Path) -> None:
    out = subprocess.run([str(PROMTOOL), "check", "rules", str(rules_file)], capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr
    assert f"SUCCESS: {len(alerts(rules_file))} rules found" in out.stdout


def test_every_alert_is_named_labelled_and_annotated(rules_file: Path) -> None:
    found = alerts(rules_file)
    assert set(found) >= REQUIRED, f"missing: {REQUIRED - set(found)}"
    for name, rule in found.items():
        assert name.startswith("Barge"), name
        assert rule["labels"]["severity"] in SEVERITIES, name
        ann = rule["annotations"]
        assert set(ann) == {"summary", "description", "runbook_url"}, name
        assert "{{" not in ann["summary"], f"{name}: the summary is static"
        assert "{{" in ann["description"], f"{name}: the description is templated"
        assert ann["runbook_url"] == RUNBOOKS + name.lower(), name
        assert "__" not in rule["expr"] + ann["description"], f"{name}: a placeholder was not filled"
    assert {r["labels"]["severity"] for r in found.values()} == SEVERITIES


def test_every_alert_fires_on_barge_series_and_stays_quiet_otherwise(rules_file: Path) -> None:
    rules = alerts(rules_file)
    groups = cases(rules)
    assert {t["alertname"] for g in groups for t in g["alert_rule_test"]} == set(rules)
    tests = rules_file.parent / "barge-rules-test.yaml"
    tests.write_text(
        yaml.safe_dump(
            {"rule_files": [rules_file.name], "evaluation_interval": "1m", "tests": groups}, sort_keys=False, width=1000
        )
    )
    out = subprocess.run([str(PROMTOOL), "test", "rules", tests.name], cwd=tests.parent, capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr


def test_the_gateway_alerts_come_only_with_the_gateway() -> None:
    def names(rules: dict[str, Any]) -> set[str]:
        return {r["alert"] for g in rules["groups"] for r in g["rules"]}

    with_gateway, without = names(shipped_rules(gateway=True)), names(shipped_rules())
    assert with_gateway - without == {"BargeGatewayAbsent", "BargeGatewayErrors"}
    assert without < with_gateway


def test_promtool_test_can_fail(rules_file: Path) -> None:
    """The harness itself: a wrong expectation (the failed job in another namespace) must make promtool fail."""
    rules = alerts(rules_file)
    wrong = cases(rules)[0]
    wrong["alert_rule_test"][1]["exp_alerts"] = [expected(rules["BargeJobFailed"], {**TENANT, "namespace": "x"}, "1")]
    tests = rules_file.parent / "barge-rules-wrong.yaml"
    tests.write_text(yaml.safe_dump({"rule_files": [rules_file.name], "tests": [wrong]}, sort_keys=False))
    out = subprocess.run([str(PROMTOOL), "test", "rules", tests.name], cwd=tests.parent, capture_output=True, text=True)
    assert out.returncode != 0
    assert "BargeJobFailed" in out.stdout + out.stderr
