"""HTTPS for the callers' port (`barge gateway --tls-cert --tls-key`, chart value gateway.tls.secretName).

Why in the gateway and not only at an Ingress: a ServiceAccount token is a bearer credential. Behind an Ingress
that ends TLS, the hop from the ingress controller to the pod, and every caller inside the cluster that talks to
the Service directly, would carry it in clear text. The certificate and key are read once at start-up into one
server context shared by every connection (never a context per request); a file that cannot be read, or a key
that does not match the certificate, stops the gateway at start naming the file, not at the first handshake.
The metrics port stays plain HTTP: it carries no credential and Prometheus scrapes it inside the cluster.

Renewal (cert-manager rewrites the Secret; the kubelet swaps the mounted files): `watch` checks the two files every
RELOAD_SECONDS and loads a changed pair into the same context, so new connections get the new certificate and
open ones go on. A pair that does not load (the certificate already new, the key not yet) keeps the old one
serving and is tried again at the next check, with a warning in the log; never a gateway without a certificate.
"""

from __future__ import annotations

import asyncio
import logging
import os
import ssl
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

log = logging.getLogger("barge.gateway.tls")
RELOAD_SECONDS = 30.0


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


def _signature(cert: Path, key: Path) -> tuple[tuple[int, int, int], ...]:
    """What changes when either file is replaced (a Secret volume swaps a symlink: a new inode)."""
    out = []
    for path in (cert, key):
        try:
            st = os.stat(path)
        except OSError:
            out.append((0, 0, 0))
        else:
            out.append((st.st_ino, st.st_mtime_ns, st.st_size))
    return tuple(out)


@dataclass
class ServerTLS:
    """The callers' port's TLS context and the files it was loaded from."""

    context: ssl.SSLContext
    cert: Path
    key: Path
    loaded: tuple[tuple[int, int, int], ...] = field(default=())

    def reload_if_changed(self) -> bool:
        """Load the pair again if either file changed since the last good load; True when the context now holds
        the new pair. A pair that fails to load keeps the old certificate serving and is retried next time.

        The bytes are read once and tried in a context of their own first: loading into the live context is not
        all or nothing (OpenSSL takes the new certificate, then refuses the old key, and every handshake after
        that fails), and the files may change again between the try and the load."""
        now = _signature(self.cert, self.key)
        if now == self.loaded:
            return False
        try:
            with tempfile.TemporaryDirectory(prefix="barge-tls-") as tmp:
                cert, key = Path(tmp) / "tls.crt", Path(tmp) / "tls.key"
                cert.write_bytes(self.cert.read_bytes())
                key.touch(0o600)
                key.write_bytes(self.key.read_bytes())
                ssl.create_default_context(ssl.Purpose.CLIENT_AUTH).load_cert_chain(str(cert), str(key))
                self.context.load_cert_chain(certfile=str(cert), keyfile=str(key))
        except (ssl.SSLError, OSError) as exc:
            log.warning(
                "TLS pair %s / %s changed but does not load (%s): the previous certificate stays",
                self.cert,
                self.key,
                exc,
            )
            return False
        self.loaded = now
        log.info("TLS certificate %s reloaded", self.cert)
        return True

    async def watch(self, interval: float = RELOAD_SECONDS) -> None:
        """Check the files every `interval` seconds for as long as the gateway runs."""
        while True:
            await asyncio.sleep(interval)
            self.reload_if_changed()


def server_tls(cert: Path | None, key: Path | None) -> ServerTLS | None:
    """server_context with the files kept, for `ServerTLS.watch`; None without either flag."""
    context = server_context(cert, key)
    if context is None or cert is None or key is None:
        return None
    return ServerTLS(context, cert, key, _signature(cert, key))
