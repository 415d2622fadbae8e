"""`barge crds`: write (or check) every file generated from barge.api, barge.k8s.rbac and the rest of the code.

Why one command: `crds/`, the chart's CRDs and RBAC rules, and the documentation site's reference pages
(docs/reference/: CRD fields, CLI, metrics, chart values, RBAC, policy keys; barge.cli.reference) all derive
from the same Python sources; `make crds` writes them together and `make lint` runs the same command with
`--check`, so none can go stale alone.

Barge's CRDs become chart templates (upgraded with the release, kept on uninstall). Kopf's peering CRDs go to
the chart's `crds/` directory instead: Helm creates those before any template, so the peering object can be an
ordinary object of the same release (a hook would be deleted and recreated empty on every upgrade, letting a
paused replica resume), and it skips them when they exist, as they do wherever another Kopf operator runs.
"""

from __future__ import annotations

from pathlib import Path

import typer

from barge.api.crd import all_crds, render
from barge.api.peering import peering_crds
from barge.cli import reference
from barge.k8s import chart as chart_


def generated_files(
    out: Path, chart: Path | None = None, docs: Path | None = None, app: typer.Typer | None = None
) -> dict[Path, str]:
    """Path -> the exact text it must have. `docs` (the reference folder) needs `chart` and the `barge` app."""
    files = {out / name: render(crd) for name, crd in {**all_crds(), **peering_crds()}.items()}
    if chart is not None:
        files |= {chart / "templates" / "crds" / name: text for name, text in chart_.crd_templates().items()}
        files |= {chart / "crds" / name: render(crd) for name, crd in peering_crds().items()}
        files[chart / "templates" / "_rbac_rules.tpl"] = chart_.rbac_helpers()
    if docs is not None:
        if chart is None or app is None:
            raise ValueError("the reference pages need the chart (values) and the barge app (CLI)")
        files |= {docs / name: text for name, text in reference.pages(chart, app).items()}
    return files


def stale(files: dict[Path, str]) -> list[Path]:
    return [path for path, text in files.items() if not path.exists() or path.read_text() != text]


def write(files: dict[Path, str]) -> list[Path]:
    written = []
    for path in stale(files):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(files[path])
        written.append(path)
    return written
