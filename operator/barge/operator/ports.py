"""The operator's listening socket for /metrics and /healthz, bound before anything else starts.

Why: bound inside Kopf's start-up activity, a taken port was an error Kopf retried every 60 s, and the process
ran half-started (no metrics, no probes, jobs Pending) with one log line a minute. A Pod whose port cannot be bound
must crash visibly, so `barge operator` binds first and exits non-zero naming the port.
"""

from __future__ import annotations

import errno
import socket

ADDRESS = "0.0.0.0"  # the Pod's port: Prometheus and the kubelet's probes come from outside


class PortUnavailable(Exception):
    """The metrics/health port cannot be listened on; the message names it and what to do."""


def listen(port: int, host: str = ADDRESS) -> socket.socket:
    """A listening TCP socket on host:port (0: a free one), for aiohttp's SockSite."""
    try:
        return socket.create_server((host, port), backlog=128)
    except OSError as exc:
        why = "already in use by another process" if exc.errno == errno.EADDRINUSE else (exc.strerror or str(exc))
        raise PortUnavailable(
            f"cannot listen on port {port} ({host}) for /metrics and /healthz: {why}; "
            "free it or choose another with --metrics-port (0 turns the server off)"
        ) from exc
