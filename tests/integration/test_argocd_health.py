"""The Argo CD health checks judged by Argo CD itself: `argocd admin settings resource-overrides health` (the
real v3.6 CLI, built from its Go module) evaluates every testdata object of every health_test.yaml with the
generated argocd-cm patch, and STATUS and MESSAGE must match exactly, as upstream's own test does.

The patch is the one users apply, so this also proves the scripts run without the string and math libraries
(argocd-cm scripts do not get them; no useOpenLibs key is set). The testdata are objects captured from real
e2e runs by tests/e2e/test_gitops_capture.py; LLMBatchSchedule's are written in the shape operator/schedules.py
writes (kstatus.schedule_conditions, k8s/schedule.build_status), not captured."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import yaml
from tools import localcluster

from tests.conftest import REPO

pytestmark = pytest.mark.tools("argocd")

ARGOCD_DIR = REPO / "integrations" / "argocd"
PATCH = ARGOCD_DIR / "argocd-cm-patch.yaml"
CASES = sorted((ARGOCD_DIR / "resource_customizations").glob("*/*/health_test.yaml"))


def argocd() -> Path:
    return localcluster.build()["argocd"]


def evaluate(obj: Path, cm: Path = PATCH) -> tuple[str, str]:
    """STATUS and MESSAGE as Argo CD computes them for one object (no cluster needed)."""
    out = subprocess.run(
        [str(argocd()), "admin", "settings", "resource-overrides", "health", str(obj), "--argocd-cm-path", str(cm)],
        capture_output=True,
        text=True,
        check=False,
        env={"HOME": str(obj.parent), "PATH": "/usr/bin:/bin"},
        timeout=60,
    )
    assert out.returncode == 0, f"argocd exited {out.returncode} (20 = Lua error): {out.stderr}{out.stdout}"
    fields = dict(line.split(": ", 1) for line in out.stdout.splitlines() if ": " in line)
    status = fields.get("STATUS", "").strip()
    message = fields.get("MESSAGE", "").strip() if "MESSAGE" in fields else ""
    return status, message


def entries() -> list[tuple[Path, dict[str, str], str]]:
    found = []
    for case in CASES:
        for test in yaml.safe_load(case.read_text())["tests"]:
            found.append(
                (case.parent / test["inputPath"], test["healthStatus"], f"{case.parent.name}/{test['inputPath']}")
            )
    return found


def test_every_kind_has_cases_and_every_testdata_file_is_used() -> None:
    assert {c.parent.name for c in CASES} == {"LLMBatchJob", "InferencePool", "LLMBatchSchedule"}
    for case in CASES:
        used = {t["inputPath"] for t in yaml.safe_load(case.read_text())["tests"]}
        present = {f"testdata/{p.name}" for p in (case.parent / "testdata").glob("*.yaml")}
        assert used == present, case


@pytest.mark.parametrize(("obj", "expected"), [(o, e) for o, e, _ in entries()], ids=[i for *_, i in entries()])
def test_argocd_agrees_with_health_test_yaml(obj: Path, expected: dict[str, str]) -> None:
    assert evaluate(obj) == (expected["status"], expected.get("message", ""))


def test_the_patch_does_not_enable_open_libs() -> None:
    data = yaml.safe_load(PATCH.read_text())["data"]
    assert not [k for k in data if "useOpenLibs" in k]
    assert set(data) == {
        "resource.customizations.health.barge.dev_LLMBatchJob",
        "resource.customizations.health.barge.dev_InferencePool",
        "resource.customizations.health.barge.dev_LLMBatchSchedule",
    }


def test_a_script_that_needs_the_string_library_fails_here(tmp_path: Path) -> None:
    """The harness can fail: string.format is unavailable to argocd-cm scripts, and argocd says so."""
    cm = yaml.safe_load(PATCH.read_text())
    key = "resource.customizations.health.barge.dev_LLMBatchJob"
    cm["data"][key] = cm["data"][key].replace("local hs = {}", 'local hs = {}\nlocal _ = string.format("%d", 1)', 1)
    broken = tmp_path / "argocd-cm.yaml"
    broken.write_text(yaml.safe_dump(cm))
    obj = next(o for o, _, i in entries() if i.startswith("LLMBatchJob/"))
    out = subprocess.run(
        [str(argocd()), "admin", "settings", "resource-overrides", "health", str(obj), "--argocd-cm-path", str(broken)],
        capture_output=True,
        text=True,
        check=False,
        env={"HOME": str(tmp_path), "PATH": "/usr/bin:/bin"},
        timeout=60,
    )
    assert out.returncode != 0 or "STATUS: Unknown" in out.stdout, out.stdout
