"""A real node for the tests in tests/node: the control plane of tools/localcluster.py with a kubelet, a scheduler
and containerd (tools/localnode.py), Barge's image from `make image` (tools/image.py) imported into it.

One node per session (and per machine: the kubelet owns the host's /kubepods cgroups). Its teardown is checked:
no process, mount or cgroup left, the sysctls the kubelet changed restored.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from tools import image, localcluster, localnode


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The first test on the node pays for the image build (~6 min cold on 2 busy cores) and the node's start."""
    for item in items:
        if "tests/node/" in str(item.path) and not item.get_closest_marker("timeout"):
            item.add_marker(pytest.mark.timeout(1800))


@pytest.fixture(scope="session")
def barge_image() -> Path:
    """The image of the code under test (BARGE_IMAGE_ANY=1: the newest built, while iterating on tests only)."""
    return (image.latest_archive() if os.environ.get("BARGE_IMAGE_ANY") == "1" else None) or image.build()


@pytest.fixture(scope="session")
def node(barge_image: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[localcluster.Cluster]:
    reuse = os.environ.get("BARGE_TEST_NODE_DIR")  # a node started by `localcluster.py up --node --dir D`, kept
    if reuse:
        yield localcluster.up(Path(reuse), node=True)
        return
    directory = tmp_path_factory.mktemp("node")
    sysctls = {name: (Path("/proc/sys") / name).read_text() for name in localnode.SYSCTLS}
    started = time.monotonic()
    cluster = localcluster.up(directory, node=True, images={image.TAG.rsplit(":", 1)[0]: barge_image})
    print(f"node up in {time.monotonic() - started:.1f}s")
    # No CRDs here: the chart installs Barge's (helm refuses to adopt CRDs it did not create).
    yield cluster
    localcluster.down(directory)
    assert localnode.leftovers(directory) == {"processes": [], "mounts": [], "cgroups": []}
    assert {name: (Path("/proc/sys") / name).read_text() for name in localnode.SYSCTLS} == sysctls


def get_json(cluster: localcluster.Cluster, *args: str) -> Any:
    return json.loads(cluster.run_kubectl("get", *args, "-o", "json").stdout)


def wait_for(what: str, ok: Callable[[], Any], timeout: float = 180, every: float = 1.0) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = ok()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not reached in {timeout:.0f}s")
        time.sleep(every)


def pod_ready(pod: dict[str, Any]) -> bool:
    conditions = {c["type"]: c["status"] for c in pod.get("status", {}).get("conditions", [])}
    return conditions.get("Ready") == "True"


def free_port() -> int:
    return localcluster._free_port()


def run(*args: str, **kwargs: Any) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, check=True, capture_output=True, text=True, **kwargs)
