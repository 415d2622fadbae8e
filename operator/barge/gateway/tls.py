"""HTTPS for the callers' port (`barge gateway --tls-cert --tls-key`, chart value gateway.tls.secretName).

Why in the gateway and not only at an Ingress: a ServiceAccount token is a bearer credential. Behind an Ingress
that ends TLS, the hop from the ingress controller to the pod, and every caller inside the cluster that talks to
the Service directly, would carry it in clear text. The certificate and key are read once at start-up into one
server context shared by every connection (never a context per request); a file that cannot be read, or a key
that does not match the certificate, stops the gateway at start naming the file, not at the first handshake.
The metrics port stays plain HTTP: it carries no credential and Prometheus scrapes it inside the cluster.
"""

from __future__ import annotations

import ssl
from pathlib import Path


class TLSConfigError(ValueError):
    """The --tls-cert/--tls-key pair is incomplete or unusable; the message names the flag and the file."""


def server_context(cert: Path | None, key: Path | None) -> ssl.SSLContext | None:
    """The server's TLS context for `cert` (PEM chain) and `key` (PEM), None without either; TLS 1.2 at least."""
    if cert is None and key is None:
        return None
    if cert is None or key is None:
        given, missing = ("--tls-cert", "--tls-key") if key is None else ("--tls-key", "--tls-cert")
        raise TLSConfigError(f"{given} needs {missing} too (HTTPS takes both the certificate and its key)")
    for flag, path in (("--tls-cert", cert), ("--tls-key", key)):
        if not path.is_file():
            raise TLSConfigError(f"{flag} {path}: no such file")
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        context.load_cert_chain(certfile=str(cert), keyfile=str(key))
    except (ssl.SSLError, OSError) as exc:
        raise TLSConfigError(f"--tls-cert {cert} / --tls-key {key}: not a PEM certificate and its key ({exc})") from exc
    return context
