"""Render `manifests/install/` from the chart with its default values (`make manifests`; `--check` for lint).

Why: platform teams that do not run Helm apply plain manifests (`kubectl apply --server-side -f
manifests/install/`) or point Argo CD / Flux / kustomize at them. They must be exactly the chart's output, so
they are rendered by helm itself (the Go-built binary from tools/localcluster.py), never edited by hand, and
`make lint` fails when they differ from a fresh render.

The kustomization is the file `Kustomization` (one of the three names kustomize reads): a file named
`kustomization.yaml` would be picked up by `kubectl apply -f manifests/install/` and refused as an object.
Stdlib only.
"""

from __future__ import annotations

import argparse
import contextlib
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import localcluster

REPO = Path(__file__).resolve().parent.parent
CHART = REPO / "charts" / "barge"
OUT = REPO / "manifests" / "install"
RELEASE, NAMESPACE = "barge", "barge-system"
HEADER = (
    "# Barge, rendered from charts/barge with its default values by `make manifests`; do not edit.\n"
    "# Apply: kubectl apply --server-side -f manifests/install/   (or kubectl apply -k manifests/install/)\n"
)
NAMESPACE_DOC = f"""apiVersion: v1
kind: Namespace
metadata:
  name: {NAMESPACE}
  labels:
    app.kubernetes.io/part-of: barge
    # The operator's pods meet the restricted Pod Security Standard.
    pod-security.kubernetes.io/enforce: restricted
"""
KUSTOMIZATION = """# Barge for kustomize (kubectl apply -k manifests/install/); rendered by `make manifests`.
apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
resources:
  - barge.yaml
"""


def helm() -> Path:
    with contextlib.redirect_stdout(sys.stderr):  # build() reports progress; only the path goes to stdout
        return localcluster.build(argocd=False)["helm"]


def render(helm_binary: Path) -> dict[Path, str]:
    """File -> exact text."""
    out = subprocess.run(
        [str(helm_binary), "template", RELEASE, str(CHART), "--namespace", NAMESPACE, "--include-crds"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    return {OUT / "barge.yaml": HEADER + "---\n" + NAMESPACE_DOC + out, OUT / "Kustomization": KUSTOMIZATION}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check", action="store_true", help="fail if manifests/install/ differs; write nothing")
    opts = parser.parse_args(argv)
    files = render(helm())
    stale = [path for path, text in files.items() if not path.exists() or path.read_text() != text]
    if opts.check:
        if stale:
            print(
                f"stale (run `make manifests`): {', '.join(str(p.relative_to(REPO)) for p in stale)}", file=sys.stderr
            )
            return 1
        return 0
    for path in stale:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(files[path])
        print(f"wrote {path.relative_to(REPO)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
