"""What the bot and the agent agree on about TLS: how a certificate's fingerprint is written, and
which listen addresses never leave the host.

A fingerprint is the SHA-256 of the certificate's DER bytes, written ``sha256:`` and 64 lowercase
hex digits: what ``kimi-ops agent gen-cert`` prints and what ``[hosts.NAME] fingerprint`` pins.
OpenSSL's spelling is accepted too::

    >>> parse_fingerprint("SHA256:AB:CD:...")     # openssl x509 -fingerprint -sha256
    'sha256:abcd...'

Pure: no sockets, no files.
"""

from __future__ import annotations

import hashlib
import ipaddress
import re

from bot.errors import ConfigError

__all__ = [
    "FINGERPRINT_PREFIX",
    "fingerprint_of_der",
    "is_loopback",
    "parse_fingerprint",
    "short_fingerprint",
]

FINGERPRINT_PREFIX = "sha256:"
_HEX64 = re.compile(r"[0-9a-f]{64}")
# Enough to tell two certificates apart at a glance in an error, not the whole value.
_SHORT = 16


def fingerprint_of_der(der: bytes) -> str:
    """``sha256:<hex>`` of a certificate's DER bytes."""
    return FINGERPRINT_PREFIX + hashlib.sha256(der).hexdigest()


def parse_fingerprint(text: str, where: str = "fingerprint") -> str:
    """The canonical ``sha256:<64 hex>`` of ``text`` (any case, colons allowed), or a
    :class:`ConfigError` naming ``where`` and the form expected."""
    value = text.strip()
    prefix, sep, digits = value.partition(":")
    cleaned = digits.replace(":", "").lower()
    if not sep or prefix.lower() != "sha256" or not _HEX64.fullmatch(cleaned):
        raise ConfigError(
            f"{where} must be 'sha256:' and 64 hex digits (the line `kimi-ops agent gen-cert` "
            f"prints), not {value[:80]!r}"
        )
    return FINGERPRINT_PREFIX + cleaned


def short_fingerprint(fingerprint: str) -> str:
    """The first hex digits of a fingerprint, for messages: ``sha256:3f1c0a9e5d7b2c41…``."""
    return fingerprint[: len(FINGERPRINT_PREFIX) + _SHORT] + "…"


def is_loopback(host: str) -> bool:
    """True for an address only this machine reaches: ``localhost``, 127.0.0.0/8, ``::1``.

    ``0.0.0.0`` and ``::`` listen on every interface, and any other name may resolve to one,
    so they are not loopback.
    """
    name = host.strip("[]").lower()
    if name == "localhost" or name.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False
