"""``kimi-ops agent gen-cert``: a self-signed certificate and key for one agent.

The bot pins the certificate by its SHA-256 fingerprint, so no CA is needed: the certificate
only has to be this agent's, and the fingerprint is the one line the bot's config takes::

    $ kimi-ops agent gen-cert --out /etc/kimi-ops/tls --host kimi-01.internal --host 10.0.0.7
    sha256:3f1c0a9e5d7b2c41...

writes ``agent.crt`` (mode 0644) and ``agent.key`` (mode 0600, created so, never readable by
others even for a moment). The certificate names every ``--host`` (a DNS name or an IP address)
plus ``localhost`` and ``127.0.0.1`` as subject alternative names, so a bot that trusts it with
``ca_file`` instead of a pin also verifies the host name. The key is ECDSA P-256, the curve every
TLS client accepts; the certificate is good for ten years, as rotating it means a config change
on every bot.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from bot.errors import InputError
from bot.tls import fingerprint_of_der

__all__ = ["CERT_FILE", "KEY_FILE", "VALID_DAYS", "GeneratedCert", "generate_certificate"]

CERT_FILE = "agent.crt"
KEY_FILE = "agent.key"
VALID_DAYS = 3650
_ALWAYS = ("localhost", "127.0.0.1")
_DNS_NAME = re.compile(r"[A-Za-z0-9]([A-Za-z0-9.-]{0,252}[A-Za-z0-9])?", re.ASCII)


@dataclass(frozen=True)
class GeneratedCert:
    """Where the pair was written, the names it holds and its fingerprint."""

    cert_path: Path
    key_path: Path
    names: tuple[str, ...]
    fingerprint: str


def generate_certificate(
    out_dir: Path, hosts: Sequence[str], now: datetime.datetime | None = None
) -> GeneratedCert:
    """Write a new key and certificate for ``hosts`` into ``out_dir`` (made if missing).

    Refuses (:class:`InputError`, nothing written) when either file exists already: replacing
    the certificate breaks every bot that pins the old one, so it is a deliberate step (move the
    old files aside first).
    """
    names = _names(hosts)
    cert_path, key_path = out_dir / CERT_FILE, out_dir / KEY_FILE
    for path in (cert_path, key_path):
        if path.exists():
            raise InputError(
                f"{str(path)!r} exists; a new certificate breaks every bot that pins the old one. "
                "Move the old pair aside first if replacing it is meant"
            )
    key = ec.generate_private_key(ec.SECP256R1())
    cert = _certificate(key, names, now or datetime.datetime.now(datetime.UTC))
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        key_pem = key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
        _write(key_path, key_pem, 0o600)
        _write(cert_path, cert.public_bytes(serialization.Encoding.PEM), 0o644)
    except OSError as exc:
        raise InputError(f"cannot write the certificate into {str(out_dir)!r}: {exc}") from exc
    fingerprint = fingerprint_of_der(cert.public_bytes(serialization.Encoding.DER))
    return GeneratedCert(cert_path, key_path, names, fingerprint)


def _names(hosts: Sequence[str]) -> tuple[str, ...]:
    names: list[str] = []
    for raw in (*hosts, *_ALWAYS):
        name = raw.strip().strip("[]")
        if not (_is_ip(name) or _DNS_NAME.fullmatch(name)):
            raise InputError(
                f"--host {raw!r} is not a host name or an IP address (give one per --host)"
            )
        if name.lower() not in (known.lower() for known in names):
            names.append(name)
    return tuple(names)


def _is_ip(name: str) -> bool:
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


def _certificate(
    key: ec.EllipticCurvePrivateKey, names: Sequence[str], now: datetime.datetime
) -> x509.Certificate:
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, names[0])])
    alt_names: list[x509.GeneralName] = [
        x509.IPAddress(ipaddress.ip_address(name)) if _is_ip(name) else x509.DNSName(name)
        for name in names
    ]
    public = key.public_key()
    return (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(public)
        .serial_number(x509.random_serial_number())
        # A minute back, so a bot whose clock runs slightly behind accepts it at once.
        .not_valid_before(now - datetime.timedelta(minutes=1))
        .not_valid_after(now + datetime.timedelta(days=VALID_DAYS))
        .add_extension(x509.SubjectAlternativeName(alt_names), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=False,
                crl_sign=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(public), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(public), critical=False)
        .sign(key, hashes.SHA256())
    )


def _write(path: Path, data: bytes, mode: int) -> None:
    """Create ``path`` with ``mode`` from the start (O_EXCL: never over an existing file)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    with os.fdopen(fd, "wb") as handle:
        handle.write(data)
        handle.flush()
        os.fsync(handle.fileno())
    os.chmod(path, mode)  # the umask may have taken bits off 0644
