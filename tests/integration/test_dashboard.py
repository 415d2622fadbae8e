"""The Grafana dashboard and the alerts against a real Prometheus (Debian's) scraping a real Barge.

Nothing is faked on the Barge side: `barge operator` runs as a process against the local kube-apiserver with a
ledger that holds real data (a job taken to Succeeded against the provider emulator, a second one still
Running, a provider InferencePool with a Redis Streams worker), and `barge worker` runs as a process with the
config the operator wrote into the worker's ConfigMap, answering real messages from a real redis-server
(there is no kubelet here, so the test starts the replica the Deployment would), and `barge gateway` runs as
a process with its metrics port, called with a real ServiceAccount token (one accepted upload, one 401). vLLM's
`vllm:num_requests_waiting` comes from vLLM itself; `barge emulator --vllm` serves the same series and stands
in for it. Prometheus scrapes them with the labels the chart's ServiceMonitor (honorLabels) and PodMonitor
give the targets, and every panel's query of the shipped dashboard (rendered by `helm template`) must return
data; every metric and label an alert rule reads must exist in what Prometheus stored.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
import urllib.parse
import urllib.request
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import openai
import pytest
import yaml
from redis import Redis
from tools.localcluster import Cluster

from barge.emulator.profile import parse_profile
from barge.emulator.server import EmulatorThread
from tests.conftest import free_port, wait_for_port
from tests.e2e.conftest import admin_policy, wait_for
from tests.integration.test_alerts import GATEWAY_JOB, NAMESPACE, OPERATOR_JOB, render_chart, shipped_rules

PROMETHEUS = shutil.which("prometheus")
pytestmark = [
    pytest.mark.cluster,
    pytest.mark.skipif(PROMETHEUS is None, reason="prometheus (Debian package prometheus) is not installed"),
]
VLLM_MODEL = "meta-llama/Llama-3.1-8B-Instruct"
GRAFANA_VARS = {"$namespace": ".*", "$__rate_interval": "1m"}  # the variable's allValue; Grafana's own interval
TARGET_LABELS = {"job", "instance", "pod", "service", "container", "endpoint", "namespace"}


def kubectl(cluster: Cluster, *args: str, stdin: str | None = None) -> str:
    """kubectl, retried while a fresh control plane still answers 429 (new CRDs' storage initialising)."""
    tries = [cluster.run_kubectl(*args, input=stdin, check=False)]
    while tries[-1].returncode and "TooManyRequests" in tries[-1].stderr + tries[-1].stdout and len(tries) < 60:
        time.sleep(1)
        tries.append(cluster.run_kubectl(*args, input=stdin, check=False))
    assert tries[-1].returncode == 0, tries[-1].stderr
    return tries[-1].stdout


def get_json(cluster: Cluster, *args: str) -> dict[str, Any]:
    return json.loads(kubectl(cluster, *args, "-o", "json"))  # type: ignore[no-any-return]


def fetch(url: str) -> str:
    with urllib.request.urlopen(url, timeout=10) as resp:  # noqa: S310 - loopback
        return resp.read().decode()  # type: ignore[no-any-return]


def answers(url: str) -> bool:
    try:
        fetch(url)
    except OSError:
        return False
    return True


def job(name: str, emulator: str, workdir: Path, items: list[dict[str, Any]], **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "barge.dev/v1alpha1",
        "kind": "LLMBatchJob",
        "metadata": {"name": name},
        "spec": {
            "tenant": "claims-team",
            "provider": {
                "type": "anthropic",
                "model": "claude-sonnet-4-6",
                "secretRef": {"name": "provider", "key": "api-key"},
                "baseURL": emulator,
            },
            "input": {"inline": items},
            "request": {"system": "Classify the claim.", "template": "{{ text }}", "maxTokens": 50},
            "retry": {"maxAttempts": 5},
            "output": {"url": f"file://{workdir}/{name}/"},
            **spec,
        },
    }


def pool(emulator: str, redis_address: str, stream: str, workdir: Path) -> dict[str, Any]:
    return {
        "apiVersion": "barge.dev/v1alpha1",
        "kind": "InferencePool",
        "metadata": {"name": "ingest-mini"},
        "spec": {
            "model": "gpt-4o-mini",
            "provider": {
                "type": "openai",
                "model": "gpt-4o-mini",
                "secretRef": {"name": "provider", "key": "api-key"},
                "baseURL": f"{emulator}/v1",
            },
            # enqueuedTokens: the deployment's batch quota, so the pooled job goes through its admission queue
            "quota": {"tokensPerMinute": 200000, "requestsPerMinute": 1000, "enqueuedTokens": 10000000},
            "workers": [
                {
                    "name": "doc-ingest",
                    "queue": {"type": "redis-streams", "address": redis_address, "stream": stream},
                    "request": {"system": "Extract the parties.", "template": "{{ text }}", "maxTokens": 40},
                    "tokensPerRequest": 3000,
                    "requestsPerMinutePerReplica": 60,
                    "maxReplicas": 20,
                    "output": {"url": f"file://{workdir}/ingest/"},
                }
            ],
        },
    }


class Stack:
    """What Prometheus scrapes: the operator, one worker replica, a vLLM stand-in and the gateway, with their ports."""

    def __init__(self, namespace: str, operator_port: int, worker_port: int, vllm_port: int, gateway_port: int) -> None:
        self.namespace = namespace
        self.operator = f"127.0.0.1:{operator_port}"
        self.worker = f"127.0.0.1:{worker_port}"
        self.vllm = f"127.0.0.1:{vllm_port}"
        self.gateway = f"127.0.0.1:{gateway_port}"
        self.prometheus = ""

    def query(self, expr: str) -> list[dict[str, Any]]:
        url = f"{self.prometheus}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
        body = json.loads(fetch(url))
        assert body["status"] == "success", body
        return body["data"]["result"]  # type: ignore[no-any-return]


def start(args: list[str], log: Path, env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
    with log.open("wb") as out:
        return subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT, env={**os.environ, **(env or {})})


def stop(*procs: subprocess.Popen[bytes]) -> None:
    for proc in procs:
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(20)
            except subprocess.TimeoutExpired:
                proc.kill()


@pytest.fixture(scope="module")
def stack(cluster: Cluster, redis_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    workdir = tmp_path_factory.mktemp("monitoring")
    ns = f"monitoring-{uuid.uuid4().hex[:6]}"
    kubectl(cluster, "create", "namespace", ns)
    kubectl(cluster, "label", "namespace", ns, "barge.dev/tenant=claims-team")  # the admin names the tenant
    kubectl(cluster, "-n", ns, "create", "secret", "generic", "provider", "--from-literal=api-key=sk-monitoring")
    kubectl(cluster, "-n", ns, "label", "secret", "provider", "barge.dev/credential=true")
    fast = EmulatorThread(
        parse_profile({"batch": {"processingSeconds": 0.5, "outcomes": {"expired": 0.2}}, "sync": {"latencyMs": 1}})
    ).start()
    slow = EmulatorThread(parse_profile({"batch": {"processingSeconds": 3600}})).start()
    vllm = EmulatorThread(parse_profile({}), vllm_model=VLLM_MODEL).start()
    procs: list[subprocess.Popen[bytes]] = []
    try:
        operator_port = free_port()
        policy = workdir / "policy.yaml"  # the emulators on 127.0.0.1 are the providers here: the admin allows them
        # ... and gives claims-team a monthly budget (#31: the tenant budget gauges and the budget panels)
        budgets = {"tenants": {"claims-team": {"monthlyUSD": 1000, "warnAt": 0.8}}}
        # ... and an admin key for reconciliation (#31.4: the comparison at start-up exports barge_reconcile_*)
        admin_key = {"secretRef": {"namespace": ns, "name": "provider", "key": "api-key"}, "baseURL": fast.url}
        reconcile = {"providers": {"anthropic": admin_key}}
        policy.write_text(yaml.safe_dump({**admin_policy(workdir), "budgets": budgets, "reconcile": reconcile}))
        operator = start(
            [sys.executable, "-m", "barge.cli", "operator", "--namespace", ns, "--metrics-port", str(operator_port)],
            workdir / "operator.log",
            {
                "KUBECONFIG": str(cluster.kubeconfig),
                "BARGE_LEDGER_URL": str(workdir / "ledger.db"),
                "BARGE_ALLOWED_FILE_ROOTS": str(workdir),
                "BARGE_SHARED_FILE_ROOTS": "true",  # one workdir for every namespace of this test (M4)
                "BARGE_POLICY_FILE": str(policy),
                "BARGE_POLL_SECONDS": "0.5",
                "BARGE_MIN_BATCH_WINDOW": "0",
                "BARGE_SECOND_DOOR_SECONDS": "1",  # the credentials' scan exports barge_provider_foreign_batches
            },
        )
        procs.append(operator)
        wait_for_port(operator_port, operator, "barge operator", 60)
        items = [{"id": str(n), "text": f"claim {n}: water in the basement"} for n in range(40)]
        deadline = (datetime.now(UTC) + timedelta(hours=6)).strftime("%Y-%m-%dT%H:%M:%SZ")
        stream = f"ingest-{uuid.uuid4().hex[:6]}"
        redis_address = redis_url.removeprefix("redis://").removesuffix("/0")
        manifests = [
            job("nightly", fast.url, workdir, items),
            # still Running when Prometheus scrapes: its batch takes an hour; one line has no id (invalid)
            job("slow", slow.url, workdir, [*items[:5], {"text": "no id"}], deadline=deadline),
            pool(fast.url, redis_address, stream, workdir),
            # through the provider pool: its deployment's admission queue is labelled with the pool (barge_admission_*)
            job("pooled", fast.url, workdir, items[:10], provider={"type": "pool", "poolRef": {"name": "ingest-mini"}}),
        ]
        kubectl(cluster, "-n", ns, "apply", "-f", "-", stdin="\n---\n".join(yaml.safe_dump(m) for m in manifests))
        phase = lambda name: get_json(cluster, "-n", ns, "get", "lbj", name).get("status", {}).get("phase")  # noqa: E731
        wait_for(lambda: phase("nightly") == "Succeeded", 120, "the nightly job Succeeded")
        wait_for(lambda: phase("slow") == "Running", 60, "the slow job Running")
        wait_for(lambda: phase("pooled") == "Succeeded", 240, "the pooled job Succeeded")
        # a fresh control plane answers 429 while new CRDs' storage initialises; Kopf retries the pool after 60 s
        wait_for(
            lambda: get_json(cluster, "-n", ns, "get", "bpool", "ingest-mini").get("status", {}).get("workers"),
            180,
            "the pool's status",
        )
        configmap = wait_for(
            lambda: next(
                iter(get_json(cluster, "-n", ns, "get", "configmap", "-l", "barge.dev/worker=doc-ingest")["items"]),
                None,
            ),
            60,
            "the worker's ConfigMap",
        )
        config = yaml.safe_load(configmap["data"]["worker.yaml"])
        worker_port = free_port()
        config["metricsPort"] = worker_port  # the Deployment's pod would listen on 9100; here ports are shared
        (workdir / "worker.yaml").write_text(yaml.safe_dump(config))
        r = Redis.from_url(redis_url)
        for n in range(5):
            body = {"correlationId": f"doc-{n}", "payload": {"text": f"contract {n}"}}  # metered to the pool's tenant
            r.xadd(stream, {"body": json.dumps(body)})
        r.xadd(stream, {"body": b"{not json"})  # dead-lettered as invalid
        r.close()
        worker = start(
            [sys.executable, "-m", "barge.cli", "worker", "--config", str(workdir / "worker.yaml")],
            workdir / "worker.log",
            {"BARGE_API_KEY": "sk-monitoring"},
        )
        procs.append(worker)
        wait_for_port(worker_port, worker, "barge worker", 60)
        wait_for(
            lambda: "barge_worker_dead_lettered_total" in fetch(f"http://127.0.0.1:{worker_port}/metrics"), 60, "work"
        )

        # barge gateway (#30.7): its metrics port; a caller of the namespace with a real token uploads a file
        gateway_port, gateway_metrics = free_port(), free_port()
        kubectl(cluster, "-n", ns, "create", "serviceaccount", "app")
        kubectl(cluster, "-n", ns, "create", "role", "batches", "--verb=create,get,list", "--resource=llmbatchjobs")
        kubectl(
            cluster, "-n", ns, "create", "rolebinding", "app-batches", "--role=batches", f"--serviceaccount={ns}:app"
        )
        token = kubectl(cluster, "-n", ns, "create", "token", "app", "--audience=barge", "--duration=1h").strip()
        args = ["gateway", "--port", str(gateway_port), "--metrics-port", str(gateway_metrics)]
        gateway = start(
            [sys.executable, "-m", "barge.cli", *args],
            workdir / "gateway.log",
            {
                "KUBECONFIG": str(cluster.kubeconfig),
                "BARGE_POLICY_FILE": str(policy),
                "BARGE_ALLOWED_FILE_ROOTS": str(workdir),
                "BARGE_SHARED_FILE_ROOTS": "true",
            },
        )
        procs.append(gateway)
        wait_for_port(gateway_port, gateway, "barge gateway", 60)
        base = f"http://127.0.0.1:{gateway_port}/v1"
        request = {"model": "ingest-mini", "messages": [{"role": "user", "content": "classify claim 7"}]}
        upload = workdir / "gateway-in.jsonl"
        upload.write_text(
            json.dumps({"custom_id": "g1", "method": "POST", "url": "/v1/chat/completions", "body": request})
        )
        with upload.open("rb") as handle:
            openai.OpenAI(api_key=token, base_url=base, max_retries=0).files.create(file=handle, purpose="batch")
        with pytest.raises(openai.AuthenticationError):
            openai.OpenAI(api_key="not-a-token", base_url=base, max_retries=0).files.list()

        stack = Stack(ns, operator_port, worker_port, int(vllm.url.rsplit(":", 1)[1]), gateway_metrics)
        prom_port = free_port()
        worker_target = {"namespace": ns, "pod": "ingest-mini-doc-ingest-worker-7d9c-abcde", "container": "worker"}
        rules_file = workdir / "barge-rules.yaml"
        rules_file.write_text(yaml.safe_dump(shipped_rules(gateway=True)))  # the chart's alerts, this Prometheus's
        config_file = workdir / "prometheus.yml"
        config_file.write_text(
            yaml.safe_dump(
                {
                    "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
                    "rule_files": [str(rules_file)],
                    "scrape_configs": [
                        {  # as the ServiceMonitor: job = the metrics Service, honorLabels
                            "job_name": OPERATOR_JOB,
                            "honor_labels": True,
                            "static_configs": [
                                {
                                    "targets": [stack.operator],
                                    "labels": {"namespace": NAMESPACE, "pod": "barge-5d8f7c9b6-x2x9q"},
                                }
                            ],
                        },
                        {  # as the PodMonitor: the pod's namespace and name
                            "job_name": f"{NAMESPACE}/barge-workers",
                            "static_configs": [{"targets": [stack.worker], "labels": worker_target}],
                        },
                        {  # as the gateway's PodMonitor: job <namespace>/<name>, the pod's namespace and name
                            "job_name": GATEWAY_JOB,
                            "static_configs": [
                                {
                                    "targets": [stack.gateway],
                                    "labels": {"namespace": NAMESPACE, "pod": "barge-gateway-6c9d8f7b5-q4w2e"},
                                }
                            ],
                        },
                        {  # as the ServiceMonitor Barge makes for an engine pool
                            "job_name": "serviceMonitor/claims/ingest-mini-vllm/0",
                            "static_configs": [
                                {"targets": [stack.vllm], "labels": {"namespace": ns, "service": "ingest-mini"}}
                            ],
                        },
                    ],
                }
            )
        )
        prometheus = start(
            [
                str(PROMETHEUS),
                f"--config.file={config_file}",
                f"--storage.tsdb.path={workdir / 'tsdb'}",
                f"--web.listen-address=127.0.0.1:{prom_port}",
            ],
            workdir / "prometheus.log",
        )
        procs.append(prometheus)
        wait_for_port(prom_port, prometheus, "prometheus", 60)
        stack.prometheus = f"http://127.0.0.1:{prom_port}"
        wait_for(lambda: answers(f"{stack.prometheus}/-/ready"), 60, "prometheus ready")  # 503 while its TSDB opens
        # every target scraped a few times, so rate() and increase() have samples to work with
        wait_for(lambda: len([s for s in stack.query("count_over_time(up[1m]) >= 5") if s]) == 4, 90, "four targets up")
        yield stack
    finally:
        stop(*reversed(procs))
        for emu in (fast, slow, vllm):
            emu.stop()
        kubectl(cluster, "delete", "namespace", ns, "--wait=false")


def dashboard() -> dict[str, Any]:
    docs = render_chart("metrics.dashboard.enabled=true", "metrics.dashboard.additionalLabels.team=platform")
    (cm,) = [d for d in docs if d["kind"] == "ConfigMap" and d["metadata"]["labels"].get("grafana_dashboard") == "1"]
    assert cm["metadata"]["labels"]["team"] == "platform"
    assert list(cm["data"]) == ["barge.json"]
    return json.loads(cm["data"]["barge.json"])  # type: ignore[no-any-return]


def panel_queries(model: dict[str, Any]) -> list[tuple[str, str]]:
    out = []
    for panel in model["panels"]:
        for target in panel.get("targets", []):
            expr = target["expr"]
            for var, value in GRAFANA_VARS.items():
                expr = expr.replace(var, value)
            out.append((panel["title"], expr))
    return out


def test_the_dashboard_is_a_bare_model_with_a_datasource_variable() -> None:
    model = dashboard()
    assert "dashboard" not in model
    assert model["title"] == "Barge"
    variables = {v["name"]: v for v in model["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    for panel in model["panels"]:
        assert panel["datasource"]["uid"] == "${datasource}", panel["title"]
        assert all(t["datasource"]["uid"] == "${datasource}" for t in panel["targets"]), panel["title"]
    titles = " | ".join(p["title"].lower() for p in model["panels"])
    topics = ("phase", "progress", "cost", "savings", "slack", "batch", "quota", "dead letters", "waiting", "gateway")
    for topic in topics:
        assert topic in titles, topic
    ids = [p["id"] for p in model["panels"]]
    assert len(ids) == len(set(ids))


def test_every_panel_query_returns_data_from_a_real_barge(stack: Stack) -> None:
    empty = [(title, expr) for title, expr in panel_queries(dashboard()) if not stack.query(expr)]
    assert not empty, f"panels without data: {empty}"
    namespaces = json.loads(fetch(f"{stack.prometheus}/api/v1/label/namespace/values?match[]=barge_jobs"))["data"]
    assert stack.namespace in namespaces  # the namespace variable's query


def test_the_panels_show_the_real_numbers(stack: Stack) -> None:
    """Not just data: the values agree with the objects (one Succeeded and one Running job, a worker's work)."""
    phases = {
        s["metric"]["phase"]: float(s["value"][1]) for s in stack.query(f'barge_jobs{{namespace="{stack.namespace}"}}')
    }
    assert phases["Succeeded"] == 2  # nightly, and the job through the provider pool
    assert phases["Running"] == 1
    assert phases["Failed"] == 0
    (ratio,) = stack.query(f'barge_job_success_ratio{{namespace="{stack.namespace}"}}')
    assert float(ratio["value"][1]) == 0  # the slow job: one invalid line finished, its batch not yet
    (slack,) = stack.query(f'barge_deadline_slack_seconds{{namespace="{stack.namespace}"}}')
    assert 5 * 3600 < float(slack["value"][1]) <= 6 * 3600
    (cap,) = stack.query(f'barge_pool_worker_quota_cap{{namespace="{stack.namespace}",worker="doc-ingest"}}')
    assert float(cap["value"][1]) == 1  # 200k TPM / (3,000 x 60) = 1.1
    (answered,) = stack.query('sum(barge_worker_messages_total{outcome="succeeded"})')
    assert float(answered["value"][1]) == 5
    (dead,) = stack.query('sum(barge_worker_dead_lettered_total{reason="invalid"})')
    assert float(dead["value"][1]) == 1
    # the emulator let about a fifth of the nightly job's requests expire; the ledger counted them per batch
    (expired,) = stack.query(f'sum(barge_requests_expired_total{{namespace="{stack.namespace}"}})')
    assert float(expired["value"][1]) > 0
    # the tenant's month to date is what its jobs cost (the ledger's cost counter), against the policy's budget
    (budget,) = stack.query('max by (tenant) (barge_tenant_budget_usd{tenant="claims-team"})')
    assert float(budget["value"][1]) == 1000
    (warn,) = stack.query('max by (tenant) (barge_tenant_budget_warn_usd{tenant="claims-team"})')
    assert float(warn["value"][1]) == 800
    (spent,) = stack.query('max by (tenant) (barge_tenant_spend_usd{tenant="claims-team"})')
    (cost,) = stack.query('sum by (tenant) (max without (instance, pod) (barge_cost_usd_total{tenant="claims-team"}))')
    assert 0 < float(spent["value"][1]) == pytest.approx(float(cost["value"][1]), rel=1e-6)
    waited = stack.query(f'barge_admission_wait_seconds_count{{namespace="{stack.namespace}",pool="ingest-mini"}}')
    assert sum(float(s["value"][1]) for s in waited) == 1  # the pooled job's one wait
    # the gateway: one upload by the namespace's tenant, one call refused before its caller was known (tenant "",
    # which Prometheus stores as no label)
    files = stack.query('barge_gateway_requests_total{route="/v1/files"}')
    codes = {(s["metric"].get("tenant", ""), s["metric"]["code"]): float(s["value"][1]) for s in files}
    assert codes == {("claims-team", "200"): 1, ("", "401"): 1}
    (uploaded,) = stack.query("barge_gateway_upload_bytes_total")
    assert uploaded["metric"]["tenant"] == "claims-team"
    assert float(uploaded["value"][1]) > 100  # the one line's bytes


def test_the_shipped_alerts_evaluate_on_the_real_series(stack: Stack) -> None:
    """Prometheus loads the chart's rules and evaluates them against the real scrapes: every rule healthy, the slow
    job (one invalid line, nothing else finished: ratio 0 < 0.99) makes BargeJobSuccessRatioBelowSpec pending."""

    def evaluated() -> dict[str, dict[str, Any]]:
        body = json.loads(fetch(f"{stack.prometheus}/api/v1/rules?type=alert"))
        rules = {r["name"]: r for g in body["data"]["groups"] for r in g["rules"]}
        return rules if rules and all(r.get("lastEvaluation", "").startswith("20") for r in rules.values()) else {}

    rules = wait_for(evaluated, 30, "the rules evaluated")
    assert {name for name, r in rules.items() if r["health"] != "ok"} == set()
    assert rules["BargeJobSuccessRatioBelowSpec"]["state"] == "pending"
    (alert,) = rules["BargeJobSuccessRatioBelowSpec"]["alerts"]
    assert alert["labels"]["namespace"] == stack.namespace
    assert alert["labels"]["tenant"] == "claims-team"
    for quiet in (
        "BargeJobFailed",
        "BargeOperatorAbsent",
        "BargeLedgerErrors",
        "BargePoolDegraded",
        "BargeGatewayAbsent",
    ):
        assert rules[quiet]["state"] == "inactive", quiet


def _labels_used(expr: str) -> set[str]:
    """Label names an expression groups, joins or matches on."""
    names = set()
    for clause in re.findall(r"\b(?:by|on|without|ignoring)\s*\(([^)]*)\)", expr):
        names |= {n.strip() for n in clause.split(",") if n.strip()}
    for matchers in re.findall(r"\{([^}]*)\}", expr):
        names |= set(re.findall(r"(\w+)\s*(?:=~|!~|!=|=)", matchers))
    return names


def test_every_metric_and_label_the_alerts_and_panels_read_exists_in_the_scrapes(stack: Stack) -> None:
    exprs = [
        (r["alert"], r["expr"], " ".join(r["annotations"].values()))
        for g in shipped_rules(gateway=True)["groups"]
        for r in g["rules"]
    ]
    exprs += [(title, expr, "") for title, expr in panel_queries(dashboard())]
    stored: dict[str, set[str]] = {}
    missing = []
    for name, expr, text in exprs:
        metrics = set(re.findall(r"\b((?:barge_|vllm:)[a-z_:]+|up)\b", expr))
        assert metrics, name
        labels = _labels_used(expr) | set(re.findall(r"\$labels\.(\w+)", text))
        for metric in sorted(metrics):
            if metric not in stored:
                stored[metric] = set().union(*(s["metric"] for s in stack.query(f'{{__name__="{metric}"}}')))
            if not stored[metric]:
                missing.append(f"{name}: no {metric}")
            elif labels - stored[metric]:
                missing.append(f"{name}: {metric} has no {sorted(labels - stored[metric])}")
    assert not missing, missing
    # the operator exports the namespace of what it describes, never a label a scrape target would add
    text = fetch(f"http://{stack.operator}/metrics")
    assert re.search(r'^barge_jobs\{namespace="[^"]+",phase="\w+",tenant="[^"]+"\}', text, re.M)
    assert not (TARGET_LABELS - {"namespace"}) & set(re.findall(r'(\w+)="', text))


def test_the_monitoring_objects_are_accepted_by_the_api_server(cluster: Cluster) -> None:
    """ServiceMonitor, PodMonitor and PrometheusRule against the upstream Prometheus Operator CRDs' schemas."""
    docs = render_chart(
        "metrics.serviceMonitor.enabled=true",
        "metrics.prometheusRule.enabled=true",
        "metrics.dashboard.enabled=true",
        "metrics.dashboard.namespace=grafana",
    )
    kinds = {"ServiceMonitor", "PodMonitor", "PrometheusRule"}
    wanted = [d for d in docs if d["kind"] in kinds or d["metadata"]["name"].endswith("-dashboard")]
    assert {d["kind"] for d in wanted} == kinds | {"ConfigMap"}
    assert next(d for d in wanted if d["kind"] == "ConfigMap")["metadata"]["namespace"] == "grafana"
    for ns in (NAMESPACE, "grafana"):
        cluster.run_kubectl("create", "namespace", ns, check=False)
    out = kubectl(
        cluster, "apply", "--dry-run=server", "-f", "-", stdin="\n---\n".join(yaml.safe_dump(d) for d in wanted)
    )
    assert out.count("(server dry run)") == len(wanted), out
    workers = next(d for d in wanted if d["kind"] == "PodMonitor")
    assert workers["spec"]["namespaceSelector"] == {"any": True}
    namespaced = render_chart(
        "metrics.serviceMonitor.enabled=true", "watch.allNamespaces=false", "watch.namespaces={team-a,team-b}"
    )
    workers = next(d for d in namespaced if d["kind"] == "PodMonitor")
    assert workers["spec"]["namespaceSelector"] == {"matchNames": ["team-a", "team-b"]}  # only the watched ones
