"""The local node itself: registered Ready with its loopback address, a Pod of Barge's image passes a real
readiness probe on the host network with `nameserver 127.0.0.1`, and a Deployment's Pods come back when deleted."""

from __future__ import annotations

import json

import pytest
from tools import localcluster, localnode

from tests.node.conftest import free_port, get_json, pod_ready, wait_for

pytestmark = pytest.mark.tools("node")


def test_the_node_is_ready_on_loopback_and_runs_barges_image(node: localcluster.Cluster) -> None:
    got = get_json(node, "node", localnode.NODE_NAME)
    assert got["status"]["nodeInfo"]["kubeletVersion"] == f"v{localcluster.K8S_VERSION}"
    assert {a["type"]: a["address"] for a in got["status"]["addresses"]}["InternalIP"] == "127.0.0.1"
    assert not got["spec"].get("taints")
    port = free_port()
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "emulator-probe", "namespace": "default"},
        "spec": {
            "hostNetwork": True,
            "dnsPolicy": "ClusterFirstWithHostNet",
            "securityContext": {"runAsUser": 10001, "runAsNonRoot": True},
            "containers": [
                {
                    "name": "emulator",
                    "image": "localhost/barge:dev",
                    "imagePullPolicy": "Never",
                    "args": ["emulator", "--host", "127.0.0.1", "--port", str(port)],
                    "securityContext": {"readOnlyRootFilesystem": True, "allowPrivilegeEscalation": False},
                    "readinessProbe": {"httpGet": {"host": "127.0.0.1", "port": port, "path": "/_emulator/state"}},
                }
            ],
        },
    }
    node.run_kubectl("apply", "-f", "-", input=json.dumps(pod))
    ready = wait_for("emulator Pod Ready", lambda: pod_ready(got := get_json(node, "pod", "emulator-probe")) and got)
    assert ready["status"]["podIP"] == "127.0.0.1"
    assert ready["spec"]["nodeName"] == localnode.NODE_NAME
    assert node.run_kubectl("exec", "emulator-probe", "--", "cat", "/etc/resolv.conf").stdout.strip() == (
        "nameserver 127.0.0.1"
    )
    assert "listening on http://127.0.0.1" in node.run_kubectl("logs", "emulator-probe").stdout
    node.run_kubectl("delete", "pod", "emulator-probe", "--wait=true")
