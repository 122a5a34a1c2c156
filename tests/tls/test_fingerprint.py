"""Tests for the fingerprint spelling and the loopback rule the bot and the agent share."""

from __future__ import annotations

import hashlib

import pytest

from bot.errors import ConfigError
from bot.tls import fingerprint_of_der, is_loopback, parse_fingerprint, short_fingerprint

HEX = hashlib.sha256(b"any bytes").hexdigest()


def test_fingerprint_is_sha256_of_the_der_bytes() -> None:
    """The fingerprint is 'sha256:' and the hex SHA-256 of exactly the bytes given."""
    assert fingerprint_of_der(b"any bytes") == "sha256:" + HEX


def test_openssl_spelling_is_accepted() -> None:
    """OpenSSL's upper-case, colon-separated form reads as the canonical one."""
    openssl = "SHA256:" + ":".join(HEX[i : i + 2].upper() for i in range(0, 64, 2))
    assert parse_fingerprint(openssl) == "sha256:" + HEX
    assert parse_fingerprint(f"  sha256:{HEX}\n") == "sha256:" + HEX


@pytest.mark.parametrize(
    "text", ["", HEX, f"sha1:{HEX}", f"sha256:{HEX[:-1]}", f"sha256:{HEX}00", f"sha256:{'g' * 64}"]
)
def test_anything_else_is_refused_naming_the_setting(text: str) -> None:
    """A missing prefix, another hash, a wrong length or non-hex is a ConfigError naming it."""
    with pytest.raises(ConfigError, match=r"\[hosts.a\] fingerprint must be 'sha256:'"):
        parse_fingerprint(text, "[hosts.a] fingerprint")


def test_short_fingerprint_keeps_the_first_sixteen_digits() -> None:
    """Messages show the prefix and 16 hex digits, enough to tell two certificates apart."""
    assert short_fingerprint("sha256:" + HEX) == "sha256:" + HEX[:16] + "…"


@pytest.mark.parametrize("host", ["127.0.0.1", "127.8.9.10", "::1", "[::1]", "localhost"])
def test_loopback_addresses(host: str) -> None:
    """Addresses only this machine reaches are loopback."""
    assert is_loopback(host)


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "10.0.0.7", "kimi-01", "192.168.1.2", ""])
def test_everything_else_is_not_loopback(host: str) -> None:
    """Every-interface addresses, private addresses and names are not loopback."""
    assert not is_loopback(host)
