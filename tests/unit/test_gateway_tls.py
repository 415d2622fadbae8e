"""gateway/tls.py: the server context from --tls-cert/--tls-key, every bad pair refused at start naming it, and a
renewed pair served to new connections (real TLS handshakes on 127.0.0.1)."""

from __future__ import annotations

import asyncio
import os
import shutil
import ssl
from pathlib import Path

import pytest
from typer.testing import CliRunner

from barge.cli.main import app
from barge.gateway.tls import TLSConfigError, server_context, server_tls
from tests.tls_certs import Certs, make_certs


def test_no_flags_is_plain_http() -> None:
    assert server_context(None, None) is None


def test_a_certificate_and_its_key_make_a_tls12_server_context(tmp_path: Path) -> None:
    certs = make_certs(tmp_path)
    context = server_context(certs.cert, certs.key)
    assert isinstance(context, ssl.SSLContext)
    assert context.minimum_version == ssl.TLSVersion.TLSv1_2
    assert not context.check_hostname  # a server context: the clients are not asked for a certificate
    assert context.verify_mode == ssl.CERT_NONE


@pytest.mark.parametrize(
    ("which", "named"),
    [
        ("cert-only", "--tls-cert needs --tls-key"),
        ("key-only", "--tls-key needs --tls-cert"),
        ("missing-cert", "--tls-cert"),
        ("another-key", "not a PEM certificate and its key"),
        ("key-as-cert", "not a PEM certificate and its key"),
    ],
)
def test_a_bad_pair_is_refused_naming_it(tmp_path: Path, which: str, named: str) -> None:
    certs, other = make_certs(tmp_path / "a"), make_certs(tmp_path / "b")
    cert, key = {
        "cert-only": (certs.cert, None),
        "key-only": (None, certs.key),
        "missing-cert": (tmp_path / "nope.crt", certs.key),
        "another-key": (certs.cert, other.key),
        "key-as-cert": (certs.key, certs.key),
    }[which]
    with pytest.raises(TLSConfigError, match=named):
        server_context(cert, key)


def test_the_cli_stops_before_serving_naming_the_missing_flag(tmp_path: Path) -> None:
    certs = make_certs(tmp_path)
    result = CliRunner().invoke(app, ["gateway", "--port", "1", "--tls-cert", str(certs.cert)])
    assert result.exit_code == 2
    assert "--tls-cert needs --tls-key" in result.output


async def _served_by(context: ssl.SSLContext, ca: Path) -> bool:
    """Whether a client trusting only `ca` completes a handshake with a server holding `context` right now."""

    async def answer(_: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.close()

    server = await asyncio.start_server(answer, "127.0.0.1", 0, ssl=context)
    port = server.sockets[0].getsockname()[1]
    try:
        client = ssl.create_default_context(cafile=str(ca))
        try:
            _, writer = await asyncio.open_connection("127.0.0.1", port, ssl=client)
        except ssl.SSLCertVerificationError:
            return False
        writer.close()
        return True
    finally:
        server.close()
        await server.wait_closed()


def _replace(target: Certs, source: Certs, *, cert: bool = True, key: bool = True) -> None:
    """As a Secret volume does: the new file renamed over the old one (a new inode)."""
    for wanted, src, dst in ((cert, source.cert, target.cert), (key, source.key, target.key)):
        if wanted:
            staged = dst.with_suffix(".new")
            shutil.copyfile(src, staged)
            os.replace(staged, dst)


async def test_a_renewed_pair_is_served_to_new_connections_and_a_half_written_one_keeps_the_old(
    tmp_path: Path,
) -> None:
    served, renewed = make_certs(tmp_path / "served"), make_certs(tmp_path / "renewed")
    tls = server_tls(served.cert, served.key)
    assert tls is not None
    assert not tls.reload_if_changed()  # nothing changed since the start
    assert await _served_by(tls.context, served.ca)
    _replace(served, renewed, key=False)  # the certificate renewed, its key not yet written
    assert not tls.reload_if_changed()
    assert await _served_by(tls.context, served.ca)  # the old pair goes on serving
    _replace(served, renewed, cert=False)
    assert tls.reload_if_changed()
    assert await _served_by(tls.context, renewed.ca)
    assert not await _served_by(tls.context, served.ca)
    assert not tls.reload_if_changed()


async def test_the_watch_picks_up_a_renewal_by_itself(tmp_path: Path) -> None:
    served, renewed = make_certs(tmp_path / "served"), make_certs(tmp_path / "renewed")
    tls = server_tls(served.cert, served.key)
    assert tls is not None
    watching = asyncio.create_task(tls.watch(interval=0.05))
    try:
        _replace(served, renewed)
        for _ in range(200):
            if await _served_by(tls.context, renewed.ca):
                break
            await asyncio.sleep(0.05)
        assert await _served_by(tls.context, renewed.ca)
    finally:
        watching.cancel()
