"""The image recipe, as far as it can be checked without a container runtime (none exists on these machines).

The Dockerfile installs `tools/runtime_requirements.py requirements.lock` with `--require-hashes` and copies the
package source in. This test does the same into a fresh virtualenv, from uv's cache (filled by `make venv`; no
network), and imports every module of the package: a runtime dependency missing from the filtered lock fails
here instead of in a pod. What it cannot check: the base image and the build itself.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
UV = Path(sys.executable).parent / "uv"


def test_dockerfile_installs_the_hashed_runtime_pins_as_non_root() -> None:
    text = (REPO / "Dockerfile").read_text()
    assert text.count("FROM ${PYTHON_IMAGE}") == 2
    assert "ARG PYTHON_IMAGE=python:3.11-slim" in text
    assert "runtime_requirements.py requirements.lock > runtime.lock" in text
    assert "--require-hashes" in text
    assert "USER 10001:10001" in text
    assert 'ENTRYPOINT ["barge"]' in text
    ignored = (REPO / ".dockerignore").read_text()
    assert "!requirements.lock" in ignored
    assert "!tools/runtime_requirements.py" in ignored


def test_runtime_pins_install_offline_and_import_every_module(tmp_path: Path) -> None:
    lock = tmp_path / "runtime.lock"
    out = subprocess.run(
        [sys.executable, str(REPO / "tools" / "runtime_requirements.py"), str(REPO / "requirements.lock")],
        capture_output=True,
        text=True,
        check=True,
    )
    lock.write_text(out.stdout)
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    sync = subprocess.run(
        [str(UV), "pip", "sync", "--offline", "--quiet", "--python", str(python), "--require-hashes", str(lock)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert sync.returncode == 0, sync.stderr
    site = next((venv / "lib").glob("python3.*/site-packages"))
    shutil.copytree(REPO / "operator" / "barge", site / "barge", ignore=shutil.ignore_patterns("__pycache__"))
    script = (
        "import importlib, pkgutil, barge\n"
        "mods = pkgutil.walk_packages(barge.__path__, 'barge.')\n"
        "names = [m.name for m in mods if not m.name.endswith('.__main__')]\n"
        "for name in names: importlib.import_module(name)\n"
        "print(len(names))\n"
        "import importlib.util\n"
        "assert importlib.util.find_spec('pytest') is None\n"
    )
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    run = subprocess.run(
        [str(python), "-c", script], capture_output=True, text=True, check=False, env=env, cwd=tmp_path
    )
    assert run.returncode == 0, run.stderr
    assert int(run.stdout.strip()) > 40
    cli = subprocess.run(
        [str(python), "-c", "import sys; from barge.cli.main import app; sys.argv = ['barge', 'version']; app()"],
        capture_output=True,
        text=True,
        check=False,
        env=env,
        cwd=tmp_path,
    )
    assert cli.stdout.strip() == "0.1.0", cli.stderr
