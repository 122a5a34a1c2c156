"""Tests for ``kimi-ops agent gen-cert``: the real command in a subprocess."""

from __future__ import annotations

import hashlib
import ipaddress
import ssl
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.serialization import load_pem_private_key

# Real subprocesses: not in the fast loop.
pytestmark = pytest.mark.slow


def gen_cert(out: Path, *hosts: str) -> subprocess.CompletedProcess[str]:
    """Run ``kimi-ops agent gen-cert --out OUT --host H ...``."""
    args = [arg for host in hosts for arg in ("--host", host)]
    return subprocess.run(
        [sys.executable, "-m", "bot", "agent", "gen-cert", "--out", str(out), *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_writes_a_pair_and_prints_the_certificates_sha256(tmp_path: Path) -> None:
    """stdout is one line: sha256 of the written certificate's DER, worked out here by hashlib."""
    result = gen_cert(tmp_path / "tls", "kimi-01.internal", "10.0.0.7")
    assert result.returncode == 0, result.stderr
    pem = (tmp_path / "tls" / "agent.crt").read_text()
    expected = "sha256:" + hashlib.sha256(ssl.PEM_cert_to_DER_cert(pem)).hexdigest()
    assert result.stdout == expected + "\n"
    assert "tls_cert" in result.stderr


def test_key_is_private_and_belongs_to_the_certificate(tmp_path: Path) -> None:
    """The key file is mode 0600, the certificate 0644, and the key signs for the certificate."""
    assert gen_cert(tmp_path, "kimi-01").returncode == 0
    key_path, cert_path = tmp_path / "agent.key", tmp_path / "agent.crt"
    assert stat.S_IMODE(key_path.stat().st_mode) == 0o600
    assert stat.S_IMODE(cert_path.stat().st_mode) == 0o644
    key = load_pem_private_key(key_path.read_bytes(), password=None)
    assert isinstance(key, ec.EllipticCurvePrivateKey)
    cert = x509.load_pem_x509_certificate(cert_path.read_bytes())
    assert cert.public_key() == key.public_key()
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert_path, key_path)  # OpenSSL's own pair check


def test_names_every_host_plus_localhost(tmp_path: Path) -> None:
    """The SANs hold each --host (names as DNS, addresses as IP) and localhost and 127.0.0.1."""
    assert gen_cert(tmp_path, "kimi-01.internal", "10.0.0.7", "::1").returncode == 0
    cert = x509.load_pem_x509_certificate((tmp_path / "agent.crt").read_bytes())
    sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert set(sans.get_values_for_type(x509.DNSName)) == {"kimi-01.internal", "localhost"}
    assert set(sans.get_values_for_type(x509.IPAddress)) == {
        ipaddress.ip_address("10.0.0.7"),
        ipaddress.ip_address("::1"),
        ipaddress.ip_address("127.0.0.1"),
    }
    usage = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert x509.oid.ExtendedKeyUsageOID.SERVER_AUTH in usage


def test_an_existing_pair_is_never_overwritten(tmp_path: Path) -> None:
    """A second run into the same folder exits 2 naming the file; both files stay as they were."""
    assert gen_cert(tmp_path, "kimi-01").returncode == 0
    before = {name: (tmp_path / name).read_bytes() for name in ("agent.crt", "agent.key")}
    again = gen_cert(tmp_path, "kimi-01")
    assert again.returncode == 2
    assert "agent.crt" in again.stderr
    assert "exists" in again.stderr
    assert again.stdout == ""
    assert {name: (tmp_path / name).read_bytes() for name in before} == before


@pytest.mark.parametrize("host", ["two words", "https://kimi-01", "lead-", ""])
def test_a_bad_host_is_refused_and_writes_nothing(tmp_path: Path, host: str) -> None:
    """A --host that is neither a DNS name nor an IP address exits 2 and writes no file."""
    result = gen_cert(tmp_path / "tls", host)
    assert result.returncode == 2
    assert "--host" in result.stderr
    assert not (tmp_path / "tls").exists()
