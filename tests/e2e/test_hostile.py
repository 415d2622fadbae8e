"""What a job that brings trouble does to the shared operator: it ends in a visible state (a condition, an event,
a counted reason) and never stalls other jobs. `barge operator` runs as a process against the real control plane.
"""

from __future__ import annotations

import http.server
import json
import threading
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml
from tools.localcluster import Cluster

from barge.emulator.server import EmulatorThread
from barge.ledger import Ledger
from tests.conftest import state
from tests.e2e.conftest import Operator, wait_for
from tests.e2e.test_operator import apply, job_manifest, phase_is, secret, status

pytestmark = pytest.mark.cluster


def conditions(cluster: Cluster, namespace: str, name: str) -> dict[str, dict[str, Any]]:
    return {c["type"]: c for c in status(cluster, namespace, name).get("conditions", [])}


def events(cluster: Cluster, namespace: str, name: str) -> list[dict[str, Any]]:
    out = cluster.run_kubectl(
        "-n", namespace, "get", "events", "--field-selector", f"involvedObject.name={name}", "-o", "json"
    )
    return list(json.loads(out.stdout)["items"])


def step_errors(operator: Operator, reason: str) -> float:
    for line in operator.metrics().splitlines():
        if line.startswith(f'barge_job_step_errors_total{{reason="{reason}"}}'):
            return float(line.split()[-1])
    return 0.0


def test_bad_template_is_not_admitted_and_says_why(
    cluster: Cluster, namespace: str, operator: Operator, emulator: EmulatorThread
) -> None:
    secret(cluster, namespace)
    doc = yaml.safe_load(job_manifest("badtpl", emulator.url, operator.workdir, n=10))
    doc["spec"]["request"]["template"] = "{{ text "
    apply(cluster, namespace, yaml.safe_dump(doc))

    def refused() -> bool:
        return conditions(cluster, namespace, "badtpl").get("Admitted", {}).get("reason") == "TemplateError"

    wait_for(refused, 60, "Admitted=False TemplateError")
    conds = conditions(cluster, namespace, "badtpl")
    assert conds["Admitted"]["status"] == "False"
    assert "does not compile" in conds["Admitted"]["message"]
    assert conds["StepFailed"]["status"] == "True"
    assert status(cluster, namespace, "badtpl")["phase"] == "Pending"
    wait_for(lambda: any(e["reason"] == "TemplateError" for e in events(cluster, namespace, "badtpl")), 30, "event")
    assert step_errors(operator, "TemplateError") >= 1


def test_failing_steps_still_meet_the_deadline(
    cluster: Cluster, namespace: str, operator: Operator, emulator: EmulatorThread
) -> None:
    """Results can never be written (output outside the tenant's storage prefixes): the job is refused, visibly,
    and at the deadline it is Failed instead of waiting forever."""
    secret(cluster, namespace)
    deadline = (datetime.now(UTC) + timedelta(seconds=20)).strftime("%Y-%m-%dT%H:%M:%SZ")
    doc = yaml.safe_load(job_manifest("nowhere", emulator.url, operator.workdir, n=20, deadline=deadline))
    doc["spec"]["output"]["url"] = "file:///var/empty/not-allowed/"
    apply(cluster, namespace, yaml.safe_dump(doc))
    wait_for(lambda: conditions(cluster, namespace, "nowhere").get("Admitted"), 60, "Admitted")
    assert conditions(cluster, namespace, "nowhere")["Admitted"]["reason"] == "StoragePolicy"
    wait_for(phase_is(cluster, namespace, "nowhere", "Failed"), 90, "Failed at the deadline")
    conds = conditions(cluster, namespace, "nowhere")
    assert conds["Failed"]["reason"] == "DeadlinePassedWhileFailing"
    assert "storage prefixes" in conds["Failed"]["message"]
    assert conds["DeadlineExceeded"]["status"] == "True"
    assert any(e["reason"] == "Failed" and e["type"] == "Warning" for e in events(cluster, namespace, "nowhere"))


