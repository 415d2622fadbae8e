"""Workers are metered from the operator's side of the scrape (review 3, M11), with a real Prometheus (Debian's).

A queue worker runs in its pool owner's namespace, and whoever may edit that namespace can restart it with
`tenant: team-b` in its ConfigMap, or run any pod carrying the worker's labels: `barge_worker_tokens{tenant}`
then charges another team. The stand-in for such a pod is a plain HTTP server on loopback serving exactly what a
forged worker would (a real `barge worker` with a forged config serves the same lines): tenant team-b, and a
`namespace` label of team-b too. Prometheus scrapes it twice, with the labels the Prometheus Operator gives a
PodMonitor target in namespace team-a: once as the chart's worker PodMonitor says (its honorLabels and
metricRelabelings, rendered by `helm template` and translated field by field), and once as a plain scrape (the
PodMonitor before the fix), which shows the forgery lands when nothing overwrites it."""

from __future__ import annotations

import http.server
import json
import shutil
import subprocess
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from tools import localcluster

from tests.conftest import free_port, wait_for_port
from tests.integration.test_chart import helm_home, one, render  # noqa: F401 (helm_home: autouse)

PROMETHEUS = shutil.which("prometheus")
pytestmark = pytest.mark.skipif(PROMETHEUS is None, reason="prometheus (Debian package prometheus) is not installed")
FORGED = (
    "# TYPE barge_worker_tokens_total counter\n"
    'barge_worker_tokens_total{pool="p",worker="w",tenant="team-b",kind="input"} 100\n'
    'barge_worker_tokens_total{pool="p",worker="w",tenant="team-b",namespace="team-b",kind="output"} 7\n'
    "# TYPE barge_cost_usd_total counter\n"
    'barge_cost_usd_total{tenant="team-b",model="m",path="sync"} 5\n'  # dressed as the operator's own series
)
TARGET = {"namespace": "team-a", "pod": "p-w-worker-7d9c-abcde", "container": "worker"}
"""What the Prometheus Operator's relabelings give a PodMonitor target (from __meta_kubernetes_*)."""
SNAKE = {"sourceLabels": "source_labels", "targetLabel": "target_label"}


@pytest.fixture(scope="module")
def helm() -> Path:
    return localcluster.build(argocd=False)["helm"]


class _Forged(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        body = FORGED.encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; version=0.0.4")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *_: Any) -> None:
        pass


@pytest.fixture
def forged_worker() -> Iterator[str]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Forged)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def scrape_config(endpoint: dict[str, Any], job: str, target: str) -> dict[str, Any]:
    """A PodMonitor endpoint as the Prometheus Operator writes it into Prometheus' configuration."""
    relabel = [
        {SNAKE.get(k, k): (v.lower() if k == "action" else v) for k, v in rule.items()}
        for rule in endpoint.get("metricRelabelings") or []
    ]
    return {
        "job_name": job,
        "honor_labels": bool(endpoint.get("honorLabels", False)),
        "metrics_path": endpoint.get("path", "/metrics"),
        "metric_relabel_configs": relabel,
        "static_configs": [{"targets": [target], "labels": TARGET}],
    }


def query(prometheus: str, expr: str) -> list[dict[str, Any]]:
    url = f"{prometheus}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
    with urllib.request.urlopen(url, timeout=10) as resp:  # noqa: S310 - loopback
        return json.loads(resp.read())["data"]["result"]  # type: ignore[no-any-return]


def test_a_worker_cannot_charge_another_tenant(helm: Path, tmp_path: Path, forged_worker: str) -> None:
    docs = render(helm, tmp_path, {"metrics": {"serviceMonitor": {"enabled": True}}})
    [endpoint] = one(docs, "PodMonitor", "barge-workers")["spec"]["podMetricsEndpoints"]
    port = free_port()
    config = tmp_path / "prometheus.yml"
    config.write_text(
        yaml.safe_dump(
            {
                "global": {"scrape_interval": "1s"},
                "scrape_configs": [
                    scrape_config(endpoint, "barge-system/barge-workers", forged_worker),
                    scrape_config({"port": "metrics", "path": "/metrics"}, "unrelabelled", forged_worker),
                ],
            }
        )
    )
    log = (tmp_path / "prometheus.log").open("wb")
    proc = subprocess.Popen(
        [
            str(PROMETHEUS),
            f"--config.file={config}",
            f"--storage.tsdb.path={tmp_path / 'tsdb'}",
            f"--web.listen-address=127.0.0.1:{port}",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        wait_for_port(port, proc, "prometheus", 60)
        prometheus = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 60
        while len(query(prometheus, "barge_worker_tokens_total")) < 4:
            assert time.monotonic() < deadline, "no scrape of the forged worker in 60 s"
            time.sleep(0.5)

        metered = query(prometheus, 'barge_worker_tokens_total{job="barge-system/barge-workers"}')
        metered += query(prometheus, 'barge_cost_usd_total{job="barge-system/barge-workers"}')
        assert len(metered) == 3
        for series in metered:
            assert series["metric"]["tenant"] == "team-a", series["metric"]
            assert series["metric"]["namespace"] == "team-a", series["metric"]
        [renamed] = [s for s in metered if s["metric"].get("kind") == "output"]
        assert renamed["metric"]["exported_namespace"] == "team-b"  # kept, visibly, under another name

        # the same pod without the chart's relabelling: the forged tenant is what Prometheus stores
        plain = query(prometheus, 'barge_worker_tokens_total{job="unrelabelled"}')
        assert {s["metric"]["tenant"] for s in plain} == {"team-b"}
        [charged] = query(prometheus, 'sum by (tenant) (barge_worker_tokens_total{job="barge-system/barge-workers"})')
        assert charged["metric"] == {"tenant": "team-a"}
        assert charged["value"][1] == "107"
    finally:
        proc.terminate()
        proc.wait(30)
        log.close()
