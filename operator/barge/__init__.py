"""Barge: a Kubernetes operator that takes LLM work nobody is waiting for off the request path.

The package is laid out in layers that point down only (see pyproject's import-linter contracts):
cli -> operator -> k8s | workers | emulator -> batch -> providers | ledger | storage -> api.
"""

__version__ = "0.1.0"
