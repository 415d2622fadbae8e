"""Provider adapters: the only modules that import the `anthropic` and `openai` SDKs.

Each adapter turns provider-neutral `Request`s into the provider's batch and sync calls and maps every
answer to a domain `Outcome`; `errors.py` maps SDK exceptions to `Transient` / `Invalid` / `Fatal` once.
"""

from barge.providers.base import (
    BatchInfo,
    BatchProvider,
    Outcome,
    Request,
    Result,
    Usage,
)
from barge.providers.errors import Fatal, Invalid, ProviderError, Transient
from barge.providers.factory import make_provider

__all__ = [
    "BatchInfo",
    "BatchProvider",
    "Fatal",
    "Invalid",
    "Outcome",
    "ProviderError",
    "Request",
    "Result",
    "Transient",
    "Usage",
    "make_provider",
]
