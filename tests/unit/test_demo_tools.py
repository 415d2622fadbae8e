"""`make demo` says what it builds and how long a cold build takes (tools/demo_tools.py; issue 28)."""

from __future__ import annotations

from pathlib import Path

import pytest
from tools import demo_tools, localcluster


def paths(tmp_path: Path) -> dict[str, Path]:
    return {name: tmp_path / name for b in demo_tools.BUILDS for name in b.binaries}


def test_a_cold_cache_lists_every_build_with_its_first_time_duration(tmp_path: Path) -> None:
    text = "\n".join(demo_tools.report(paths(tmp_path)))
    assert "etcd: ~2 min" in text
    assert "kube-apiserver, kubectl" in text
    assert "~20 min" in text
    assert "helm" not in text.split("helm, actionlint, argocd and KEDA are not built")[1]
    assert "kubelet, kube-scheduler, helm, actionlint, argocd and KEDA are not built" in text
    assert "already built" not in text


def test_a_warm_cache_builds_nothing_and_a_partial_one_only_what_is_missing(tmp_path: Path) -> None:
    found = paths(tmp_path)
    for path in found.values():
        path.touch()
    assert demo_tools.report(found)[-1] == "   nothing to build"
    found["kubectl"].unlink()  # one binary of the Kubernetes module: the module is built again
    text = "\n".join(demo_tools.report(found))
    assert "already built: etcd" in text
    assert "~20 min" in text
    assert "etcd: ~2 min" not in text


def test_the_control_plane_build_is_what_the_demo_lists_and_nothing_else(monkeypatch: pytest.MonkeyPatch) -> None:
    """`localcluster.py up` (and so `make demo`) builds etcd and the Kubernetes module only: not helm (~12 min
    cold), not actionlint, argocd or KEDA; `make tools` builds those for the tests."""
    built: list[str] = []
    monkeypatch.setattr(localcluster, "_go_build", lambda module, *_a, **_k: built.append(module))
    localcluster.build(argocd=False, dev_tools=False)
    assert built == ["etcd", "k8s"]
    listed = {name for b in demo_tools.BUILDS for name in b.binaries}
    assert listed == set(localcluster.CONTROL_PLANE)
    built.clear()
    localcluster.build(argocd=False)
    assert built == ["etcd", "k8s", "helm", "actionlint"]
    built.clear()
    localcluster.build(argocd=False, dev_tools=False, node=True)  # `up --node`: the kubelet's build of its own
    assert built == ["etcd", "k8s", "k8s"]


def test_every_go_build_links_without_symbols_and_dwarf_and_keeps_the_version_flags() -> None:
    assert localcluster.link_flags("") == "-s -w"
    assert localcluster.link_flags("-X a.b=c") == "-s -w -X a.b=c"