class ProxyErrorPage(http.server.BaseHTTPRequestHandler):
    """A broken proxy in front of the provider: every call gets a 40 KB HTML error page."""

    PAGE = ("<html><body>" + "502 Bad Gateway: upstream unavailable. " * 1100 + "</body></html>").encode()

    def _answer(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.send_response(502)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(self.PAGE)))
        self.end_headers()
        self.wfile.write(self.PAGE)

    do_GET = do_POST = _answer

    def log_message(self, *_: Any) -> None:
        pass


def test_huge_error_page_is_bounded_in_status_and_events(cluster: Cluster, namespace: str, operator: Operator) -> None:
    """The status patch used to fail on a copied 40 KB page (conditions cap messages at 32,768): it is cut."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), ProxyErrorPage)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        secret(cluster, namespace)
        url = f"http://127.0.0.1:{server.server_address[1]}"
        apply(cluster, namespace, job_manifest("proxied", url, operator.workdir, n=5))
        wait_for(lambda: conditions(cluster, namespace, "proxied").get("StepFailed"), 90, "StepFailed")
        st = status(cluster, namespace, "proxied")
        cond = conditions(cluster, namespace, "proxied")["StepFailed"]
        assert cond["reason"] == "ProviderUnavailable"
        assert "502" in cond["message"]
        assert "truncated" in cond["message"]
        assert len(cond["message"]) <= 1024
        assert len(st["message"]) <= 1200
        wait_for(lambda: events(cluster, namespace, "proxied"), 30, "events")
        assert all(len(e["message"]) <= 1024 for e in events(cluster, namespace, "proxied"))
    finally:
        server.shutdown()


def test_300_kib_spec_runs_and_stays_updatable(
    cluster: Cluster, namespace: str, operator: Operator, emulator: EmulatorThread
) -> None:
    """Kopf's diff-base annotation would copy this spec and break every later update (annotations <= 256 KiB)."""
    secret(cluster, namespace)
    doc = yaml.safe_load(job_manifest("bigspec", emulator.url, operator.workdir, n=10))
    doc["spec"]["request"]["system"] = "Classify carefully. " * 12_000  # 240 KB
    doc["spec"]["request"]["template"] = "{# " + "notes " * 12_000 + "#}{{ text }}"  # 72 KB
    body = yaml.safe_dump(doc)
    assert len(body) > 300 * 1024
    cluster.run_kubectl("-n", namespace, "apply", "--server-side", "-f", "-", input=body)
    wait_for(phase_is(cluster, namespace, "bigspec", "Succeeded"), 120, "Succeeded")
    out = cluster.run_kubectl("-n", namespace, "get", "lbj", "bigspec", "-o", "json")
    meta = json.loads(out.stdout)["metadata"]
    annotations = meta.get("annotations") or {}
    assert sum(len(k) + len(v) for k, v in annotations.items()) < 16 * 1024
    # Kopf's own patch (finalizer + diff-base) used to be refused as too long: no finalizer, no cancel on delete.
    assert "barge.dev/finalizer" in meta.get("finalizers", [])
    assert "Too long" not in operator.output()
    cluster.run_kubectl(
        "-n", namespace, "patch", "lbj", "bigspec", "--type=merge", "-p", '{"spec":{"budget":{"maxCostUSD":"99"}}}'
    )
    cluster.run_kubectl("-n", namespace, "label", "lbj", "bigspec", "checked=yes")


