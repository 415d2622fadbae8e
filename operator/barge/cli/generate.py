"""`barge crds`: write (or check) every file generated from barge.api and barge.k8s.rbac.

Why one command: `crds/`, the chart's CRDs and RBAC rules, and the README's values and RBAC tables all derive
from the same Python sources; `make crds` writes them together and `make lint` runs the same command with
`--check`, so none can go stale alone.

Barge's CRDs become chart templates (upgraded with the release, kept on uninstall). Kopf's peering CRDs go to
the chart's `crds/` directory instead: Helm creates those before any template, so the peering object can be an
ordinary object of the same release (a hook would be deleted and recreated empty on every upgrade, letting a
paused replica resume), and it skips them when they exist, as they do wherever another Kopf operator runs.
"""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from barge.api.crd import all_crds, render
from barge.api.peering import peering_crds
from barge.k8s import chart as chart_
from barge.k8s.rbac import markdown_table


def generated_files(out: Path, chart: Path | None = None, readme: Path | None = None) -> dict[Path, str]:
    """Path -> the exact text it must have."""
    files = {out / name: render(crd) for name, crd in {**all_crds(), **peering_crds()}.items()}
    if chart is not None:
        files |= {chart / "templates" / "crds" / name: text for name, text in chart_.crd_templates().items()}
        files |= {chart / "crds" / name: render(crd) for name, crd in peering_crds().items()}
        files[chart / "templates" / "_rbac_rules.tpl"] = chart_.rbac_helpers()
    if readme is not None:
        text = readme.read_text()
        if chart is not None:
            schema = json.loads((chart / "values.schema.json").read_text())
            values = yaml.safe_load((chart / "values.yaml").read_text())
            text = chart_.replace_section(text, "values", chart_.values_table(schema, values))
        files[readme] = chart_.replace_section(text, "rbac", markdown_table())
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
