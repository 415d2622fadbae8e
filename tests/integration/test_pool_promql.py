"""An InferencePool's `spec.model` pasted into the KEDA ScaledObject's PromQL could add a query of its own (issue 12):
the generated query is evaluated with `promtool test rules` (Debian's prometheus package) against series where
the hostile model name is a plain label value, and must see exactly that series."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from barge.api.pool import InferencePool
from barge.k8s.pool import build_scaled_object, promql_string

PROMTOOL = shutil.which("promtool")
pytestmark = pytest.mark.skipif(PROMTOOL is None, reason="promtool (Debian package prometheus) is not installed")
HOSTILE = 'm"}) or vector(1000) or sum(x{a="'


def test_model_name_in_promql_cannot_inject_a_query(tmp_path: Path) -> None:
    pool = InferencePool.model_validate(
        {
            "metadata": {"name": "p", "namespace": "team-a", "uid": "u"},
            "spec": {"model": HOSTILE, "engine": {"gpus": 1, "autoscaling": {"minReplicas": 0, "maxReplicas": 2}}},
        }
    )
    scaled = build_scaled_object(pool, "http://prometheus:9090")
    assert scaled is not None
    query = scaled["spec"]["triggers"][0]["metadata"]["query"]
    series = f"vllm:num_requests_waiting{{namespace={promql_string('team-a')},model_name={promql_string(HOSTILE)}}}"
    other = 'vllm:num_requests_waiting{namespace="team-b",model_name="m"}'
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump({"groups": []}))
    (tmp_path / "test.yaml").write_text(
        yaml.safe_dump(
            {
                "rule_files": ["rules.yaml"],
                "evaluation_interval": "1m",
                "tests": [
                    {
                        "interval": "1m",
                        "input_series": [{"series": series, "values": "3x5"}, {"series": other, "values": "7x5"}],
                        "promql_expr_test": [
                            {"expr": query, "eval_time": "2m", "exp_samples": [{"labels": "{}", "value": 3}]}
                        ],
                    }
                ],
            }
        )
    )
    out = subprocess.run(
        [str(PROMTOOL), "test", "rules", "test.yaml"], cwd=tmp_path, capture_output=True, text=True, check=False
    )
    assert out.returncode == 0, out.stdout + out.stderr