HOSTILE_TEMPLATES = {
    "huge-repeat": "{{ 'x' * 10**9 }}",
    "huge-power": "{{ 10**(10**10) }}",
    "cpu-loops": "{% for i in range(10000) %}{% for j in range(10000) %}{% endfor %}{% endfor %}{{ text }}",
    "memory-doubling": "{% set ns = namespace(x='ab') %}{% for i in range(60) %}{% set ns.x = ns.x ~ ns.x %}"
    "{% endfor %}{{ ns.x|length }}",
    "recursive-macro": "{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}",
}


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def run_healthy(cluster: Cluster, namespace: str, operator: Operator, url: str, name: str) -> dict[str, float]:
    """Start a healthy job and follow it to Succeeded; returns seconds to each phase change, and the peak RSS."""
    assert operator.proc is not None
    start = time.monotonic()
    apply(cluster, namespace, job_manifest(name, url, operator.workdir, n=300))
    seen: dict[str, float] = {}
    peak = 0.0
    while "Succeeded" not in seen:
        st = status(cluster, namespace, name)
        phase = st.get("phase", "")
        seen.setdefault(phase, time.monotonic() - start)
        peak = max(peak, rss_mib(operator.proc.pid))
        assert phase != "Failed", st
        assert time.monotonic() - start < 300, f"healthy job stuck in {phase}: {seen}"
        time.sleep(0.25)
    return {**seen, "rss_peak_mib": peak}


def test_hostile_jobs_beside_a_healthy_one(
    cluster: Cluster, namespace: str, operator: Operator, emulator: EmulatorThread
) -> None:
    """One job per hostile input, started together with a healthy job: each hostile job ends in a visible state,
    the healthy one keeps moving and Succeeds, and the operator's memory stays bounded (the work is the
    planner processes'). Figures are printed for the record (run with -s); only outcomes are asserted."""
    assert operator.proc is not None
    secret(cluster, namespace)
    alone = run_healthy(cluster, namespace, operator, emulator.url, "healthy-alone")
    rss_before = rss_mib(operator.proc.pid)
    for name, template in HOSTILE_TEMPLATES.items():
        doc = yaml.safe_load(job_manifest(name, emulator.url, operator.workdir, n=20))
        doc["spec"]["request"]["template"] = template
        apply(cluster, namespace, yaml.safe_dump(doc))
    long_line = operator.workdir / "one-48mb-line.jsonl"
    with long_line.open("wb") as out:
        out.write(b'{"id": "a", "policy": "P-1", "text": "fine"}\n{"id": "b", "policy": "P-2", "text": "')
        out.write(b"z" * (48 * 1024 * 1024))  # 48 MB and no newline until the end
        out.write(b'"}\n{"id": "c", "policy": "P-3", "text": "fine too"}\n')
    doc = yaml.safe_load(job_manifest("long-line", emulator.url, operator.workdir, n=2, successRatio="0.5"))
    doc["spec"]["input"]["url"] = f"file://{long_line}"
    apply(cluster, namespace, yaml.safe_dump(doc))
    beside = run_healthy(cluster, namespace, operator, emulator.url, "healthy-beside")

    def template_refused(name: str) -> bool:
        admitted = conditions(cluster, namespace, name).get("Admitted", {})
        return admitted.get("status") == "False" and admitted.get("reason") == "TemplateError"

    for name in HOSTILE_TEMPLATES:
        wait_for(lambda name=name: template_refused(name), 240, f"{name}: Admitted=False TemplateError")
        assert "limit" in conditions(cluster, namespace, name)["Admitted"]["message"]
    try:
        wait_for(phase_is(cluster, namespace, "long-line", "Succeeded"), 120, "long-line Succeeded")
    except TimeoutError:
        pytest.fail(f"long-line: {status(cluster, namespace, 'long-line')}")
    counts = status(cluster, namespace, "long-line")["counts"]
    assert counts["invalid"] == 1
    assert counts["succeeded"] + counts["refused"] == 2
    rss_after = rss_mib(operator.proc.pid)
    print(
        f"\nhealthy job alone: {alone}\nhealthy job beside {len(HOSTILE_TEMPLATES) + 1} hostile jobs: {beside}\n"
        f"operator RSS MiB: before hostile {rss_before:.0f}, peak while beside {beside['rss_peak_mib']:.0f}, "
        f"after {rss_after:.0f}"
    )
    assert beside["rss_peak_mib"] < rss_before + 300, "hostile templates must not grow the operator's memory"


