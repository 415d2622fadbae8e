"""What `make demo` builds from Go modules, what is already cached, and how long a cold build takes.

Why: a cold `make demo` sat for half an hour building with no word of what or for how long. The demo uses
etcd, kube-apiserver and kubectl (the local control plane); `localcluster.py up` builds those with
kube-controller-manager (the same Go build) and nothing else: the kubelet and kube-scheduler come only with
`up --node`, and helm, actionlint, argocd and KEDA are `make tools` (the tests).
The durations are the README's (its tool build section): measured once on a busy 2-core machine, not here.

    python3 tools/demo_tools.py     # prints the plan; builds nothing
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

try:  # beside this file: `tools.localcluster` when imported as a package (tests), else by path (demo.sh)
    from tools import localcluster
except ImportError:  # pragma: no cover - run as a script
    import localcluster  # type: ignore[no-redef]


@dataclass(frozen=True)
class Build:
    what: str
    binaries: tuple[str, ...]
    cold: str
    used: bool
    """Whether the demo itself runs it (the others come with the same Go build)."""


#: One entry per Go build that `localcluster.py up` makes, in its order.
BUILDS = (
    Build("etcd", ("etcd",), "~2 min", used=True),
    Build(
        "Kubernetes (kube-apiserver, kubectl; kube-controller-manager from the same build)",
        ("kube-apiserver", "kubectl", "kube-controller-manager"),
        "~20 min",
        used=True,
    ),
)


def missing(build: Build, paths: dict[str, Path]) -> bool:
    return not all(paths[name].exists() for name in build.binaries)


def report(paths: dict[str, Path] | None = None) -> list[str]:
    """The lines `make demo` prints before it starts the control plane."""
    paths = paths if paths is not None else localcluster.binaries()
    todo = [b for b in BUILDS if missing(b, paths)]
    cached = [b.what.split(" (")[0] for b in BUILDS if not missing(b, paths)]
    lines = [
        f"   cache: {localcluster.CACHE} (kubelet, kube-scheduler, helm, actionlint, argocd and KEDA are not built:"
        " the demo does not use them)"
    ]
    if cached:
        lines.append(f"   already built: {', '.join(cached)}")
    if not todo:
        lines.append("   nothing to build")
        return lines
    lines.append("   to build now, once (times measured on a busy 2-core machine; a faster one takes less):")
    for b in todo:
        lines.append(
            f"     - {b.what}: {b.cold}" + ("" if b.used else " (built by localcluster up; the demo does not use it)")
        )
    return lines


def main() -> int:
    print("\n".join(report()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
