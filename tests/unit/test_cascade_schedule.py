"""A pipeline LLMBatchSchedule (spec.stages) and `barge plan` of a pipeline: the runs' names, each later stage's
fromJob resolved to the same night's job, the run's phase over its stages, and the plan's cost table."""

from __future__ import annotations

import copy
import json
import re
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import ValidationError

from barge.api.batchjob import LLMBatchJob
from barge.api.schedule import LLMBatchSchedule, LLMBatchScheduleSpec
from barge.batch.schedule import Planned, decide
from barge.cli import pipeline_plan, schedule_plan
from barge.cli.demo_data import claims
from barge.k8s.schedule import HELD, SCHEDULED_AT, STAGE_LABEL, build_runs
from barge.operator.schedules import pipeline_runs
from tests.conftest import REPO

SAMPLE = REPO / "manifests" / "samples" / "llmbatchschedule-claims-cascade.yaml"
JOBS = REPO / "manifests" / "samples" / "claims-cascade.yaml"
NIGHT = datetime(2026, 12, 1, 22, 0, tzinfo=UTC)


def schedule() -> dict[str, Any]:
    doc: dict[str, Any] = yaml.safe_load(SAMPLE.read_text())
    doc["metadata"].update({"namespace": "claims", "uid": "u-1"})
    return doc


def test_stages_and_job_template_are_exclusive_and_later_stages_take_from_earlier_ones() -> None:
    spec = schedule()["spec"]
    LLMBatchScheduleSpec.model_validate(spec)
    with pytest.raises(ValidationError, match=r"exactly one of spec\.jobTemplate and spec\.stages"):
        LLMBatchScheduleSpec.model_validate({**spec, "jobTemplate": spec["stages"][0]["jobTemplate"]})
    backwards = copy.deepcopy(spec)
    backwards["stages"].reverse()
    with pytest.raises(ValidationError, match="must name an earlier stage"):
        LLMBatchScheduleSpec.model_validate(backwards)


def test_a_run_is_one_job_per_stage_named_from_schedule_stage_and_time() -> None:
    planned = Planned("claims-cascade-classify-29936040", NIGHT, "2026-12-01", None, held=True)
    first, second = build_runs(schedule(), planned)
    minute = int(NIGHT.timestamp()) // 60
    assert first["metadata"]["name"] == f"claims-cascade-classify-{minute}"
    assert second["metadata"]["name"] == f"claims-cascade-summarise-{minute}"
    assert second["spec"]["input"]["fromJob"]["name"] == first["metadata"]["name"]  # the same night's stage 1
    assert (first["metadata"]["labels"][STAGE_LABEL], second["metadata"]["labels"][STAGE_LABEL]) == (
        "classify",
        "summarise",
    )
    assert first["spec"]["output"]["url"] == "s3://claims-results/2026-12-01/classify/"
    assert HELD in first["metadata"]["annotations"]
    assert HELD not in second["metadata"]["annotations"]  # it waits for its upstream anyway


def test_the_pure_core_creates_the_first_stage_as_the_run() -> None:
    spec = LLMBatchSchedule.model_validate(schedule()).spec
    decision = decide("claims-cascade", spec, NIGHT.replace(hour=21), None, [], NIGHT.replace(minute=1))
    assert decision.create is not None
    assert decision.create.name == f"claims-cascade-classify-{int(NIGHT.timestamp()) // 60}"


def _job(doc: dict[str, Any], phase: str) -> dict[str, Any]:
    return {**doc, "status": {"phase": phase}}


@pytest.mark.parametrize(
    ("phases", "night"),
    [
        (("Succeeded", "Running"), "Running"),
        (("Running", "Pending"), "Running"),
        (("Succeeded", "Failed"), "Failed"),
        (("Succeeded", "Succeeded"), "Succeeded"),
    ],
)
def test_a_night_is_terminal_once_every_stage_is(phases: tuple[str, str], night: str) -> None:
    body = schedule()
    planned = Planned("x", NIGHT, "2026-12-01", None, held=False)
    jobs = [_job(j, p) for j, p in zip(build_runs(body, planned), phases, strict=True)]
    assert all(SCHEDULED_AT in j["metadata"]["annotations"] for j in jobs)
    (run,) = pipeline_runs(body, jobs)
    assert run.name == jobs[0]["metadata"]["name"]
    assert run.phase == night


def _cascade_file(tmp_path: Path) -> Path:
    data = tmp_path / "claims.jsonl"
    data.write_bytes(b"".join(line + b"\n" for line in claims(300)))
    text = JOBS.read_text().replace("file:///var/tmp/barge-demo/claims.jsonl", f"file://{data}")
    path = tmp_path / "cascade.yaml"
    path.write_text(text)
    return path


def test_plan_of_the_cascade_sample_prints_each_stage_and_the_all_large_baseline(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _cascade_file(tmp_path)
    schedule_plan.plan_any(path, 1)
    out = capsys.readouterr().out
    fires = sum(b"fire" in line.split(b'"text"')[1] for line in claims(300))
    assert f"claims-summarise: select on the input: {fires}/300 chosen" in out
    total = re.search(r"cascade total: batch \$([0-9.]+), sync \$([0-9.]+)", out)
    large = re.search(r"all-large baseline \(claude-opus-4-8\): batch \$([0-9.]+), sync \$([0-9.]+)", out)
    assert total
    assert large
    assert float(total.group(1)) < float(large.group(1))
    assert float(total.group(1)) < float(total.group(2))  # batch is half the synchronous price


def test_plan_with_a_sample_of_results_uses_their_outputs(tmp_path: Path) -> None:
    path = _cascade_file(tmp_path)
    sample = tmp_path / "results.jsonl"
    rows = [
        {"id": str(8_800_000 + n), "status": "succeeded", "output": json.dumps({"complex": n < 30})} for n in range(300)
    ]
    sample.write_text("".join(json.dumps(r) + "\n" for r in rows))
    jobs = [LLMBatchJob.model_validate(d) for d in yaml.safe_load_all(path.read_text()) if d]
    plans = pipeline_plan.plan_pipeline(jobs, path, sample)
    assert [round(p.items) for p in plans] == [300, 30]
    assert plans[1].note == "select on the sample: 30/300 chosen"