def test_ledger_lost_under_a_running_job_makes_no_second_batch(
    cluster: Cluster, namespace: str, operator: Operator, start_emulator: Any
) -> None:
    """The operator restarts without its ledger (a container without a volume) while a job has a batch in
    flight: the job stops with LedgerMismatch instead of submitting its items again."""
    slow = start_emulator({"batch": {"processingSeconds": 300}})
    secret(cluster, namespace)
    apply(cluster, namespace, job_manifest("amnesia", slow.url, operator.workdir, n=40))
    wait_for(lambda: status(cluster, namespace, "amnesia").get("batches"), 60, "a batch in the status")
    operator.kill()
    for path in operator.workdir.glob("l.db*"):
        path.unlink()
    operator.start()
    wait_for(
        lambda: conditions(cluster, namespace, "amnesia").get("LedgerMismatch", {}).get("status") == "True",
        60,
        "LedgerMismatch",
    )
    time.sleep(3)  # several polls (0.5 s): none may submit
    assert len(state(slow)["batches"]) == 1, "one batch per shard, even after the ledger was lost"
    st = status(cluster, namespace, "amnesia")
    assert [b["id"] for b in st["batches"]] == [state(slow)["batches"][0]["id"]], "the status keeps the record"
    assert any(e["reason"] == "LedgerMismatch" for e in events(cluster, namespace, "amnesia"))


def test_delete_during_submission_cancels_every_batch(
    cluster: Cluster, namespace: str, operator: Operator, start_emulator: Any
) -> None:
    """`kubectl delete` while the daemon is creating shards (200 requests each here): the delete handler waits
    for the create in flight and the daemon creates nothing after it, so no batch is left running unseen. Each
    create takes 0.5 s in the emulator: submission is fast enough that all 20 shards were otherwise created before
    `kubectl delete` could arrive, and the test proved nothing."""
    slow = start_emulator({"batch": {"processingSeconds": 300, "cancelSeconds": 0.2, "createSeconds": 0.5}})
    secret(cluster, namespace)
    apply(cluster, namespace, job_manifest("racer", slow.url, operator.workdir, n=4000))
    wait_for(lambda: state(slow)["batches"], 120, "the first batch")
    cluster.run_kubectl("-n", namespace, "delete", "lbj", "racer", "--wait=true", "--timeout=120s")
    time.sleep(2)  # a daemon that kept going would create more batches now
    batches = state(slow)["batches"]
    assert 1 <= len(batches) < 20
    assert all(slow.store.batches[b["id"]].cancel_at is not None for b in batches), "every batch was cancelled"


def test_delete_without_the_secret_names_what_it_could_not_cancel(
    cluster: Cluster, namespace: str, operator: Operator, start_emulator: Any
) -> None:
    slow = start_emulator({"batch": {"processingSeconds": 300}})
    secret(cluster, namespace)
    apply(cluster, namespace, job_manifest("orphaned", slow.url, operator.workdir, n=30))
    wait_for(lambda: status(cluster, namespace, "orphaned").get("batches"), 60, "a batch")
    (batch,) = state(slow)["batches"]
    uid = json.loads(cluster.run_kubectl("-n", namespace, "get", "lbj", "orphaned", "-o", "json").stdout)["metadata"][
        "uid"
    ]
    cluster.run_kubectl("-n", namespace, "delete", "secret", "anthropic")
    cluster.run_kubectl("-n", namespace, "delete", "lbj", "orphaned", "--wait=true", "--timeout=60s")
    assert cluster.run_kubectl("-n", namespace, "get", "lbj", "orphaned", check=False).returncode != 0
    warnings = [e for e in events(cluster, namespace, "orphaned") if e["reason"] == "CancelFailed"]
    assert warnings
    assert batch["id"] in warnings[0]["message"]
    assert warnings[0]["type"] == "Warning"
    kept = Ledger(str(operator.workdir / "l.db")).batches_of(f"{namespace}/orphaned/{uid}")
    assert [(b["batch_id"], b["canceled"]) for b in kept] == [(batch["id"], False)], "kept in the ledger"
