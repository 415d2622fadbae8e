"""What the real node asked of the generated pods (issue 34): an engine pool may replace its image's entrypoint with
a command the admin allows (Barge's own `barge emulator`, which takes vLLM's `serve` flags); on the host's network
engines and workers bind their pod's IP, not every interface of the node; workers get the admin's volumes, a queue
consumer name of their own, and KEDA timings from the spec."""

from __future__ import annotations

import json
from typing import Any

import pytest

from barge.api.pool import InferencePool
from barge.config import OperatorConfig
from barge.k8s import pool as builders
from barge.k8s import workers
from barge.policy import Policy, Refused, check_command, parse


def engine_pool(**engine: Any) -> InferencePool:
    return InferencePool.model_validate(
        {"metadata": {"name": "p", "namespace": "ml", "uid": "u"}, "spec": {"model": "m", "engine": engine}}
    )


def provider_pool(**worker: Any) -> InferencePool:
    return InferencePool.model_validate(
        {
            "metadata": {"name": "p", "namespace": "ml", "uid": "u"},
            "spec": {
                "model": "m",
                "provider": {"type": "openai", "model": "m", "secretRef": {"name": "k"}},
                "workers": [
                    {
                        "name": "w",
                        "queue": {"type": "redis-streams", "address": "r:6379", "stream": "s"},
                        "output": {"url": "file:///data/out/"},
                        **worker,
                    }
                ],
            },
        }
    )


def test_the_engine_command_replaces_the_entrypoint_and_keeps_vllms_flags() -> None:
    container = builders.build_deployment(engine_pool(command=["barge", "emulator"]))["spec"]["template"]["spec"][
        "containers"
    ][0]
    assert container["command"] == ["barge", "emulator"]
    assert container["args"][:4] == ["--model", "m", "--served-model-name", "m"]
    assert "command" not in builders.build_deployment(engine_pool())["spec"]["template"]["spec"]["containers"][0]


def test_only_a_command_the_admin_lists_is_admitted() -> None:
    check_command(Policy(), [])  # the image's own entrypoint: always
    with pytest.raises(Refused, match="not allowed"):
        check_command(Policy(), ["sh", "-c", "curl evil"])
    policy = parse({"pools": {"commands": [["barge", "emulator"]]}})
    check_command(policy, ["barge", "emulator"])
    with pytest.raises(Refused, match="ImagePolicy"):
        check_command(policy, ["barge", "emulator", "--state", "/x"])  # compared whole, never as a prefix
    with pytest.raises(ValueError, match=r"pools\.commands"):
        parse({"pools": {"commands": "barge emulator"}})


def test_on_the_host_network_the_engine_binds_its_pods_ip() -> None:
    pod = builders.build_deployment(engine_pool(port=18000), host_network=True)["spec"]["template"]["spec"]
    container = pod["containers"][0]
    assert container["args"][container["args"].index("--host") + 1] == "$(POD_IP)"
    assert {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}} in container["env"]
    pod = builders.build_deployment(engine_pool())["spec"]["template"]["spec"]
    assert pod["containers"][0]["args"][pod["containers"][0]["args"].index("--host") + 1] == "0.0.0.0"


def test_worker_pods_get_the_admins_volumes_their_own_consumer_name_and_the_pod_ip() -> None:
    pool = provider_pool()
    pods = workers.WorkerPods(
        host_network=True,
        volumes=({"name": "out", "hostPath": {"path": "/data"}},),
        volume_mounts=({"name": "out", "mountPath": "/data"},),
    )
    spec = workers.build_worker_deployment(pool, pool.spec.workers[0], "img", pods=pods)["spec"]["template"]["spec"]
    (container,) = spec["containers"]
    assert {"name": "out", "hostPath": {"path": "/data"}} in spec["volumes"]
    assert {"name": "out", "mountPath": "/data"} in container["volumeMounts"]
    env = {e["name"]: e.get("valueFrom", {}).get("fieldRef", {}).get("fieldPath") for e in container["env"]}
    assert env["POD_NAME"] == "metadata.name"
    assert env[workers.METRICS_HOST_ENV] == "status.podIP"
    assert "ports" not in container
    assert spec["hostNetwork"] is True
    on_pod_network = workers.build_worker_deployment(pool, pool.spec.workers[0], "img")["spec"]["template"]["spec"]
    assert on_pod_network["containers"][0]["ports"] == [{"name": "metrics", "containerPort": workers.WORKER_PORT}]
    assert workers.METRICS_HOST_ENV not in {e["name"] for e in on_pod_network["containers"][0]["env"]}


def test_keda_timings_come_from_the_worker_spec() -> None:
    pool = provider_pool(pollingIntervalSeconds=2, cooldownSeconds=20)
    worker = pool.spec.workers[0]
    scaled = workers.build_worker_scaled_object(pool, worker, workers.quota_caps(pool)["w"])
    assert (scaled["spec"]["pollingInterval"], scaled["spec"]["cooldownPeriod"]) == (2, 20)
    default = provider_pool().spec.workers[0]
    assert (default.polling_interval_seconds, default.cooldown_seconds) == (15, 120)


def test_worker_volumes_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    volumes = {
        "volumes": [{"name": "out", "hostPath": {"path": "/d"}}],
        "volumeMounts": [{"name": "out", "mountPath": "/d"}],
    }
    monkeypatch.setenv("BARGE_WORKER_VOLUMES", json.dumps(volumes))
    config = OperatorConfig.from_env()
    assert config.worker_volumes == ({"name": "out", "hostPath": {"path": "/d"}},)
    assert config.worker_volume_mounts == ({"name": "out", "mountPath": "/d"},)
    monkeypatch.setenv("BARGE_WORKER_VOLUMES", '{"volumes": [{"hostPath": {}}]}')
    with pytest.raises(ValueError, match="with a name"):
        OperatorConfig.from_env()


def test_the_emulator_takes_vllms_serve_flags() -> None:
    from typer.testing import CliRunner

    from barge.cli import main

    seen: dict[str, Any] = {}

    async def fake_serve(host: str, port: int, *_: Any, **kwargs: Any) -> None:
        seen.update(host=host, port=port, **kwargs)

    mp = pytest.MonkeyPatch()
    mp.setattr("barge.emulator.server.serve", fake_serve)
    try:
        args = ["emulator", "--model", "org/m", "--served-model-name", "m", "--host", "127.0.0.1", "--port", "18001",
                "--tensor-parallel-size", "1", "--max-num-batched-tokens", "2048", "--gpu-memory-utilization", "0.9",
                "--max-num-seqs", "8", "--max-model-len", "4096", "--no-enable-chunked-prefill"]  # fmt: skip
        result = CliRunner().invoke(main.app, args)
    finally:
        mp.undo()
    assert result.exit_code == 0, result.output
    assert seen == {"host": "127.0.0.1", "port": 18001, "vllm_model": "m", "max_num_seqs": 8, "api_key": None}
