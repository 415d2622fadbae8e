"""gateway/tls.py: the server context from --tls-cert/--tls-key, and every bad pair refused at start naming it."""

from __future__ import annotations

import ssl
from pathlib import Path

import pytest
from typer.testing import CliRunner

from barge.cli.main import app
from barge.gateway.tls import TLSConfigError, server_context
from tests.tls_certs import make_certs


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
