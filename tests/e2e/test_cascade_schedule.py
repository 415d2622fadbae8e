"""A pipeline LLMBatchSchedule (spec.stages) end to end: each scheduled time creates one LLMBatchJob per stage,
named from the schedule, the stage and the time, and the later stage takes the same night's first stage."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import yaml
from tools.localcluster import Cluster

from barge.batch.schedule import run_name
from barge.cli.demo_data import claims
from barge.emulator.server import EmulatorThread
from tests.conftest import REPO, kubectl_json
from tests.e2e.conftest import SECRET, Operator, credential_secret, wait_for

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(480)]
SAMPLE = REPO / "manifests" / "samples" / "llmbatchschedule-claims-cascade.yaml"
#: The emulator echoes the prompt (no JSON), so the night's complex claims are the fire ones, as in claims-cascade.yaml.
SELECT = (
    "status == 'succeeded' && (has(output_json.complex) ? output_json.complex == true : input.text.contains('fire'))"
)


def jobs(cluster: Cluster, namespace: str) -> dict[str, dict[str, Any]]:
    found: list[dict[str, Any]] = kubectl_json(
        cluster, "-n", namespace, "get", "lbj", "-l", "barge.dev/schedule=claims-cascade"
    )["items"]  # type: ignore[assignment]
    return {j["metadata"]["name"]: j for j in found}


def test_a_pipeline_schedule_runs_both_stages_of_the_night(
    cluster: Cluster, namespace: str, operator: Operator, start_emulator: Callable[..., EmulatorThread]
) -> None:
    emu = start_emulator({"batch": {"processingSeconds": 2}})
    credential_secret(cluster, namespace, "anthropic", {"api-key": SECRET})
    doc = yaml.safe_load(SAMPLE.read_text())
    spec = doc["spec"]
    spec.update({"schedule": "* * * * *", "timeZone": "UTC", "deadline": {"after": "2h"}})
    spec["concurrencyPolicy"] = "Forbid"
    today = datetime.now(UTC).date()
    for day in (today, today + timedelta(days=1)):
        data = operator.workdir / f"cascade-{day.isoformat()}.jsonl"
        data.write_bytes(b"".join(line + b"\n" for line in claims(40)))
    for stage in spec["stages"]:
        job = stage["jobTemplate"]["spec"]
        job.pop("tenant", None)
        job["provider"]["baseURL"] = emu.url
        job["output"]["url"] = f"file://{operator.workdir}/{namespace}-{stage['name']}-{{runDate}}/"
        if "url" in job["input"]:
            job["input"]["url"] = f"file://{operator.workdir}/cascade-{{runDate}}.jsonl"
        else:
            job["input"]["fromJob"]["select"] = SELECT
    cluster.run_kubectl("-n", namespace, "apply", "-f", "-", input=yaml.safe_dump(doc))

    found = wait_for(
        lambda: len(jobs(cluster, namespace)) >= 2 and jobs(cluster, namespace), 130, "a night's two stages"
    )
    first = min(found.values(), key=lambda j: j["metadata"]["name"])  # classify sorts before summarise
    at = datetime.fromisoformat(first["metadata"]["annotations"]["barge.dev/scheduled-at"].replace("Z", "+00:00"))
    classify, summarise = run_name("claims-cascade-classify", at), run_name("claims-cascade-summarise", at)
    night = {name: found[name] for name in (classify, summarise)}
    assert night[classify]["metadata"]["labels"]["barge.dev/stage"] == "classify"
    assert night[summarise]["metadata"]["labels"]["barge.dev/stage"] == "summarise"
    assert night[summarise]["spec"]["input"]["fromJob"]["name"] == classify  # the same night's stage 1
    assert night[summarise]["spec"]["runDate"] == night[classify]["spec"]["runDate"]
    assert night[summarise]["spec"]["deadline"] == night[classify]["spec"]["deadline"]

    def ended(name: str) -> Callable[[], bool]:
        return lambda: (
            ((jobs(cluster, namespace).get(name) or {}).get("status") or {}).get("phase")
            in (
                "Succeeded",
                "Failed",
            )
        )

    for name in (classify, summarise):
        wait_for(ended(name), 240, name)
    cluster.run_kubectl(
        "-n",
        namespace,
        "patch",
        "llmbatchschedule",
        "claims-cascade",
        "--type=merge",
        "-p",
        '{"spec":{"suspend":true}}',
    )
    done = jobs(cluster, namespace)
    assert [done[n]["status"]["phase"] for n in (classify, summarise)] == ["Succeeded", "Succeeded"]
    run_date = night[classify]["spec"]["runDate"]
    inputs = {c["id"]: c for c in map(json.loads, claims(40))}
    upstream = (operator.workdir / f"{namespace}-classify-{run_date}" / "results.jsonl").read_text().splitlines()
    expected = {r["id"] for r in map(json.loads, upstream) if "fire" in inputs[r["id"]]["text"]}
    taken = (operator.workdir / f"{namespace}-summarise-{run_date}" / "results.jsonl").read_text().splitlines()
    assert {r["id"] for r in map(json.loads, taken)} == expected
    assert expected
