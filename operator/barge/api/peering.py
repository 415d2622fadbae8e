"""Kopf's peering CRDs (KopfPeering, ClusterKopfPeering), which the chart ships when it runs several replicas.

Why here: Kopf has no Lease-based leader election; replicas coordinate through a peering object whose status
every replica patches with its identity and priority, and lower priorities pause. The CRDs are Kopf's (group
`kopf.dev`, modelled on `peering.yaml` in Kopf's repository), written as data so the same generator that
writes Barge's CRDs writes these, with no hand-copied YAML.
"""

from __future__ import annotations

from typing import Any, Literal

PEERING_GROUP = "kopf.dev"


def _peering_crd(kind: str, scope: Literal["Cluster", "Namespaced"], description: str) -> dict[str, Any]:
    plural = f"{kind.lower()}s"
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.{PEERING_GROUP}"},
        "spec": {
            "scope": scope,
            "group": PEERING_GROUP,
            "names": {"kind": kind, "plural": plural, "singular": kind.lower()},
            "versions": [
                {
                    "name": "v1",
                    "served": True,
                    "storage": True,
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "description": description,
                            "properties": {
                                "status": {
                                    "type": "object",
                                    "description": "One key per live operator replica: its priority and lifetime.",
                                    "x-kubernetes-preserve-unknown-fields": True,
                                }
                            },
                        }
                    },
                }
            ],
        },
    }


def peering_crds() -> dict[str, dict[str, Any]]:
    """File name -> CRD manifest, for the cluster-wide and the namespaced peering."""
    crds = (
        _peering_crd(
            "ClusterKopfPeering",
            "Cluster",
            "Kopf peering of operator replicas that watch all namespaces (the highest priority runs).",
        ),
        _peering_crd(
            "KopfPeering",
            "Namespaced",
            "Kopf peering of operator replicas that watch this namespace (the highest priority runs).",
        ),
    )
    return {f"{c['metadata']['name']}.yaml": c for c in crds}
